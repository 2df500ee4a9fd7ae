package rabbitmq_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/rabbitmq"
	"github.com/eventpipe/eventpipe/app/topology"
)

// sampleTopology has what the specs use: a topic exchange and a direct DLX; a
// classic queue dead-lettering through the DLX with its own routing key; a
// quorum queue with a delivery limit; a FIFO queue dead-lettering through the
// default exchange; a fan-out queue bound with a wildcard key.
func sampleTopology() topology.Topology {
	return topology.Topology{
		Name: "sample",
		Exchanges: []topology.Exchange{
			{Name: "core", Type: topology.Topic},
			{Name: "core.dlx", Type: topology.Direct},
		},
		Queues: []topology.Queue{
			{
				Name: "q.analyze", Retention: time.Hour,
				DeadLetter: &topology.DeadLetter{Queue: "dlq.analyze", Exchange: "core.dlx", RoutingKey: "dlq.q.analyze"},
			},
			{
				Name: "q.generate", Type: topology.Quorum, MaxReceives: 2,
				DeadLetter: &topology.DeadLetter{Queue: "dlq.generate", Exchange: "core.dlx", Retention: 14 * 24 * time.Hour},
			},
			{
				Name: "booking.fifo", FIFO: true, MaxReceives: 5,
				DeadLetter: &topology.DeadLetter{Queue: "booking-dlq.fifo"},
			},
			{Name: "q.realtime"},
		},
		Bindings: []topology.Binding{
			{Exchange: "core", Queue: "q.analyze", Pattern: "analyze.resume"},
			{Exchange: "core", Queue: "q.generate", Pattern: "generate.questions"},
			{Exchange: "core", Queue: "booking.fifo", Pattern: "booking.#"},
			{Exchange: "core", Queue: "q.realtime", Pattern: "realtime.session.*"},
		},
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func amqpChannel(t *testing.T, amqpURL string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(amqpURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	return ch
}

func publish(t *testing.T, ch *amqp.Channel, exchange, key, body string) {
	t.Helper()
	require.NoError(t, ch.PublishWithContext(ctxFor(t), exchange, key, true, false,
		amqp.Publishing{Body: []byte(body), DeliveryMode: amqp.Persistent}))
}

// getOne waits until queue has a message and takes it (unacked).
func getOne(t *testing.T, ch *amqp.Channel, queue string) amqp.Delivery {
	t.Helper()
	var d amqp.Delivery
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var ok bool
		var err error
		d, ok, err = ch.Get(queue, false)
		if assert.NoError(c, err) {
			assert.True(c, ok)
		}
	}, 10*time.Second, 20*time.Millisecond, "no message in %s", queue)
	return d
}

func liveQueue(t *testing.T, live rabbitmq.Live, name string) rabbitmq.LiveQueue {
	t.Helper()
	for _, q := range live.Queues {
		if q.Name == name {
			return q
		}
	}
	require.Failf(t, "queue not found", "queue %s is not on the broker", name)
	return rabbitmq.LiveQueue{}
}

func argStrings(args map[string]any) map[string]string {
	out := map[string]string{}
	for k, v := range args {
		out[k] = fmt.Sprint(v)
	}
	return out
}

func TestApplyProvisionsNativelyAndIdempotently(t *testing.T) {
	t.Parallel()
	amqpURL, vhost := newVhost(t)
	ps := newPubSub(t, amqpURL, nil)
	top := sampleTopology()

	before, err := ps.Plan(ctxFor(t), top)
	require.NoError(t, err)
	assert.Len(t, before, 2+7+6, "every exchange, queue and binding is missing at first:\n%s", before)
	for _, c := range before {
		assert.Equal(t, topology.Missing, c.Kind, c.String())
	}

	unresolved, err := ps.Apply(ctxFor(t), top)
	require.NoError(t, err)
	require.Empty(t, unresolved, unresolved.String())
	plan, err := ps.Plan(ctxFor(t), top)
	require.NoError(t, err)
	require.True(t, plan.InSync(), plan.String())

	// The arguments are RabbitMQ's own, not just equal on both sides of Diff.
	live, err := rabbitmq.ReadLive(ctxFor(t), vhost)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{
		"x-dead-letter-exchange": "core.dlx", "x-dead-letter-routing-key": "dlq.q.analyze", "x-message-ttl": "3600000",
	}, argStrings(liveQueue(t, live, "q.analyze").Arguments))
	assert.Equal(t, map[string]string{
		"x-queue-type": "quorum", "x-delivery-limit": "2",
		"x-dead-letter-exchange": "core.dlx", "x-dead-letter-routing-key": "dlq.generate",
	}, argStrings(liveQueue(t, live, "q.generate").Arguments))
	assert.Equal(t, map[string]string{"x-queue-type": "quorum", "x-message-ttl": "1209600000"},
		argStrings(liveQueue(t, live, "dlq.generate").Arguments))
	assert.Equal(t, map[string]string{
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "booking-dlq.fifo", "x-single-active-consumer": "true",
	}, argStrings(liveQueue(t, live, "booking.fifo").Arguments), "classic FIFO: no x-delivery-limit (see NativeGaps)")
	assert.Equal(t, "quorum", liveQueue(t, live, "q.generate").Type)
	assert.Contains(t, strings.Join(rabbitmq.NativeGaps(top), "\n"), "queue booking.fifo: max_receives 5: classic queues have no delivery limit")

	// Apply twice changes nothing.
	unresolved, err = ps.Apply(ctxFor(t), top)
	require.NoError(t, err)
	require.Empty(t, unresolved, unresolved.String())
	plan, err = ps.Plan(ctxFor(t), top)
	require.NoError(t, err)
	require.True(t, plan.InSync(), plan.String())

	ch := amqpChannel(t, amqpURL)

	// Routing: a wildcard key, and a '#' key.
	publish(t, ch, "core", "realtime.session.started", "rt")
	d := getOne(t, ch, "q.realtime")
	assert.Equal(t, "rt", string(d.Body))
	require.NoError(t, d.Ack(false))
	publish(t, ch, "core", "booking.session.changed.v2", "bk")
	d = getOne(t, ch, "booking.fifo")
	require.NoError(t, d.Nack(false, false))
	d = getOne(t, ch, "booking-dlq.fifo")
	assert.Equal(t, "bk", string(d.Body), "dead-lettered through the default exchange")
	require.NoError(t, d.Ack(false))

	// A rejected message goes through the DLX to the DLQ with its key.
	publish(t, ch, "core", "analyze.resume", "resume-1")
	d = getOne(t, ch, "q.analyze")
	require.NoError(t, d.Nack(false, false))
	d = getOne(t, ch, "dlq.analyze")
	assert.Equal(t, "resume-1", string(d.Body))
	assert.Equal(t, "dlq.q.analyze", d.RoutingKey)
	deaths, _ := d.Headers["x-death"].([]any)
	require.Len(t, deaths, 1)
	assert.Equal(t, "rejected", deaths[0].(amqp.Table)["reason"])
	require.NoError(t, d.Ack(false))

	// The quorum queue's delivery limit dead-letters natively: requeued
	// every time, the message is delivered MaxReceives times... and one more,
	// RabbitMQ 3.10 dead-letters once the delivery count exceeds the limit.
	publish(t, ch, "core", "generate.questions", "gen-1")
	deliveries := 0
	for {
		d, ok, err := ch.Get("q.generate", false)
		require.NoError(t, err)
		if ok {
			deliveries++
			require.NoError(t, d.Nack(false, true))
			continue
		}
		if d, ok, err := ch.Get("dlq.generate", false); err == nil && ok {
			assert.Equal(t, "gen-1", string(d.Body))
			require.NoError(t, d.Ack(false))
			break
		}
		require.Less(t, deliveries, 10, "never dead-lettered")
		time.Sleep(20 * time.Millisecond)
	}
	assert.Equal(t, 2+1, deliveries)
}

