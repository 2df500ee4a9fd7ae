// Package brokertest is the conformance suite every eventpipe broker adapter
// runs: Watermill's own pub/sub suite (pubsub/tests) plus the cases eventpipe's
// guarantees rest on. Each adapter's test calls Run with its Features and a
// constructor; a case a broker cannot support is skipped by a Features flag,
// never by the environment.
package brokertest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// Features tells the suite what a broker can do.
type Features struct {
	// Watermill is passed to Watermill's pubsub/tests suite as is.
	Watermill tests.Features

	// CompetingConsumers is true when subscribers of one topic share its
	// messages (a queue); false when each subscriber gets every message
	// (GoChannel's fan-out).
	CompetingConsumers bool

	// DropConnections, when set, forcibly cuts every connection the adapter
	// holds to its broker (the broker itself stays up). The suite then checks
	// that publishing and consuming recover. Nil for connectionless brokers.
	DropConnections func(t *testing.T)

	// RedeliveryTimeout bounds how long a nacked message may take to come
	// back; brokers that redeliver after a visibility timeout need longer.
	// Defaults to 30 s.
	RedeliveryTimeout time.Duration

	// QueueStats is true when the PubSub implements broker.QueueStatter:
	// the suite checks its counts (ready, in flight, drained) and that an
	// unknown queue is an error. False checks that it does not claim to.
	QueueStats bool

	// InFlightMayBeUnknown lets QueueStats report InFlightKnown=false
	// (RabbitMQ without its management API). Off, an unknown in-flight
	// count fails the suite.
	InFlightMayBeUnknown bool

	// Peek is true when the PubSub implements broker.Peeker: the suite
	// checks that a peek returns the queue's messages and leaves every one
	// of them to its consumer, unhidden. False checks that it does not claim
	// to.
	Peek bool
	// PeekInOrder is true when a peek returns a queue's messages in the
	// order a consumer receives them.
	PeekInOrder bool
	// PeekCountsDelivery is true when the broker counts a peek as a
	// delivery (RabbitMQ's redelivered flag, SQS's receive count) and says
	// so in Peeked.Effects; false checks that a consumer sees no attempt
	// spent (x-attempt 0) and that Effects is empty.
	PeekCountsDelivery bool

	// Concurrency is how many messages a subscription that asks for 4
	// (broker.WithConcurrency) hands out before the first is settled: 4
	// where the adapter honours it, 1 where it hands out one at a time. 0
	// means 1.
	Concurrency int
}

// Constructor returns a fresh PubSub for one test. It registers its own
// cleanup with t.Cleanup; the suite also closes it.
type Constructor func(t *testing.T) broker.PubSub

// Run runs the whole conformance suite. Every case uses its own topic, so the
// cases run in parallel.
func Run(t *testing.T, f Features, newPubSub Constructor) {
	t.Helper()
	if f.RedeliveryTimeout == 0 {
		f.RedeliveryTimeout = 30 * time.Second
	}

	t.Run("Watermill", func(t *testing.T) {
		ctor := func(t *testing.T) (message.Publisher, message.Subscriber) {
			ps := newPubSub(t)
			return ps, ps
		}
		tests.TestPubSub(t, f.Watermill, ctor, nil)
	})

	cases := []struct {
		name     string
		parallel bool
		fn       func(t *testing.T, f Features, newPubSub Constructor)
	}{
		{"MetadataRoundTrip", true, testMetadataRoundTrip},
		{"LargePayload", true, testLargePayload},
		{"PayloadOverLimitRejected", true, testPayloadOverLimit},
		{"NackRedelivers", true, testNackRedelivers},
		{"ConcurrentSubscribersOneQueue", true, testConcurrentSubscribers},
		{"ConcurrentDeliveries", true, testConcurrentDeliveries},
		{"PublishAfterConnectionDrop", false, testPublishAfterConnectionDrop},
		{"QueueStats", true, testQueueStats},
		{"Peek", true, testPeek},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.parallel {
				t.Parallel()
			}
			c.fn(t, f, newPubSub)
		})
	}
}

// Topic returns a topic name unique to this test, valid on every broker
// (letters, digits, dashes; under SQS's 80-character limit).
func Topic(t *testing.T) string {
	return "ept-" + strings.ToLower(watermill.NewShortUUID())
}

