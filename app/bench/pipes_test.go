package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/rabbitmq"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/testbrokers"
)

// pipe is one side's client: how it publishes and how it consumes. A consumer
// acks each message after handle returns.
type pipe interface {
	publish(ctx context.Context, topic string, bodies [][]byte) error
	// consume starts consuming topic; stop ends it and waits until it has.
	consume(tb testing.TB, topic string, handle func(body []byte)) (stop func())
}

// stampLen is the width of the send time written at the start of a body.
const stampLen = 19

// stampedBody returns a body of size bytes (at least stampLen) starting with
// the current time in Unix nanoseconds, in decimal so that every broker's
// wire format carries it unchanged.
func stampedBody(size int) []byte {
	b := make([]byte, max(size, stampLen))
	copy(b, filler)
	for i := len(filler); i < len(b); i *= 2 {
		copy(b[i:], b[:i])
	}
	s := strconv.FormatInt(time.Now().UnixNano(), 10)
	copy(b[stampLen-len(s):], s)
	return b
}

var filler = bytes.Repeat([]byte{'x'}, 1024)

// sentAt reads the time stampedBody wrote; zero if the body has none.
func sentAt(body []byte) time.Time {
	if len(body) < stampLen {
		return time.Time{}
	}
	n, err := strconv.ParseInt(string(body[:stampLen]), 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func newMessages(ctx context.Context, bodies [][]byte) []*message.Message {
	msgs := make([]*message.Message, len(bodies))
	for i, b := range bodies {
		msgs[i] = message.NewMessage(watermill.NewUUID(), b)
		msgs[i].SetContext(ctx)
	}
	return msgs
}

// eventpipePipe publishes through an eventpipe broker and consumes through
// the router with app.AddRoute: the full middleware chain (correlation,
// tracing with a no-op provider, observe with its log line and metrics,
// the default failure policy, recoverer) around the handler.
type eventpipePipe struct{ ps broker.PubSub }

func (e eventpipePipe) publish(ctx context.Context, topic string, bodies [][]byte) error {
	return e.ps.Publish(topic, newMessages(ctx, bodies)...)
}

func (e eventpipePipe) consume(tb testing.TB, topic string, handle func([]byte)) func() {
	tb.Helper()
	return e.consumeAll(tb, []string{topic}, handle)
}

// consumeAll runs one router with a route per topic, as serve runs every
// enabled spec's routes in one router.
func (e eventpipePipe) consumeAll(tb testing.TB, topics []string, handle func([]byte)) func() {
	tb.Helper()
	routes := make([]route.Route, len(topics))
	for i, topic := range topics {
		routes[i] = route.Route{
			Name:  "bench-" + topic,
			Queue: topic,
			Handle: func(msg *message.Message) error {
				handle(msg.Payload)
				return nil
			},
		}
	}
	// The log line per message is built and discarded (nil logger): the
	// chain's cost without the cost of a terminal.
	return testbrokers.StartRoutes(tb, keepOpen{e.ps}, nil, nil, routes...)
}

// consumeAll consumes every topic through p: one router for eventpipe, one
// consumer per topic for a baseline. stop ends them all.
func consumeAll(tb testing.TB, p pipe, topics []string, handle func([]byte)) (stop func()) {
	tb.Helper()
	if e, ok := p.(eventpipePipe); ok {
		return e.consumeAll(tb, topics, handle)
	}
	stops := make([]func(), len(topics))
	for i, topic := range topics {
		stops[i] = p.consume(tb, topic, handle)
	}
	return func() {
		var wg sync.WaitGroup
		for _, s := range stops {
			wg.Go(s)
		}
		wg.Wait()
	}
}

// keepOpen hides the broker's Close from the router, which closes its
// subscribers when it stops: the broker outlives a repetition.
type keepOpen struct{ broker.PubSub }

func (keepOpen) Close() error { return nil }

// NacksWithDelay passes the broker's answer through (broker.NackDelayer), so
// the chain is wired as for the broker itself.
func (k keepOpen) NacksWithDelay() bool { return app.NacksWithDelay(k.PubSub) }

// watermillPipe is a Watermill publisher and subscriber used bare: no router,
// no middleware, Ack after the handler. It is the baseline for the memory
// broker (GoChannel) and for SQS (watermill-aws with its defaults).
type watermillPipe struct {
	pub message.Publisher
	sub message.Subscriber
}

func (w watermillPipe) publish(ctx context.Context, topic string, bodies [][]byte) error {
	return w.pub.Publish(topic, newMessages(ctx, bodies)...)
}

func (w watermillPipe) consume(tb testing.TB, topic string, handle func([]byte)) func() {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	msgs, err := w.sub.Subscribe(ctx, topic)
	if err != nil {
		cancel()
		tb.Fatalf("subscribe %s: %v", topic, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range msgs {
			handle(m.Payload)
			m.Ack()
		}
	}()
	return func() {
		cancel()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			tb.Errorf("subscription to %s did not end within 60s", topic)
		}
	}
}

// amqpPipe is raw amqp091-go with the settings eventpipe's RabbitMQ broker
// uses by default: a publish connection with a pool of 16 channels in
// confirm mode, persistent messages to the default exchange, every confirm of
// a call awaited (pipelined); a consume connection with one channel per
// consumer, prefetch 100 and a manual ack per message after the handler.
type amqpPipe struct {
	pubConn, subConn *amqp.Connection
	pool             chan *amqp.Channel
	prefetch         int
	// eventpipeWire sends eventpipe's wire format (rabbitmq.Marshaler: the
	// message UUID and attempt headers) instead of a bare body.
	eventpipeWire bool
}

func newAMQPPipe(tb testing.TB, url string, prefetch int) *amqpPipe {
	tb.Helper()
	p := &amqpPipe{pool: make(chan *amqp.Channel, 16), prefetch: prefetch}
	var err error
	if p.pubConn, err = amqp.Dial(url); err != nil {
		tb.Fatalf("amqp dial: %v", err)
	}
	if p.subConn, err = amqp.Dial(url); err != nil {
		tb.Fatalf("amqp dial: %v", err)
	}
	for range cap(p.pool) {
		ch, err := p.pubConn.Channel()
		if err != nil {
			tb.Fatal(err)
		}
		if err := ch.Confirm(false); err != nil {
			tb.Fatal(err)
		}
		p.pool <- ch
	}
	tb.Cleanup(func() {
		_ = p.pubConn.Close()
		_ = p.subConn.Close()
	})
	return p
}

func (p *amqpPipe) publish(ctx context.Context, topic string, bodies [][]byte) error {
	ch := <-p.pool
	defer func() { p.pool <- ch }()
	confirms := make([]*amqp.DeferredConfirmation, len(bodies))
	for i, b := range bodies {
		pub := amqp.Publishing{DeliveryMode: amqp.Persistent, MessageId: watermill.NewUUID(), Body: b}
		if p.eventpipeWire {
			var err error
			if pub, err = (rabbitmq.Marshaler{}).Marshal(message.NewMessage(pub.MessageId, b)); err != nil {
				return err
			}
		}
		var err error
		confirms[i], err = ch.PublishWithDeferredConfirmWithContext(ctx, "", topic, false, false, pub)
		if err != nil {
			return err
		}
	}
	for _, c := range confirms {
		ok, err := c.WaitContext(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("amqp: publish not confirmed")
		}
	}
	return nil
}

func (p *amqpPipe) consume(tb testing.TB, topic string, handle func([]byte)) func() {
	tb.Helper()
	ch, err := p.subConn.Channel()
	if err != nil {
		tb.Fatal(err)
	}
	if err := ch.Qos(p.prefetch, 0, false); err != nil {
		tb.Fatal(err)
	}
	deliveries, err := ch.Consume(topic, "", false, false, false, false, nil)
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for d := range deliveries {
			handle(d.Body)
			if err := d.Ack(false); err != nil {
				return
			}
		}
	}()
	return func() {
		_ = ch.Close()
		<-done
	}
}

func (p *amqpPipe) purge(tb testing.TB, queue string) {
	tb.Helper()
	ch, err := p.subConn.Channel()
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = ch.Close() }()
	if _, err := ch.QueuePurge(queue, false); err != nil {
		tb.Fatalf("purge %s: %v", queue, err)
	}
}

