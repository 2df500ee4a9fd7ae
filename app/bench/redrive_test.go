package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// redriveN is how many dead letters an RD repetition moves: the issue's
// 10,000 in the full pass, a few hundred in the quick one, a handful in the
// smoke test.
func (m mode) redriveN() int {
	if m.name == fullMode.name {
		return 10000
	}
	return m.n(2000)
}

// redriveTarget is the issue's: a redrive within 3× the time of the bare
// loop an operator writes with the raw client.
var redriveTarget = atLeast(1.0 / 3)

// prefillDLQ empties source and dlq and fills dlq with n dead letters whose
// eventpipe record names source, 100 per publish.
func prefillDLQ(tb testing.TB, e *env, source, dlq string, n int) {
	ps := e.ours.(eventpipePipe).ps
	e.purge(tb, source)
	e.purge(tb, dlq)
	at := time.Now().UTC()
	msgs := make([]*message.Message, 0, n)
	for i := range n {
		msg := message.NewMessage(fmt.Sprintf("rd-%d-%d", at.UnixNano(), i), stampedBody(256))
		metadata.SetDeadLetter(msg, metadata.DeadLetter{Reason: "bench", Class: "permanent", Attempts: 3, SourceQueue: source, DeadLetteredAt: at})
		msgs = append(msgs, msg)
	}
	for i := 0; i < n; i += 100 {
		if err := ps.Publish(dlq, msgs[i:min(i+100, n)]...); err != nil {
			tb.Fatalf("RD prefill: %v", err)
		}
	}
}

// eventpipeRedrive is the eventpipe side of an RD pair: app.Redrive of the
// whole DLQ (in batches of 100 on a broker.BatchReceiver), timed from the
// start to its last progress report, not its idle wait.
func eventpipeRedrive(e *env, source, dlq string, n int) side {
	ps := e.ours.(eventpipePipe).ps
	return side{name: "eventpipe dlq redrive", run: func(tb testing.TB) Sample {
		prefillDLQ(tb, e, source, dlq, n)
		ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
		defer cancel()
		start := time.Now()
		var last time.Time
		done, err := app.Redrive(ctx, ps, ps, dlq, app.RedriveOptions{Idle: 300 * time.Millisecond,
			Progress: func(app.RedriveProgress) { last = time.Now() }})
		if err != nil || len(done) != n {
			tb.Fatalf("RD %s eventpipe: %d of %d redriven: %v", e.kind, len(done), n, err)
		}
		return Sample{Messages: n, Elapsed: last.Sub(start)}
	}}
}

// redrivePairs: RD, n dead letters (eventpipe's record naming their source)
// moved from a DLQ back to the source queue, on RabbitMQ and on the Postgres
// broker. eventpipe is app.Redrive, which reads batches of 100 (RabbitMQ: a
// consumer of its own; Postgres: one claim statement), publishes each
// batch's copies in one call (RabbitMQ: confirms pipelined; Postgres: one
// INSERT) and settles the batch at once (one multiple ack; one statement).
// The baselines are the loops an operator writes with the raw client, one
// message at a time: amqp091-go consume (prefetch 100), publish the body to
// the source, wait for its confirm, ack, next; pgx: in one transaction per
// message, take the oldest row (FOR UPDATE SKIP LOCKED), insert it into the
// source's table, delete it, commit.
func redrivePairs(tb testing.TB, m mode, rabbit, pg *env) []pair {
	return []pair{rabbitRedrivePair(tb, m, rabbit), postgresRedrivePair(tb, m, pg)}
}

func rabbitRedrivePair(tb testing.TB, m mode, rabbit *env) pair {
	n := m.redriveN()
	raw := rabbit.base.(*amqpPipe)
	source, dlq := rabbit.topic(tb), rabbit.topic(tb)
	p := pair{id: "RD", scenario: "rabbitmq redrive of dead letters", kind: throughput, checks: []*check{redriveTarget},
		settings: fmt.Sprintf("body=256B n=%d batch=100 vs prefetch=100 publish-confirm-ack per message", n)}
	p.sides = append(p.sides, eventpipeRedrive(rabbit, source, dlq, n))
	p.sides = append(p.sides, side{name: "amqp091-go consume-publish-ack loop", run: func(tb testing.TB) Sample {
		prefillDLQ(tb, rabbit, source, dlq, n)
		ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
		defer cancel()
		sub, err := raw.subConn.Channel()
		if err != nil {
			tb.Fatal(err)
		}
		defer func() { _ = sub.Close() }()
		pub := <-raw.pool
		defer func() { raw.pool <- pub }()
		if err := sub.Qos(100, 0, false); err != nil {
			tb.Fatal(err)
		}
		start := time.Now()
		deliveries, err := sub.Consume(dlq, "", false, false, false, false, nil)
		if err != nil {
			tb.Fatal(err)
		}
		for moved := 0; moved < n; moved++ {
			var d amqp.Delivery
			select {
			case d = <-deliveries:
			case <-ctx.Done():
				tb.Fatalf("RD baseline: %d of %d moved", moved, n)
			}
			confirm, err := pub.PublishWithDeferredConfirmWithContext(ctx, "", source, false, false,
				amqp.Publishing{DeliveryMode: amqp.Persistent, MessageId: d.MessageId, Headers: d.Headers, Body: d.Body})
			if err != nil {
				tb.Fatal(err)
			}
			if ok, err := confirm.WaitContext(ctx); err != nil || !ok {
				tb.Fatalf("RD baseline: not confirmed: %v", err)
			}
			if err := d.Ack(false); err != nil {
				tb.Fatal(err)
			}
		}
		return Sample{Messages: n, Elapsed: time.Since(start)}
	}})
	return p
}

func postgresRedrivePair(tb testing.TB, m mode, pg *env) pair {
	n := m.redriveN()
	raw := pg.base.(pgPipe)
	source, dlq := pg.topic(tb), pg.topic(tb)
	p := pair{id: "RD", scenario: "postgres redrive of dead letters", kind: throughput, checks: []*check{redriveTarget},
		settings: fmt.Sprintf("body=256B n=%d batch=100 vs a transaction per message", n)}
	p.sides = append(p.sides, eventpipeRedrive(pg, source, dlq, n))
	p.sides = append(p.sides, side{name: "pgx take-insert-delete loop", run: func(tb testing.TB) Sample {
		prefillDLQ(tb, pg, source, dlq, n)
		ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
		defer cancel()
		move := `WITH taken AS (
				SELECT "offset", uuid, payload, metadata FROM ` + raw.table(dlq) + `
				ORDER BY "offset" LIMIT 1 FOR UPDATE SKIP LOCKED
			), gone AS (
				DELETE FROM ` + raw.table(dlq) + ` AS d USING taken WHERE d."offset" = taken."offset"
			)
			INSERT INTO ` + raw.table(source) + ` (uuid, payload, metadata) SELECT uuid, payload, metadata FROM taken`
		start := time.Now()
		for moved := 0; moved < n; moved++ {
			err := pgx.BeginFunc(ctx, raw.pool, func(tx pgx.Tx) error {
				tag, err := tx.Exec(ctx, move)
				if err == nil && tag.RowsAffected() != 1 {
					err = fmt.Errorf("%d rows moved", tag.RowsAffected())
				}
				return err
			})
			if err != nil {
				tb.Fatalf("RD baseline: %d of %d moved: %v", moved, n, err)
			}
		}
		return Sample{Messages: n, Elapsed: time.Since(start)}
	}})
	return p
}
