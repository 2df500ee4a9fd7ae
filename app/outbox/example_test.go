package outbox_test

import (
	"context"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventpipe/eventpipe/app/outbox"
)

// A business write and the event announcing it commit together; the relay
// publishes the event afterwards.
func ExampleWrite() {
	ctx := context.Background()
	var pool *pgxpool.Pool // from the composition root, schema migrated

	raiseDispute := func(ctx context.Context, disputeID string, event []byte) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, `INSERT INTO ops.disputes (id) VALUES ($1)`, disputeID); err != nil {
			return err
		}
		msg := message.NewMessage("evt_"+disputeID, event) // the UUID is the event id
		msg.Metadata.Set(outbox.OrderingKeyMetadata, disputeID)
		if err := outbox.Write(ctx, tx, "domain-events", msg); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	_ = raiseDispute(ctx, "dsp_1", []byte(`{"event_type":"DisputeRaised"}`))
}

// An operator's tool brings back the rows parked on one topic, after the
// cause of their refusal was fixed; the relays are woken at once.
func ExampleTable_Requeue() {
	ctx := context.Background()
	var pool *pgxpool.Pool
	n, err := outbox.Table{}.Requeue(ctx, pool, outbox.RequeueFilter{All: true, Topic: "domain-events"})
	if err != nil {
		slog.Error("requeue failed", "error", err)
		return
	}
	slog.Info("parked outbox rows requeued", "count", n)
}

// The composition root runs the relay and the janitors beside the router.
func ExampleRunWorkers() {
	ctx := context.Background()
	var (
		pool      *pgxpool.Pool
		publisher message.Publisher // app.NewBroker(ctx, cfg, logger)
	)
	_ = outbox.RunWorkers(ctx, pool, publisher, outbox.WorkersConfig{
		Relay: outbox.RelayConfig{StrictOrderTopics: []string{"booking.sessions"}},
	}, slog.Default())
}