func TestPlanAndApplyReportDriftAndKeepMessages(t *testing.T) {
	t.Parallel()
	amqpURL, _ := newVhost(t)
	ps := newPubSub(t, amqpURL, nil)
	top := sampleTopology()
	unresolved, err := ps.Apply(ctxFor(t), top)
	require.NoError(t, err)
	require.Empty(t, unresolved)

	// Behind eventpipe's back: q.generate recreated with another delivery
	// limit, holding messages; a binding nobody declared.
	ch := amqpChannel(t, amqpURL)
	_, err = ch.QueueDelete("q.generate", false, false, false)
	require.NoError(t, err)
	_, err = ch.QueueDeclare("q.generate", true, false, false, false, amqp.Table{
		"x-queue-type": "quorum", "x-delivery-limit": int64(7),
		"x-dead-letter-exchange": "core.dlx", "x-dead-letter-routing-key": "dlq.generate",
	})
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind("q.generate", "generate.questions", "core", false, nil))
	require.NoError(t, ch.QueueBind("q.realtime", "debug.#", "core", false, nil))
	publish(t, ch, "core", "generate.questions", "keep-1")
	publish(t, ch, "core", "generate.questions", "keep-2")
	require.Eventually(t, func() bool {
		q, err := ch.QueueDeclarePassive("q.generate", true, false, false, false, nil)
		return err == nil && q.Messages == 2
	}, 10*time.Second, 20*time.Millisecond)

	wantDiffers := topology.Change{Kind: topology.Differs, Object: "queue q.generate", Attribute: "x-delivery-limit", Want: "2", Have: "7"}
	wantExtra := topology.Change{Kind: topology.Extra, Object: "binding core -> q.realtime (debug.#)"}
	checkPlan := func(plan topology.Plan) {
		t.Helper()
		require.Len(t, plan, 2, plan.String())
		got := map[string]topology.Change{}
		for _, c := range plan {
			got[c.Kind] = c
		}
		differs := got[topology.Differs]
		assert.Contains(t, differs.Fix, "holds 2 message(s)")
		assert.Contains(t, differs.Fix, "delete queue q.generate, then apply again")
		differs.Fix = ""
		assert.Equal(t, wantDiffers, differs)
		assert.Equal(t, wantExtra, got[topology.Extra])
	}
	plan, err := ps.Plan(ctxFor(t), top)
	require.NoError(t, err)
	checkPlan(plan)
	t.Log("\n" + plan.String())

	// Apply cannot fix it: it says so, deletes nothing, and applies the rest.
	_, err = ch.QueueDelete("q.realtime", false, false, false)
	require.NoError(t, err)
	unresolved, err = ps.Apply(ctxFor(t), top)
	require.NoError(t, err)
	require.Len(t, unresolved, 1, unresolved.String())
	assert.Contains(t, unresolved[0].Fix, "holds 2 message(s)")
	unresolved[0].Fix = ""
	assert.Equal(t, wantDiffers, unresolved[0])
	t.Log("\n" + unresolved.String())

	q, err := ch.QueueDeclarePassive("q.generate", true, false, false, false, nil)
	require.NoError(t, err)
	assert.Equal(t, 2, q.Messages, "the drifted queue and its messages are untouched")
	var held []amqp.Delivery
	for _, body := range []string{"keep-1", "keep-2"} {
		d := getOne(t, ch, "q.generate")
		assert.Equal(t, body, string(d.Body))
		held = append(held, d)
	}
	for _, d := range held {
		require.NoError(t, d.Nack(false, true))
	}
	// Deleting q.realtime took the extra binding with it; Apply re-created
	// the queue and its declared binding. The drifted queue stays drifted.
	plan, err = ps.Plan(ctxFor(t), top)
	require.NoError(t, err)
	require.Len(t, plan, 1, plan.String())
	plan[0].Fix = ""
	assert.Equal(t, wantDiffers, plan[0])
}