func initialize(t *testing.T, sub message.Subscriber, topic string) {
	t.Helper()
	if si, ok := sub.(message.SubscribeInitializer); ok {
		require.NoError(t, si.SubscribeInitialize(topic))
	}
}

func closeOnCleanup(t *testing.T, ps broker.PubSub) {
	t.Cleanup(func() { _ = ps.Close() })
}

// receive reads n messages, acking each, or fails the test after timeout.
func receive(t *testing.T, msgs <-chan *message.Message, n int, timeout time.Duration) []*message.Message {
	t.Helper()
	var got []*message.Message
	deadline := time.After(timeout)
	for len(got) < n {
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatalf("messages channel closed after %d of %d messages", len(got), n)
			}
			got = append(got, m)
			m.Ack()
		case <-deadline:
			t.Fatalf("received %d of %d messages within %s", len(got), n, timeout)
		}
	}
	return got
}

func testMetadataRoundTrip(t *testing.T, _ Features, newPubSub Constructor) {
	ps := newPubSub(t)
	closeOnCleanup(t, ps)
	topic := Topic(t)
	initialize(t, ps, topic)

	want := message.Metadata{
		"ascii":          "plain value",
		"korean":         "메시지 추적 아이디",
		"emoji-and-sign": "✓ café ≠ cafe 🚀",
		"x-trace-id":     "4bf92f3577b34da6a3ce929d0e0e4736",
		"empty":          "",
		"json-ish":       `{"a":[1,2,"три"]}`,
		"spaces in name": "value with\ttab",
	}
	msg := message.NewMessage(watermill.NewUUID(), []byte(`{"hello":"세계"}`))
	for k, v := range want {
		msg.Metadata.Set(k, v)
	}
	require.NoError(t, ps.Publish(topic, msg))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)
	got := receive(t, msgs, 1, 30*time.Second)[0]

	assert.Equal(t, msg.UUID, got.UUID)
	assert.Equal(t, string(msg.Payload), string(got.Payload))
	for k, v := range want {
		assert.Equal(t, v, got.Metadata.Get(k), "metadata %q", k)
	}
}

func testLargePayload(t *testing.T, _ Features, newPubSub Constructor) {
	ps := newPubSub(t)
	closeOnCleanup(t, ps)
	topic := Topic(t)
	initialize(t, ps, topic)

	// 256 KiB of printable, non-repeating-ish text: valid in an SQS body and
	// not trivially compressible.
	payload := make([]byte, 256<<10)
	for i := range payload {
		payload[i] = byte('a' + (i*7+i/26)%26)
	}
	msg := message.NewMessage(watermill.NewUUID(), payload)
	require.NoError(t, ps.Publish(topic, msg))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)
	got := receive(t, msgs, 1, 30*time.Second)[0]
	assert.Equal(t, len(payload), len(got.Payload))
	assert.Equal(t, payload, []byte(got.Payload))
}

func testPayloadOverLimit(t *testing.T, _ Features, newPubSub Constructor) {
	ps := newPubSub(t)
	closeOnCleanup(t, ps)
	topic := Topic(t)
	initialize(t, ps, topic)

	big := message.NewMessage(watermill.NewUUID(), make([]byte, broker.MaxPayloadBytes+1))
	err := ps.Publish(topic, big)
	var tooLarge *broker.PayloadTooLargeError
	require.ErrorAs(t, err, &tooLarge)
	assert.Equal(t, big.UUID, tooLarge.MessageUUID)
}

func testNackRedelivers(t *testing.T, f Features, newPubSub Constructor) {
	ps := newPubSub(t)
	closeOnCleanup(t, ps)
	topic := Topic(t)
	initialize(t, ps, topic)

	msg := message.NewMessage(watermill.NewUUID(), []byte("nack me"))
	// A publisher's attempt count and failure time are never trusted.
	msg.Metadata.Set(metadata.AttemptKey, "7")
	msg.Metadata.Set(metadata.FirstFailureKey, "2001-01-01T00:00:00Z")
	require.NoError(t, ps.Publish(topic, msg))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)

	deliveries := 0
	deadline := time.After(f.RedeliveryTimeout + 30*time.Second)
	for deliveries < 3 {
		select {
		case m := <-msgs:
			require.NotNil(t, m, "messages channel closed")
			require.Equal(t, msg.UUID, m.UUID)
			assert.Equal(t, strconv.Itoa(deliveries), m.Metadata.Get(metadata.AttemptKey), "earlier deliveries")
			if deliveries == 0 {
				assert.Empty(t, m.Metadata.Get(metadata.FirstFailureKey), "a first delivery has not failed yet")
			} else {
				first, err := time.Parse(time.RFC3339Nano, m.Metadata.Get(metadata.FirstFailureKey))
				if assert.NoError(t, err, "a redelivery knows when it first failed") {
					assert.WithinDuration(t, time.Now(), first, 2*f.RedeliveryTimeout+time.Minute)
				}
			}
			deliveries++
			if deliveries < 3 {
				m.Nack()
			} else {
				m.Ack()
			}
		case <-deadline:
			t.Fatalf("message delivered %d times, want 3 (two nacks then an ack)", deliveries)
		}
	}

	// Acked: it must not come back.
	select {
	case m := <-msgs:
		if m != nil {
			t.Fatalf("message %s delivered again after ack", m.UUID)
		}
	case <-time.After(time.Second):
	}
}

