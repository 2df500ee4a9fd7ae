package migrations_test

import (
	"context"
	"io/fs"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/migrations"
)

func TestUpStatusDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	schema := dbtest.NewSchemaName(t)
	t.Cleanup(func() { dbtest.Drop(t, pool, schema) })
	tablesIn := func() []string {
		rows, err := pool.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY 1`, schema)
		require.NoError(t, err)
		var out []string
		for rows.Next() {
			var n string
			require.NoError(t, rows.Scan(&n))
			out = append(out, n)
		}
		require.NoError(t, rows.Err())
		return out
	}

	st, err := migrations.StatusOf(ctx, pool, schema)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(st), 2)
	for _, s := range st {
		assert.False(t, s.Applied, s.Name)
	}
	assert.Equal(t, "00001_processed_messages.sql", st[0].Name)
	assert.Equal(t, int64(1), st[0].Version)

	res, err := migrations.Up(ctx, pool, schema)
	require.NoError(t, err)
	require.Len(t, res, len(st))
	assert.Equal(t, "up", res[0].Direction)
	assert.Equal(t, "00002_outbox.sql", res[1].Name)
	assert.Contains(t, tablesIn(), "outbox")
	assert.Contains(t, tablesIn(), "processed_messages")
	assert.Contains(t, tablesIn(), migrations.VersionTable, "goose's table lives in the schema")

	res, err = migrations.Up(ctx, pool, schema)
	require.NoError(t, err)
	assert.Empty(t, res, "idempotent")

	st, err = migrations.StatusOf(ctx, pool, schema)
	require.NoError(t, err)
	for _, s := range st {
		assert.True(t, s.Applied, s.Name)
		assert.False(t, s.AppliedAt.IsZero(), s.Name)
	}

	last := st[len(st)-1]
	res, err = migrations.Down(ctx, pool, schema)
	require.NoError(t, err)
	require.Len(t, res, 1)
	assert.Equal(t, last.Version, res[0].Version)
	assert.Equal(t, "down", res[0].Direction)

	res, err = migrations.DownTo(ctx, pool, schema, 0)
	require.NoError(t, err)
	assert.Len(t, res, len(st)-1)
	assert.Equal(t, []string{migrations.VersionTable}, tablesIn(), "every table dropped")
	res, err = migrations.Down(ctx, pool, schema)
	require.NoError(t, err)
	assert.Empty(t, res, "nothing left to roll back")

	_, err = migrations.Up(ctx, pool, schema)
	require.NoError(t, err, "up again after a full down")
}

// Instances starting together migrate once, serialized by the lock.
func TestConcurrentUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	schema := dbtest.NewSchemaName(t)
	t.Cleanup(func() { dbtest.Drop(t, pool, schema) })
	_, err := pool.Exec(ctx, `CREATE SCHEMA `+schema)
	require.NoError(t, err)

	var wg sync.WaitGroup
	applied := make([]int, 4)
	for i := range applied {
		wg.Go(func() {
			res, err := migrations.Up(ctx, pool, schema)
			assert.NoError(t, err)
			applied[i] = len(res)
		})
	}
	wg.Wait()
	total := 0
	for _, n := range applied {
		total += n
	}
	st, err := migrations.StatusOf(ctx, pool, schema)
	require.NoError(t, err)
	assert.Equal(t, len(st), total, "each migration applied exactly once")
}

// Schemas are independent: migrating one leaves the others alone.
func TestSchemasAreIndependent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, a := dbtest.Schema(t)
	b := dbtest.NewSchemaName(t)
	t.Cleanup(func() { dbtest.Drop(t, pool, b) })
	st, err := migrations.StatusOf(ctx, pool, b)
	require.NoError(t, err)
	assert.False(t, st[0].Applied)
	st, err = migrations.StatusOf(ctx, pool, a)
	require.NoError(t, err)
	assert.True(t, st[0].Applied)
}

func TestValidateSchema(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"eventpipe", "_x", "ept_0a1b2c", "a23456789012345678901234567890123456789012345678901234567"[:56]} {
		assert.NoError(t, migrations.ValidateSchema(ok), ok)
	}
	for _, bad := range []string{"", "Eventpipe", "1abc", "a-b", `a"b`, "a b", "a23456789012345678901234567890123456789012345678901234567"} {
		assert.Error(t, migrations.ValidateSchema(bad), bad)
	}
	_, err := migrations.Up(context.Background(), nil, "Bad")
	require.Error(t, err)
	assert.Equal(t, "eventpipe", migrations.SchemaOrDefault(""))
}

// Every embedded file is a numbered goose migration with both directions,
// so `migrate down` can always undo what `up` did.
func TestFilesHaveUpAndDown(t *testing.T) {
	t.Parallel()
	entries, err := fs.ReadDir(migrations.FS(), ".")
	require.NoError(t, err)
	require.NotEmpty(t, entries)
	for _, e := range entries {
		b, err := fs.ReadFile(migrations.FS(), e.Name())
		require.NoError(t, err)
		assert.Regexp(t, `^\d{5}_[a-z0-9_]+\.sql$`, e.Name())
		assert.Contains(t, string(b), "-- +goose Up", e.Name())
		assert.Contains(t, string(b), "-- +goose Down", e.Name())
	}
}
