package memory_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/memory"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// The suite publishes before it subscribes, which only a persistent GoChannel
// survives; Watermill runs its own GoChannel suite the same way.
func TestConformance(t *testing.T) {
	t.Parallel()
	brokertest.Run(t, brokertest.Features{
		Watermill: tests.Features{
			ExactlyOnceDelivery:   true,
			RequireSingleInstance: true,
		},
		CompetingConsumers: false,
		Concurrency:        4,
	}, func(t *testing.T) broker.PubSub {
		ps, err := memory.New(memory.Config{Persistent: true, OutputBuffer: 10000}, nil)
		require.NoError(t, err)
		return ps
	})
}

// The default (not persistent) delivers to whoever subscribed before publish.
func TestDefaultDeliversToExistingSubscribers(t *testing.T) {
	t.Parallel()
	ps, err := memory.New(memory.Config{}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ps.Close() })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := ps.Subscribe(ctx, "demo")
	require.NoError(t, err)

	sent := message.NewMessage(watermill.NewUUID(), []byte("hi"))
	require.NoError(t, ps.Publish("demo", sent))
	select {
	case got := <-msgs:
		assert.Equal(t, sent.UUID, got.UUID)
		got.Ack()
	case <-time.After(5 * time.Second):
		require.FailNow(t, "message not delivered")
	}
	require.NoError(t, ps.Ping(ctx))
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	_, err := memory.New(memory.Config{OutputBuffer: -1}, nil)
	require.Error(t, err)
	_, err = memory.New(memory.Config{Prefetch: -1}, nil)
	require.ErrorContains(t, err, "prefetch must not be negative")
	_, err = memory.New(memory.Config{QueuePrefetch: map[string]int{"q": 0}}, nil)
	require.ErrorContains(t, err, "prefetch of q must be at least 1")
}

// held subscribes to topic asking for concurrency asked (none when < 0),
// publishes total messages and returns how many the subscription hands out
// before the first is settled; it acks them all.
func held(t *testing.T, cfg memory.Config, topic string, asked, total int) int {
	t.Helper()
	ps, err := memory.New(cfg, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ps.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if asked >= 0 {
		ctx = broker.WithConcurrency(ctx, asked)
	}
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)
	for i := range total {
		require.NoError(t, ps.Publish(topic, message.NewMessage(strconv.Itoa(i), nil)))
	}
	var out []*message.Message
	for {
		select {
		case m := <-msgs:
			out = append(out, m)
			continue
		case <-time.After(200 * time.Millisecond):
		}
		break
	}
	for _, m := range out {
		m.Ack()
	}
	return len(out)
}

// A subscription asking for the broker's bound (0) gets the prefetch, the
// topic's own when it has one; one asking for none gets one at a time; an
// ordered queue hands out one at a time whatever is asked.
func TestConcurrencyBounds(t *testing.T) {
	t.Parallel()
	cfg := memory.Config{
		Prefetch:      3,
		QueuePrefetch: map[string]int{"batched": 5},
		OrderedQueues: map[string]bool{"ordered.fifo": true},
	}
	assert.Equal(t, 3, held(t, cfg, "plain", 0, 10), "the prefetch")
	assert.Equal(t, 2, held(t, cfg, "plain", 2, 10), "what was asked, below the prefetch")
	assert.Equal(t, 3, held(t, cfg, "plain", 50, 10), "the prefetch bounds what was asked")
	assert.Equal(t, 5, held(t, cfg, "batched", 0, 10), "the queue's own prefetch")
	assert.Equal(t, 1, held(t, cfg, "plain", -1, 10), "none asked: one at a time")
	assert.Equal(t, 1, held(t, cfg, "ordered.fifo", 0, 10), "an ordered queue: one at a time")
	assert.Equal(t, memory.DefaultPrefetch, held(t, memory.Config{}, "plain", 0, 40), "the default prefetch")
}

