package cli_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/cli"
	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/app/testenv"
)

// `eventpipe relay` publishes the outbox to the configured broker (memory
// here) and exits 0 when interrupted.
func TestRelayCommand(t *testing.T) {
	t.Parallel()
	pool, schema := dbtest.Schema(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, outbox.Table{Schema: schema}.Write(ctx, tx, "demo.greetings", message.NewMessage("evt-cli", []byte(`{"name":"Ada"}`))))
	require.NoError(t, tx.Commit(ctx))

	runCtx, stop := context.WithCancel(ctx)
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(runCtx, []string{"relay", "--schema", schema}, strings.NewReader(""), &out, &errOut,
			[]string{"EVENTPIPE_POSTGRES_DSN=" + testenv.PostgresDSN(t), "EVENTPIPE_BROKER=memory"})
	}()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var published bool
		if assert.NoError(c, pool.QueryRow(ctx, `SELECT published_at IS NOT NULL FROM `+pgx.Identifier{schema, "outbox"}.Sanitize()+` WHERE event_id = 'evt-cli'`).Scan(&published)) {
			assert.True(c, published)
		}
	}, 20*time.Second, 20*time.Millisecond)
	stop()
	select {
	case code := <-done:
		assert.Equal(t, cli.ExitOK, code, errOut.String())
	case <-ctx.Done():
		require.FailNow(t, "relay did not stop")
	}
	assert.Contains(t, errOut.String(), "outbox relay started")
}