func testConcurrentSubscribers(t *testing.T, f Features, newPubSub Constructor) {
	const subscribers = 4
	const total = 200

	pub := newPubSub(t)
	closeOnCleanup(t, pub)
	topic := Topic(t)
	initialize(t, pub, topic)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var (
		mu      sync.Mutex
		seen    = map[string]int{}
		perSub  = make([]int, subscribers)
		allDone = make(chan struct{})
		once    sync.Once
	)
	want := total
	if !f.CompetingConsumers {
		want = total * subscribers
	}
	delivered := 0
	for i := 0; i < subscribers; i++ {
		// Queues are shared across connections by definition, so competing
		// subscribers get instances of their own; a fan-out broker (GoChannel)
		// only works within one instance.
		var sub message.Subscriber = pub
		if f.CompetingConsumers {
			ps := newPubSub(t)
			closeOnCleanup(t, ps)
			sub = ps
		}
		msgs, err := sub.Subscribe(ctx, topic)
		require.NoError(t, err)
		go func(i int) {
			for m := range msgs {
				mu.Lock()
				seen[m.UUID]++
				perSub[i]++
				delivered++
				if delivered >= want {
					once.Do(func() { close(allDone) })
				}
				mu.Unlock()
				if f.CompetingConsumers {
					// A little work per message, as a handler does: with
					// none, one subscriber can drain the queue before the
					// others' first poll (Postgres polls every 250 ms) and
					// the sharing this test checks would go unseen.
					time.Sleep(2 * time.Millisecond)
				}
				m.Ack()
			}
		}(i)
	}

	var published []string
	for i := 0; i < total; i++ {
		m := message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, "%d", i))
		published = append(published, m.UUID)
		require.NoError(t, pub.Publish(topic, m))
	}

	select {
	case <-allDone:
	case <-time.After(60 * time.Second):
	}
	// Give a duplicate a moment to show itself.
	time.Sleep(200 * time.Millisecond)

	mu.Lock()
	defer mu.Unlock()
	for _, id := range published {
		if f.CompetingConsumers {
			assert.GreaterOrEqual(t, seen[id], 1, "message %s never delivered", id)
		} else {
			assert.Equal(t, subscribers, seen[id], "message %s delivered to %d of %d subscribers", id, seen[id], subscribers)
		}
	}
	if f.CompetingConsumers {
		busy := 0
		for _, n := range perSub {
			if n > 0 {
				busy++
			}
		}
		assert.Greater(t, busy, 1, "one subscriber took every message: %v", perSub)
	}
}

func testPublishAfterConnectionDrop(t *testing.T, f Features, newPubSub Constructor) {
	if f.DropConnections == nil {
		t.Skip("broker is connectionless: there is no connection to drop")
	}
	ps := newPubSub(t)
	closeOnCleanup(t, ps)
	topic := Topic(t)
	initialize(t, ps, topic)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)

	before := message.NewMessage(watermill.NewUUID(), []byte("before"))
	require.NoError(t, ps.Publish(topic, before))
	assert.Equal(t, before.UUID, receive(t, msgs, 1, 30*time.Second)[0].UUID)

	f.DropConnections(t)

	after := message.NewMessage(watermill.NewUUID(), []byte("after"))
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := ps.Publish(topic, after)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("publish never recovered after the connection dropped: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}

	// The subscriber must also be back: the message published after the drop
	// arrives on the same subscription.
	for {
		got := receive(t, msgs, 1, 60*time.Second)[0]
		if got.UUID == after.UUID {
			return
		}
		// "before" may be redelivered if its ack was lost with the connection.
		require.Equal(t, before.UUID, got.UUID)
	}
}

