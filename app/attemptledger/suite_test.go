package attemptledger_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ledger is what both implementations offer (rabbitmq.AttemptLedger).
type ledger interface {
	Bump(ctx context.Context, queue, messageID string) (int, error)
	Forget(ctx context.Context, queue, messageID string) error
}

// runSuite is the behaviour both ledgers share; newLedger returns a fresh,
// empty one whose rows expire after ttl.
func runSuite(t *testing.T, newLedger func(t *testing.T, ttl time.Duration) ledger) {
	t.Helper()
	ctx := context.Background()

	t.Run("counts every bump from 1", func(t *testing.T) {
		t.Parallel()
		l := newLedger(t, 0)
		for want := 1; want <= 3; want++ {
			n, err := l.Bump(ctx, "q.fifo", "m1")
			require.NoError(t, err)
			assert.Equal(t, want, n)
		}
	})

	t.Run("queues and messages are counted apart", func(t *testing.T) {
		t.Parallel()
		l := newLedger(t, 0)
		for _, k := range [][2]string{{"a.fifo", "m1"}, {"a.fifo", "m1"}, {"a.fifo", "m2"}, {"b.fifo", "m1"}} {
			_, err := l.Bump(ctx, k[0], k[1])
			require.NoError(t, err)
		}
		n, err := l.Bump(ctx, "a.fifo", "m1")
		require.NoError(t, err)
		assert.Equal(t, 3, n)
		n, err = l.Bump(ctx, "a.fifo", "m2")
		require.NoError(t, err)
		assert.Equal(t, 2, n)
		n, err = l.Bump(ctx, "b.fifo", "m1")
		require.NoError(t, err)
		assert.Equal(t, 2, n)
	})

	t.Run("forget starts the count again", func(t *testing.T) {
		t.Parallel()
		l := newLedger(t, 0)
		_, err := l.Bump(ctx, "q.fifo", "m1")
		require.NoError(t, err)
		_, err = l.Bump(ctx, "q.fifo", "m1")
		require.NoError(t, err)
		require.NoError(t, l.Forget(ctx, "q.fifo", "m1"))
		require.NoError(t, l.Forget(ctx, "q.fifo", "m1"), "forgetting twice is fine")
		require.NoError(t, l.Forget(ctx, "q.fifo", "never-bumped"))
		n, err := l.Bump(ctx, "q.fifo", "m1")
		require.NoError(t, err)
		assert.Equal(t, 1, n)
	})

	t.Run("a row not bumped for the ttl starts again", func(t *testing.T) {
		t.Parallel()
		l := newLedger(t, time.Second)
		_, err := l.Bump(ctx, "q.fifo", "m1")
		require.NoError(t, err)
		_, err = l.Bump(ctx, "q.fifo", "m1")
		require.NoError(t, err)
		time.Sleep(1500 * time.Millisecond)
		n, err := l.Bump(ctx, "q.fifo", "m1")
		require.NoError(t, err)
		assert.Equal(t, 1, n, "expired")
	})

	t.Run("concurrent bumps are each counted", func(t *testing.T) {
		t.Parallel()
		l := newLedger(t, 0)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				_, err := l.Bump(ctx, "q.fifo", "m1")
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		n, err := l.Bump(ctx, "q.fifo", "m1")
		require.NoError(t, err)
		assert.Equal(t, 9, n)
	})

	t.Run("queue and message id are required", func(t *testing.T) {
		t.Parallel()
		l := newLedger(t, 0)
		_, err := l.Bump(ctx, "", "m1")
		require.Error(t, err)
		_, err = l.Bump(ctx, "q.fifo", "")
		require.Error(t, err)
		require.Error(t, l.Forget(ctx, "q.fifo", ""))
	})
}
