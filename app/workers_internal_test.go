package app

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"

	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/config"
)

// The processed-messages cleanup runs whenever serve has an inbox: with the
// relay (RunOutbox cleans it), and without it — in memory, or in PostgreSQL
// with the relay off (`eventpipe relay` elsewhere), which once had none.
func TestServeAlwaysCleansTheInbox(t *testing.T) {
	t.Parallel()
	names := func(s *Service) []string {
		var out []string
		for _, w := range s.workers() {
			out = append(out, w.Name)
		}
		return out
	}
	withRelay, withoutRelay := config.Defaults(), config.Defaults()
	withRelay.Outbox.Relay, withoutRelay.Outbox.Relay = true, false
	db := new(pgxpool.Pool) // never used: workers() only builds the list

	assert.Equal(t, []string{"outbox relay"}, names(&Service{cfg: withRelay, db: db, inbox: inbox.NewMemory()}), "the relay's workers clean the inbox")
	assert.Equal(t, []string{"inbox janitor"}, names(&Service{cfg: withoutRelay, db: db, inbox: inbox.NewMemory()}), "inbox in PostgreSQL, relay off")
	assert.Equal(t, []string{"inbox janitor"}, names(&Service{cfg: withRelay, inbox: inbox.NewMemory()}), "embedded mode")
}