func testQueueStats(t *testing.T, f Features, newPubSub Constructor) {
	ps := newPubSub(t)
	closeOnCleanup(t, ps)
	statter, ok := ps.(broker.QueueStatter)
	if !f.QueueStats {
		require.False(t, ok, "the PubSub implements broker.QueueStatter: set Features.QueueStats")
		t.Skip("broker cannot count a queue's messages")
	}
	require.True(t, ok, "Features.QueueStats is set but the PubSub does not implement broker.QueueStatter")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Counts may lag (SQS's are approximate, RabbitMQ's management API
	// collects every few seconds and knows a new queue a little later): each
	// expectation is awaited, in-flight known included unless the broker may
	// not know it at all.
	const wait = 30 * time.Second
	var last broker.QueueStats
	await := func(what string, cond func(broker.QueueStats) bool) {
		t.Helper()
		deadline := time.Now().Add(wait)
		for {
			s, err := statter.QueueStats(ctx, last.Queue)
			require.NoError(t, err)
			require.Equal(t, last.Queue, s.Queue)
			last = s
			if cond(s) && (s.InFlightKnown || f.InFlightMayBeUnknown) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %s; last: %s", what, wait, s)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	missing := Topic(t)
	_, err := statter.QueueStats(ctx, missing)
	require.ErrorIs(t, err, broker.ErrQueueNotFound, "a queue that does not exist is an error, never zeros")
	assert.Contains(t, err.Error(), missing)

	last.Queue = Topic(t)
	initialize(t, ps, last.Queue)
	await("an initialized queue is empty", func(s broker.QueueStats) bool {
		return s.Total() == 0 && (s.Empty() || !s.InFlightKnown)
	})

	const n = 3
	for i := range n {
		require.NoError(t, ps.Publish(last.Queue, message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, "stats %d", i))))
	}
	await("published messages are ready", func(s broker.QueueStats) bool {
		return s.Ready == n && s.InFlight == 0 && s.Delayed == 0
	})
	assert.False(t, last.Empty(), last.String())

	subCtx, stop := context.WithCancel(ctx)
	defer stop()
	msgs, err := ps.Subscribe(subCtx, last.Queue)
	require.NoError(t, err)
	held := Next(t, msgs, 30*time.Second)
	if last.InFlightKnown || !f.InFlightMayBeUnknown {
		await("a message taken and not acked is in flight", func(s broker.QueueStats) bool {
			return s.InFlight >= 1 && s.Total() == n
		})
	}
	assert.False(t, last.Empty(), "a message in flight is not drained: %s", last)

	held.Ack()
	receive(t, msgs, n-1, 30*time.Second)
	if f.InFlightMayBeUnknown && !last.InFlightKnown {
		await("acked messages are gone", func(s broker.QueueStats) bool { return s.Ready == 0 && s.Delayed == 0 })
		assert.False(t, last.Empty(), "in flight unknown: never reported drained")
		return
	}
	await("every message acked: drained", broker.QueueStats.Empty)
}

// Next returns the next message from msgs, without acking it, or fails the
// test when msgs closes or nothing arrives within timeout.
func Next(t testing.TB, msgs <-chan *message.Message, timeout time.Duration) *message.Message {
	t.Helper()
	select {
	case m, ok := <-msgs:
		if !ok {
			t.Fatal("messages channel closed")
		}
		return m
	case <-time.After(timeout):
		t.Fatalf("no message within %s", timeout)
		return nil
	}
}

// testPeek publishes three messages, peeks them twice (all, then a part),
// then consumes them: every one is still there, at once (a peek hides
// nothing), with its body and metadata, in the order peeked where the broker
// has one, and — on a broker whose peek is not a delivery — with no attempt
// spent.
func testPeek(t *testing.T, f Features, newPubSub Constructor) {
	ps := newPubSub(t)
	closeOnCleanup(t, ps)
	peeker, ok := ps.(broker.Peeker)
	if !f.Peek {
		require.False(t, ok, "the PubSub implements broker.Peeker: set Features.Peek")
		t.Skip("broker cannot show a queue's messages without taking them")
	}
	require.True(t, ok, "Features.Peek is set but the PubSub does not implement broker.Peeker")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	_, err := peeker.Peek(ctx, Topic(t), 10)
	require.ErrorIs(t, err, broker.ErrQueueNotFound, "peek of a queue that does not exist")

	topic := Topic(t)
	initialize(t, ps, topic)
	const n = 3
	var ids []string
	for i := range n {
		m := message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, `{"peek":%d}`, i))
		m.Metadata.Set("x-peek-case", strconv.Itoa(i))
		ids = append(ids, m.UUID)
		require.NoError(t, ps.Publish(topic, m))
	}

	var all broker.Peeked
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		all, err = peeker.Peek(ctx, topic, 10)
		if assert.NoError(c, err) {
			assert.Len(c, all.Messages, n)
		}
	}, 30*time.Second, 200*time.Millisecond)
	got := map[string]*message.Message{}
	var order []string
	for _, m := range all.Messages {
		got[m.UUID] = m
		order = append(order, m.UUID)
	}
	for i, id := range ids {
		require.Contains(t, got, id)
		assert.Equal(t, fmt.Sprintf(`{"peek":%d}`, i), string(got[id].Payload))
		assert.Equal(t, strconv.Itoa(i), got[id].Metadata.Get("x-peek-case"))
		assert.Equal(t, "0", got[id].Metadata.Get(metadata.AttemptKey), "a peek shows the attempt number as it was before it")
	}
	if f.PeekInOrder {
		assert.Equal(t, ids, order, "peeked oldest first")
		assert.True(t, all.Complete, "every message of the queue was read")
	}
	part, err := peeker.Peek(ctx, topic, 2)
	require.NoError(t, err)
	assert.Len(t, part.Messages, 2)
	assert.False(t, part.Complete, "a peek cut at max is not complete")
	if f.PeekCountsDelivery {
		assert.NotEmpty(t, all.Effects, "a peek that counts as a delivery says so")
	} else {
		assert.Empty(t, all.Effects)
	}

	subCtx, stop := context.WithCancel(ctx)
	defer stop()
	msgs, err := ps.Subscribe(subCtx, topic)
	require.NoError(t, err)
	var consumed []string
	for range n {
		m := Next(t, msgs, 15*time.Second)
		consumed = append(consumed, m.UUID)
		if !f.PeekCountsDelivery {
			assert.Equal(t, "0", m.Metadata.Get(metadata.AttemptKey), "a peek spent an attempt of %s", m.UUID)
		}
		m.Ack()
	}
	assert.ElementsMatch(t, ids, consumed)
	if f.PeekInOrder && !f.PeekCountsDelivery {
		assert.Equal(t, ids, consumed, "a peek keeps the queue's order")
	}
}