// pgPipe is raw pgx on the same table as eventpipe's Postgres broker, with
// the same batch and poll interval: publish is one INSERT … unnest per call;
// a consumer claims batch rows FOR UPDATE SKIP LOCKED in a transaction,
// handles them, deletes them and commits, and sleeps poll when it found none.
type pgPipe struct {
	pool  *pgxpool.Pool
	table func(topic string) string
	batch int
	poll  time.Duration
}

func (p pgPipe) publish(ctx context.Context, topic string, bodies [][]byte) error {
	ids := make([]string, len(bodies))
	for i := range ids {
		ids[i] = watermill.NewUUID()
	}
	_, err := p.pool.Exec(ctx, `INSERT INTO `+p.table(topic)+` (uuid, payload, metadata)
		SELECT u, b, '{}'::json FROM unnest($1::text[], $2::bytea[]) WITH ORDINALITY AS m(u, b, n) ORDER BY n`, ids, bodies)
	return err
}

func (p pgPipe) consume(tb testing.TB, topic string, handle func([]byte)) func() {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var failed atomic.Value
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			n, err := p.claim(ctx, topic, handle)
			if err != nil {
				if ctx.Err() == nil {
					failed.Store(err)
				}
				return
			}
			if n == 0 {
				select {
				case <-ctx.Done():
				case <-time.After(p.poll):
				}
			}
		}
	}()
	return func() {
		cancel()
		<-done
		if err, ok := failed.Load().(error); ok {
			tb.Errorf("raw pgx consumer: %v", err)
		}
	}
}

