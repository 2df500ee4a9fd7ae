package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/postgres"
)

// A queue table leaves room on its pages for the claim's update (fill factor
// 70): a new table is made with it, a table made before gets it, and a fill
// factor an operator chose stays.
func TestQueueTablesLeaveRoomForTheClaimsUpdate(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	ps := newPubSub(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, cfg.DSN)
	require.NoError(t, err)
	defer conn.Close(ctx)
	options := func(topic string) []string {
		var opts []string
		require.NoError(t, conn.QueryRow(ctx, `SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = $1::regclass`,
			pgx.Identifier{cfg.Schema, postgres.DefaultTablePrefix + topic}.Sanitize()).Scan(&opts))
		return opts
	}
	oldTable := func(topic string) {
		_, err := conn.Exec(ctx, `CREATE TABLE `+pgx.Identifier{cfg.Schema, postgres.DefaultTablePrefix + topic}.Sanitize()+` (
			"offset" BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, uuid TEXT NOT NULL, payload BYTEA NOT NULL,
			metadata JSON NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now(), available_at TIMESTAMPTZ NOT NULL DEFAULT now())`)
		require.NoError(t, err)
	}

	fresh := brokertest.Topic(t)
	require.NoError(t, ps.SubscribeInitialize(fresh))
	assert.Equal(t, []string{"fillfactor=70"}, options(fresh), "a new queue table")

	old := brokertest.Topic(t)
	oldTable(old)
	require.Empty(t, options(old))
	require.NoError(t, ps.SubscribeInitialize(old))
	assert.Equal(t, []string{"fillfactor=70"}, options(old), "a table made before the fill factor")

	chosen := brokertest.Topic(t)
	oldTable(chosen)
	_, err = conn.Exec(ctx, `ALTER TABLE `+pgx.Identifier{cfg.Schema, postgres.DefaultTablePrefix + chosen}.Sanitize()+` SET (fillfactor = 90)`)
	require.NoError(t, err)
	require.NoError(t, ps.SubscribeInitialize(chosen))
	assert.Equal(t, []string{"fillfactor=90"}, options(chosen), "an operator's fill factor")
}