// testConcurrentDeliveries checks that a subscription asked for 4 messages
// at once hands out Features.Concurrency of them unsettled, no more, and the
// next one as soon as one is settled.
func testConcurrentDeliveries(t *testing.T, f Features, newPubSub Constructor) {
	const asked, total = 4, 7
	want := max(f.Concurrency, 1)
	ps := newPubSub(t)
	closeOnCleanup(t, ps)
	topic := Topic(t)
	initialize(t, ps, topic)
	ctx, cancel := context.WithCancel(broker.WithConcurrency(context.Background(), asked))
	defer cancel()
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)
	for i := range total {
		require.NoError(t, ps.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(i)))))
	}

	next := func(within time.Duration) *message.Message {
		select {
		case m, ok := <-msgs:
			require.True(t, ok, "subscription closed")
			return m
		case <-time.After(within):
			return nil
		}
	}
	seen := map[string]bool{}
	var held []*message.Message
	for len(held) < want {
		m := next(f.RedeliveryTimeout)
		require.NotNil(t, m, "only %d of %d messages handed out at once (asked for %d)", len(held), want, asked)
		held = append(held, m)
		seen[m.UUID] = true
	}
	if m := next(time.Second); m != nil {
		t.Fatalf("message %d handed out while %d were unsettled (asked for %d, want %d at once)", len(held)+1, len(held), asked, want)
	}
	for len(seen) < total {
		held[0].Ack()
		held = held[1:]
		m := next(f.RedeliveryTimeout)
		require.NotNil(t, m, "no message after an ack (%d of %d seen)", len(seen), total)
		require.False(t, seen[m.UUID], "message %s handed out twice", m.UUID)
		seen[m.UUID] = true
		held = append(held, m)
	}
	for _, m := range held {
		m.Ack()
	}
}
