package disputes_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/handlers/disputes"
)

// The make run demo, as serve runs it on the embedded broker.
func TestSampleTraffic(t *testing.T) {
	t.Parallel()
	ps := testbrokers.New(t, "memory", "")
	store := disputes.NewMemory(disputes.MemoryOptions{Outbox: outbox.AfterCommit{Publisher: ps}})
	objects := disputes.NewMemoryObjects()
	h := disputes.Handlers{Store: store, Inbox: inbox.NewMemory(), Objects: objects}
	testbrokers.StartRoutes(t, ps, nil, nil, h.Routes()...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, disputes.SampleTraffic(ctx, store, objects, ps, slog.New(slog.DiscardHandler)))
	require.NoError(t, ctx.Err(), "done before the deadline")
	s, err := store.KBStats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), s.Documents)
}