func (p pgPipe) claim(ctx context.Context, topic string, handle func([]byte)) (int, error) {
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rows, err := tx.Query(ctx, fmt.Sprintf(`SELECT "offset", payload FROM %s
		WHERE available_at <= clock_timestamp() ORDER BY "offset" LIMIT %d FOR UPDATE SKIP LOCKED`, p.table(topic), p.batch))
	if err != nil {
		return 0, err
	}
	type row struct {
		off     int64
		payload []byte
	}
	claimed, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.off, &x.payload)
		return x, err
	})
	if err != nil || len(claimed) == 0 {
		return 0, err
	}
	offsets := make([]int64, len(claimed))
	for i, c := range claimed {
		handle(c.payload)
		offsets[i] = c.off
	}
	if _, err := tx.Exec(ctx, `DELETE FROM `+p.table(topic)+` WHERE "offset" = ANY($1)`, offsets); err != nil {
		return 0, err
	}
	return len(claimed), tx.Commit(ctx)
}

// counter counts messages seen by a handler and their latencies, and closes
// done at the n-th.
type counter struct {
	n    int64
	seen atomic.Int64
	lat  []time.Duration
	done chan struct{}
	once sync.Once
}

func newCounter(n int) *counter {
	return &counter{n: int64(n), lat: make([]time.Duration, n), done: make(chan struct{})}
}

func (c *counter) handle(body []byte) {
	i := c.seen.Add(1) - 1
	if i < c.n {
		if t := sentAt(body); !t.IsZero() {
			c.lat[i] = time.Since(t)
		}
	}
	if i+1 == c.n {
		c.once.Do(func() { close(c.done) })
	}
}

// wait waits for the n-th message, failing tb after timeout.
func (c *counter) wait(tb testing.TB, what string, timeout time.Duration) {
	tb.Helper()
	select {
	case <-c.done:
	case <-time.After(timeout):
		tb.Fatalf("%s: %d of %d messages within %s", what, c.seen.Load(), c.n, timeout)
	}
}
