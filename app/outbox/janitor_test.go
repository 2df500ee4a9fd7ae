package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/outbox"
)

func TestJanitorDeletesOnlyOldPublishedRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.write(t, "t", msgs("old", 3)...)
	e.write(t, "t", msgs("recent", 2)...)
	e.write(t, "t", msgs("unpublished", 2)...)
	e.write(t, "t", msgs("parked", 1)...)
	_, err := e.pool.Exec(ctx, `UPDATE `+e.q("outbox")+` SET published_at = now() - interval '8 days' WHERE event_id LIKE 'old-%'`)
	require.NoError(t, err)
	_, err = e.pool.Exec(ctx, `UPDATE `+e.q("outbox")+` SET published_at = now() - interval '6 days' WHERE event_id LIKE 'recent-%'`)
	require.NoError(t, err)
	_, err = e.pool.Exec(ctx, `UPDATE `+e.q("outbox")+` SET created_at = now() - interval '30 days' WHERE event_id LIKE 'unpublished-%'`)
	require.NoError(t, err)
	_, err = e.pool.Exec(ctx, `UPDATE `+e.q("outbox")+` SET parked_at = now() - interval '30 days' WHERE event_id LIKE 'parked-%'`)
	require.NoError(t, err)

	j := outbox.Janitor{Pool: e.pool, Schema: e.schema}
	n, err := j.DeletePublished(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(3), n)
	assert.Equal(t, 0, e.count(t, "event_id LIKE 'old-%'"))
	assert.Equal(t, 5, e.count(t, "true"))
}

// RunWorkers relays and stops cleanly when its context ends.
func TestRunWorkers(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newEnv(t)
	pub := &fakePublisher{}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- outbox.RunWorkers(runCtx, e.pool, pub, outbox.WorkersConfig{
			Relay: outbox.RelayConfig{Schema: e.schema, PollInterval: 20 * time.Millisecond},
			Inbox: inbox.NewMemory(),
		}, nil)
	}()
	e.write(t, "t", msgs("m", 3)...)
	require.Eventually(t, func() bool { return len(pub.sent()) == 3 }, 10*time.Second, 10*time.Millisecond)
	stop()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-ctx.Done():
		require.FailNow(t, "RunWorkers did not stop")
	}

	err := outbox.RunWorkers(ctx, e.pool, pub, outbox.WorkersConfig{Relay: outbox.RelayConfig{BatchSize: -1}}, nil)
	require.ErrorContains(t, err, "batch size")
}
