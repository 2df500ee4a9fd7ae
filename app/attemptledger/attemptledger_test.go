package attemptledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/attemptledger"
	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
)

func TestMemory(t *testing.T) {
	t.Parallel()
	runSuite(t, func(_ *testing.T, ttl time.Duration) ledger { return attemptledger.NewMemory(ttl) })
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	runSuite(t, func(t *testing.T, ttl time.Duration) ledger {
		pool, schema := dbtest.Schema(t)
		l, err := attemptledger.NewPostgres(pool, schema, ttl)
		require.NoError(t, err)
		return l
	})
}

// Rows of settled messages whose Forget failed do not pile up: a bump
// deletes every row older than the ttl.
func TestPostgresExpiresOldRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := dbtest.Schema(t)
	l, err := attemptledger.NewPostgres(pool, schema, time.Hour)
	require.NoError(t, err)
	table := pgx.Identifier{schema, "attempt_ledger"}.Sanitize()
	for _, id := range []string{"old", "recent"} {
		_, err := l.Bump(ctx, "q.fifo", id)
		require.NoError(t, err)
	}
	_, err = pool.Exec(ctx, `UPDATE `+table+` SET updated_at = now() - interval '2 hours' WHERE message_id = 'old'`)
	require.NoError(t, err)

	_, err = l.Bump(ctx, "other.fifo", "m1")
	require.NoError(t, err)
	rows, err := pool.Query(ctx, `SELECT message_id FROM `+table+` ORDER BY message_id`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	assert.Equal(t, []string{"m1", "recent"}, ids)
}

func TestNewPostgresRefusesABadSchema(t *testing.T) {
	t.Parallel()
	_, err := attemptledger.NewPostgres(nil, "Bad-Schema", 0)
	require.Error(t, err)
}
