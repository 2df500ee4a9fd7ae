package app_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/config"
)

// serve migrates its schema at start and runs the outbox relay: a row written
// in a business transaction reaches the broker.
func TestServeMigratesAndRelaysTheOutbox(t *testing.T) {
	t.Parallel()
	schema := testbrokers.Scope(t, "postgres")
	cfg := config.Defaults()
	cfg.Admin.Addr = ""
	cfg.Broker.Kind = config.KindPostgres
	cfg.Postgres.DSN = testenv.PostgresDSN(t)
	cfg.Postgres.Schema = schema
	cfg.Outbox.PollInterval = 200 * time.Millisecond

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	svc, err := app.New(ctx, cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()

	// A consumer of the topic elsewhere: another broker instance on the schema.
	topic := brokertest.Topic(t)
	consumer := testbrokers.New(t, "postgres", schema)
	require.NoError(t, consumer.(message.SubscribeInitializer).SubscribeInitialize(topic))
	msgs, err := consumer.Subscribe(ctx, topic)
	require.NoError(t, err)

	pool, err := pgxpool.New(ctx, cfg.Postgres.DSN)
	require.NoError(t, err)
	defer pool.Close()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	sent := message.NewMessage(watermill.NewUUID(), []byte(`{"event_type":"DisputeRaised"}`))
	require.NoError(t, outbox.Table{Schema: schema}.Write(ctx, tx, topic, sent), "the schema was migrated by serve")
	require.NoError(t, tx.Commit(ctx))

	got := brokertest.Next(t, msgs, 30*time.Second)
	got.Ack()
	assert.Equal(t, sent.UUID, got.UUID)
	assert.JSONEq(t, string(sent.Payload), string(got.Payload))

	cancel()
	require.NoError(t, <-done)
}
