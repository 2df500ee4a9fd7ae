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
