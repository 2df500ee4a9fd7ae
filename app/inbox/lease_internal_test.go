package inbox

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
)

// A holder that dies stops renewing: its lease expires one ttl later and a
// redelivery then takes the work over.
func TestLeaseOfADeadHolderExpires(t *testing.T) {
	t.Parallel()
	pool, schema := dbtest.Schema(t)
	pg, err := NewPostgres(pool, schema)
	require.NoError(t, err)
	for name, s := range map[string]interface {
		leaser
		Store
	}{"memory": NewMemory(), "postgres": pg} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ok, _, _, err := s.acquire(ctx, memKey{"c", "m1"}, "dead-holder", 400*time.Millisecond)
			require.NoError(t, err)
			require.True(t, ok)
			_, err = s.Lease(ctx, "c", "m1", time.Minute)
			require.ErrorIs(t, err, ErrLeased)
			require.Eventually(t, func() bool {
				l, err := s.Lease(ctx, "c", "m1", time.Minute)
				if err != nil {
					return false
				}
				l.Release()
				return true
			}, 5*time.Second, 50*time.Millisecond)
			n, err := s.Cleanup(ctx, time.Hour)
			require.NoError(t, err)
			assert.Zero(t, n, "no marker was ever written")
		})
	}
}

// A holder whose process died (its PostgreSQL session is gone: kill -9) does
// not hold the work back for a TTL: the next worker takes the lease over at
// once. While the holder's session lives, its lease stands. (Two stores are
// two processes: each names its leases by a session of its own.)
func TestLeaseOfACrashedHolderIsTakenOverAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := dbtest.Schema(t)
	a, err := NewPostgres(pool, schema)
	require.NoError(t, err)
	b, err := NewPostgres(pool, schema)
	require.NoError(t, err)
	t.Cleanup(func() { a.Close(); b.Close() })

	held, err := a.Lease(ctx, "c", "m", time.Minute)
	require.NoError(t, err)
	_, err = b.Lease(ctx, "c", "m", time.Minute)
	require.ErrorIs(t, err, ErrLeased, "the holder lives: its lease stands")

	var pid int32
	require.NoError(t, pool.QueryRow(ctx, `SELECT holder_pid FROM `+a.leases+` WHERE consumer = 'c' AND message_id = 'm'`).Scan(&pid))
	var killed bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&killed))
	require.True(t, killed)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var alive bool
		if assert.NoError(c, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)`, pid).Scan(&alive)) {
			assert.False(c, alive)
		}
	}, 5*time.Second, 20*time.Millisecond)

	start := time.Now()
	taken, err := b.Lease(ctx, "c", "m", time.Minute)
	require.NoError(t, err, "the dead holder's lease is taken over")
	assert.Less(t, time.Since(start), 5*time.Second, "at once, not after the minute's TTL")
	held.Release() // the old holder's late release leaves the new lease alone
	_, err = a.Lease(ctx, "c", "m", time.Minute)
	require.ErrorIs(t, err, ErrLeased, "b holds it now")
	taken.Release()
}