// Messages handed out at once leave in publish order, and a nacked one comes
// back behind those queued, with its attempt count, while the others go on.
func TestConcurrentDeliveriesKeepPublishOrderOfHandOut(t *testing.T) {
	t.Parallel()
	ps, err := memory.New(memory.Config{Prefetch: 2}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ps.Close() })
	ctx, cancel := context.WithCancel(broker.WithConcurrency(context.Background(), 0))
	defer cancel()
	msgs, err := ps.Subscribe(ctx, "t")
	require.NoError(t, err)
	for i := range 4 {
		require.NoError(t, ps.Publish("t", message.NewMessage(strconv.Itoa(i), nil)))
	}
	a, b := brokertest.Next(t, msgs, 5*time.Second), brokertest.Next(t, msgs, 5*time.Second)
	assert.ElementsMatch(t, []string{"0", "1"}, []string{a.UUID, b.UUID})
	zero, one := a, b
	if a.UUID != "0" {
		zero, one = b, a
	}
	zero.Nack() // 0 waits behind 2 and 3; 1 still held
	c := brokertest.Next(t, msgs, 5*time.Second)
	assert.Equal(t, "2", c.UUID)
	one.Ack()
	c.Ack()
	d := brokertest.Next(t, msgs, 5*time.Second)
	e := brokertest.Next(t, msgs, 5*time.Second)
	got := map[string]string{d.UUID: d.Metadata.Get(metadata.AttemptKey), e.UUID: e.Metadata.Get(metadata.AttemptKey)}
	assert.Equal(t, map[string]string{"3": "0", "0": "1"}, got)
	d.Ack()
	e.Ack()
}

// A message handed out and not settled when the broker closes has its
// context cancelled, and the subscription's channel closes.
func TestCloseCancelsMessagesInFlight(t *testing.T) {
	t.Parallel()
	ps, err := memory.New(memory.Config{}, nil)
	require.NoError(t, err)
	msgs, err := ps.Subscribe(broker.WithConcurrency(context.Background(), 0), "t")
	require.NoError(t, err)
	require.NoError(t, ps.Publish("t", message.NewMessage("a", nil), message.NewMessage("b", nil)))
	a, b := brokertest.Next(t, msgs, 5*time.Second), brokertest.Next(t, msgs, 5*time.Second)
	require.NoError(t, a.Context().Err(), "live before the close")
	require.NoError(t, ps.Close())
	for _, m := range []*message.Message{a, b} {
		select {
		case <-m.Context().Done():
		case <-time.After(5 * time.Second):
			require.FailNow(t, "context not cancelled by the close", m.UUID)
		}
	}
	select {
	case _, ok := <-msgs:
		assert.False(t, ok, "channel closed")
	case <-time.After(5 * time.Second):
		require.FailNow(t, "channel not closed")
	}
}