func TestApplyReportsExchangeOfAnotherType(t *testing.T) {
	t.Parallel()
	amqpURL, _ := newVhost(t)
	ps := newPubSub(t, amqpURL, nil)
	ch := amqpChannel(t, amqpURL)
	require.NoError(t, ch.ExchangeDeclare("core", "fanout", true, false, false, false, nil))

	top := sampleTopology()
	unresolved, err := ps.Apply(ctxFor(t), top)
	require.NoError(t, err)
	require.Len(t, unresolved, 1, unresolved.String())
	assert.Equal(t, "exchange core", unresolved[0].Object)
	assert.Equal(t, "type", unresolved[0].Attribute)
	assert.Equal(t, "topic", unresolved[0].Want)
	assert.Equal(t, "fanout", unresolved[0].Have)
	assert.Contains(t, unresolved[0].Fix, "delete exchange core")

	plan, err := ps.Plan(ctxFor(t), top)
	require.NoError(t, err)
	require.Len(t, plan, 1, plan.String())
	assert.Equal(t, "type", plan[0].Attribute)
}

// The default exchange routes by queue name only, so a dead-letter routing key
// other than the DLQ's name would drop every dead letter. Apply, Plan and the
// export refuse the topology (all compile it the same way; no broker needed).
func TestDeadLetterKeyTheDefaultExchangeCannotRoute(t *testing.T) {
	top := sampleTopology()
	top.Queues[2].DeadLetter.RoutingKey = "dlq.booking"
	_, err := rabbitmq.Diff(top, rabbitmq.Live{})
	require.ErrorContains(t, err, "queues[2].dead_letter.routing_key")
	_, err = rabbitmq.ExportDefinitions(top, "/")
	require.ErrorContains(t, err, "queues[2].dead_letter.routing_key")
}

