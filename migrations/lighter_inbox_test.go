package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/migrations"
)

// 00015 swaps the marker table's processed_at B-tree for a BRIN index on a
// database that already holds markers, and back, keeping every marker.
func TestLighterInboxMarkerKeepsMarkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := dbtest.Schema(t)
	table := pgx.Identifier{schema, "processed_messages"}.Sanitize()
	indexes := func() map[string]string {
		rows, err := pool.Query(ctx, `SELECT i.relname, am.amname FROM pg_index x
			JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_am am ON am.oid = i.relam
			WHERE x.indrelid = $1::regclass`, table)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
			var k [2]string
			return k, r.Scan(&k[0], &k[1])
		})
		require.NoError(t, err)
		out := map[string]string{}
		for _, k := range got {
			out[k[0]] = k[1]
		}
		return out
	}
	count := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n))
		return n
	}

	assert.Equal(t, map[string]string{"processed_messages_pkey": "btree", "processed_messages_processed_at_brin": "brin"}, indexes())
	_, err := migrations.DownTo(ctx, pool, schema, 14)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"processed_messages_pkey": "btree", "processed_messages_processed_at_idx": "btree"}, indexes())

	_, err = pool.Exec(ctx, `INSERT INTO `+table+` (consumer, message_id, processed_at)
		SELECT 'c', 'm' || i, now() - i * interval '1 minute' FROM generate_series(1, 500) i`)
	require.NoError(t, err)
	_, err = migrations.Up(ctx, pool, schema)
	require.NoError(t, err)
	assert.Equal(t, "brin", indexes()["processed_messages_processed_at_brin"])
	assert.Equal(t, 500, count(), "up keeps the markers")
	_, err = migrations.DownTo(ctx, pool, schema, 14)
	require.NoError(t, err)
	assert.Equal(t, 500, count(), "down keeps the markers")
	_, err = migrations.Up(ctx, pool, schema)
	require.NoError(t, err)
}