// Two messages failing on one subscription at the same time each keep their
// own attempt count: a nacked message goes behind the ones already queued,
// so their redeliveries interleave.
func TestAttemptsPerMessage(t *testing.T) {
	t.Parallel()
	ps, err := memory.New(memory.Config{}, nil)
	require.NoError(t, err)
	defer func() { _ = ps.Close() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := ps.Subscribe(ctx, "t")
	require.NoError(t, err)
	require.NoError(t, ps.Publish("t", message.NewMessage("a", nil), message.NewMessage("b", nil)))

	last := map[string]int{}
	for range 8 {
		m := brokertest.Next(t, msgs, 5*time.Second)
		n, err := strconv.Atoi(m.Metadata.Get(metadata.AttemptKey))
		require.NoError(t, err)
		if prev, ok := last[m.UUID]; ok {
			assert.Equal(t, prev+1, n, "message %s", m.UUID)
		}
		last[m.UUID] = n
		m.Nack()
	}
	assert.Len(t, last, 2, "both messages redelivered")
}

// A subscription hands out one message at a time, in publish order: the next
// only after the ack.
func TestOneAtATimeInPublishOrder(t *testing.T) {
	t.Parallel()
	ps, err := memory.New(memory.Config{}, nil)
	require.NoError(t, err)
	defer func() { _ = ps.Close() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := ps.Subscribe(ctx, "t")
	require.NoError(t, err)
	var want []string
	for i := range 50 {
		id := strconv.Itoa(i)
		want = append(want, id)
		require.NoError(t, ps.Publish("t", message.NewMessage(id, nil)))
	}
	var got []string
	for range want {
		m := brokertest.Next(t, msgs, 5*time.Second)
		select {
		case extra := <-msgs:
			require.FailNow(t, "a second message before the ack", extra.UUID)
		case <-time.After(time.Millisecond):
		}
		got = append(got, m.UUID)
		m.Ack()
	}
	assert.Equal(t, want, got)
}

// Publishing does not wait for a slow subscriber, and a message published
// before anyone subscribed is not delivered (not persistent).
func TestPublishDoesNotWaitForConsumers(t *testing.T) {
	t.Parallel()
	ps, err := memory.New(memory.Config{OutputBuffer: 1}, nil)
	require.NoError(t, err)
	defer func() { _ = ps.Close() }()
	require.NoError(t, ps.Publish("t", message.NewMessage("early", nil)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := ps.Subscribe(ctx, "t")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		for i := range 1000 {
			if err := ps.Publish("t", message.NewMessage(strconv.Itoa(i), nil)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		require.FailNow(t, "publish waited for the consumer")
	}
	m := brokertest.Next(t, msgs, 5*time.Second)
	assert.Equal(t, "0", m.UUID, "the message published before the subscription is lost")
	m.Ack()

	require.NoError(t, ps.Close())
	require.ErrorIs(t, ps.Publish("t", message.NewMessage("late", nil)), memory.ErrClosed)
	_, err = ps.Subscribe(ctx, "t")
	require.ErrorIs(t, err, memory.ErrClosed)
}

// A redelivery says when the message first failed; a first delivery says
// nothing, whatever the publisher put there.
func TestRedeliveryCarriesFirstFailure(t *testing.T) {
	t.Parallel()
	ps, err := memory.New(memory.Config{}, nil)
	require.NoError(t, err)
	defer func() { _ = ps.Close() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := ps.Subscribe(ctx, "t")
	require.NoError(t, err)
	sent := message.NewMessage("a", nil)
	sent.Metadata.Set(metadata.FirstFailureKey, "forged")
	require.NoError(t, ps.Publish("t", sent))

	m := brokertest.Next(t, msgs, 5*time.Second)
	assert.Empty(t, m.Metadata.Get(metadata.FirstFailureKey))
	m.Nack()
	var first string
	for range 2 {
		m = brokertest.Next(t, msgs, 5*time.Second)
		if first == "" {
			first = m.Metadata.Get(metadata.FirstFailureKey)
			_, err := time.Parse(time.RFC3339Nano, first)
			require.NoError(t, err)
		}
		assert.Equal(t, first, m.Metadata.Get(metadata.FirstFailureKey))
		m.Nack()
	}
}

// A subscription's queue reuses its slots: messages published while earlier
// ones are being handled, past the buffer, and nacked ones coming back, keep
// their order and their metadata, and a delivery's metadata is its own.
func TestQueueKeepsOrderWhileReusingSlots(t *testing.T) {
	t.Parallel()
	ps, err := memory.New(memory.Config{OutputBuffer: 4}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ps.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := ps.Subscribe(ctx, "slots")
	require.NoError(t, err)

	publish := func(from, to int) {
		for i := from; i < to; i++ {
			m := message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(i)))
			m.Metadata.Set("n", strconv.Itoa(i))
			require.NoError(t, ps.Publish("slots", m))
			m.Metadata.Set("n", "changed after publish")
		}
	}
	next := func() *message.Message {
		select {
		case m := <-msgs:
			return m
		case <-time.After(5 * time.Second):
			require.FailNow(t, "no delivery")
			return nil
		}
	}
	publish(0, 3)
	var got []string
	first := next()
	first.Metadata.Set("n", "changed by the handler")
	first.Nack() // requeued behind 1 and 2 before 1 is handed out
	for len(got) < 10 {
		m := next()
		if len(got) == 0 {
			publish(3, 10) // past the buffer, while 1 is being handled
		}
		assert.Equal(t, string(m.Payload), m.Metadata.Get("n"), "metadata as published")
		got = append(got, string(m.Payload))
		m.Ack()
	}
	assert.Equal(t, []string{"1", "2", "0", "3", "4", "5", "6", "7", "8", "9"}, got)
}