// Diff is pure: the cases the broker makes awkward to reach.
func TestDiff(t *testing.T) {
	top := topology.Topology{
		Name:      "d",
		Exchanges: []topology.Exchange{{Name: "x", Type: topology.Topic}},
		Queues: []topology.Queue{{
			Name: "q", DeadLetter: &topology.DeadLetter{Queue: "q.dlq"},
		}},
		Bindings: []topology.Binding{{Exchange: "x", Queue: "q", Pattern: "a.*"}},
	}
	live := rabbitmq.Live{
		Exchanges: []rabbitmq.LiveExchange{{Name: "x", Type: "topic", Durable: true}},
		Queues: []rabbitmq.LiveQueue{
			// Declared by another tool: no DLX, a length limit, not durable.
			{Name: "q", Type: "classic", Durable: false, Messages: 3, Arguments: map[string]any{"x-max-length": "10"}},
		},
		Bindings: []rabbitmq.LiveBinding{
			{Source: "x", Destination: "q", DestinationKind: "queue", RoutingKey: "a.*"},
			{Source: "x", Destination: "other", DestinationKind: "exchange", RoutingKey: "#"},
			{Source: "elsewhere", Destination: "q", DestinationKind: "queue", RoutingKey: "z"},
		},
	}
	plan, err := rabbitmq.Diff(top, live)
	require.NoError(t, err)
	var got []string
	for _, c := range plan {
		got = append(got, c.Kind+" "+c.Object+" "+c.Attribute+" want="+c.Want+" have="+c.Have)
	}
	assert.Equal(t, []string{
		"extra binding x -> exchange other (#)  want= have=",
		"differs queue q durable want=true have=false",
		`differs queue q x-dead-letter-exchange want="" have=`,
		"differs queue q x-dead-letter-routing-key want=q.dlq have=",
		"differs queue q x-max-length want= have=10",
		"missing queue q.dlq type want=classic have=",
	}, got)
	assert.Contains(t, plan[1].Fix, "holds 3 message(s)")
}

// Every spec's topology under config/topology provisions natively: applied
// into a vhost of its own it is in sync at once and on a second Apply, and
// its exported definitions import into another vhost in sync too.
func TestSpecTopologiesProvision(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../../config/topology/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files, "config/topology/*.yaml: the spec topologies are missing")
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			t.Parallel()
			top, err := topology.Load(file)
			require.NoError(t, err)

			amqpURL, _ := newVhost(t)
			ps := newPubSub(t, amqpURL, nil)
			unresolved, err := ps.Apply(ctxFor(t), top)
			require.NoError(t, err)
			require.Empty(t, unresolved, unresolved.String())
			plan, err := ps.Plan(ctxFor(t), top)
			require.NoError(t, err)
			require.True(t, plan.InSync(), plan.String())
			// Again: every declaration is now a no-op (a Plan costs three
			// rabbitmqctl runs; TestApplyProvisionsNativelyAndIdempotently
			// plans after the second Apply too).
			unresolved, err = ps.Apply(ctxFor(t), top)
			require.NoError(t, err)
			require.Empty(t, unresolved, unresolved.String())

			// Every declared route delivers: one message per binding, on a
			// key the pattern matches (a wildcard word replaced by "x").
			ch := amqpChannel(t, amqpURL)
			for _, b := range top.Bindings {
				key := strings.NewReplacer("*", "x", "#", "x").Replace(b.Pattern)
				publish(t, ch, b.Exchange, key, "probe")
				for _, q := range top.Route(b.Exchange, key) {
					d := getOne(t, ch, q)
					require.NoError(t, d.Ack(false))
				}
			}

			importURL, importVhost := newVhost(t)
			defs, err := rabbitmq.ExportDefinitions(top, importVhost)
			require.NoError(t, err)
			importDefinitions(t, defs)
			plan, err = newPubSub(t, importURL, nil).Plan(ctxFor(t), top)
			require.NoError(t, err)
			require.True(t, plan.InSync(), "export → import:\n%s", plan)
		})
	}
}
