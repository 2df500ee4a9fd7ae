package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// redrivePair: RD, n dead letters (eventpipe's record naming their source)
// moved from a DLQ back to the source queue on RabbitMQ. eventpipe is
// app.Redrive, which reads batches of 100 through a consumer of its own,
// publishes each batch's copies in one call (confirms pipelined) and acks the
// batch with one multiple ack; the baseline is the loop an operator writes
// with amqp091-go: consume (prefetch 100), publish the body to the source,
// wait for its confirm, ack, next. Both are timed from the start to the last
// ack (eventpipe: its last progress report, not its idle wait).
func redrivePair(tb testing.TB, m mode, rabbit *env) pair {
	n := m.n(2000)
	ps := rabbit.ours.(eventpipePipe).ps
	raw := rabbit.base.(*amqpPipe)
	source, dlq := rabbit.topic(tb), rabbit.topic(tb)
	prefill := func(tb testing.TB) {
		rabbit.purge(tb, source)
		rabbit.purge(tb, dlq)
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
	p := pair{id: "RD", scenario: "rabbitmq redrive of dead letters", kind: throughput,
		settings: fmt.Sprintf("body=256B n=%d batch=100 vs prefetch=100 publish-confirm-ack per message", n)}
	p.sides = append(p.sides, side{name: "eventpipe dlq redrive", run: func(tb testing.TB) Sample {
		prefill(tb)
		ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
		defer cancel()
		start := time.Now()
		var last time.Time
		done, err := app.Redrive(ctx, ps, ps, dlq, app.RedriveOptions{Idle: 300 * time.Millisecond,
			Progress: func(app.RedriveProgress) { last = time.Now() }})
		if err != nil || len(done) != n {
			tb.Fatalf("RD eventpipe: %d of %d redriven: %v", len(done), n, err)
		}
		return Sample{Messages: n, Elapsed: last.Sub(start)}
	}})
	p.sides = append(p.sides, side{name: "amqp091-go consume-publish-ack loop", run: func(tb testing.TB) Sample {
		prefill(tb)
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
