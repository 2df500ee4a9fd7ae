package postgres_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// publishNumbered publishes n messages with bodies 0..n-1 and returns their
// ids in publish order.
func publishNumbered(t *testing.T, ps message.Publisher, topic string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		m := message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(i)))
		ids = append(ids, m.UUID)
		require.NoError(t, ps.Publish(topic, m))
	}
	return ids
}

// A subscription handing out several messages at once drains gracefully:
// when it is cancelled, the claimed rows it has not handed out go back at
// once, uncounted; the messages handed out keep their contexts and their
// leases, so their handlers' acks still settle; one whose handler is past
// its deadline goes back when its lease ends, counted.
func TestConcurrentDeliveriesDrainOnCancel(t *testing.T) {
	t.Parallel()
	const out = 4
	cfg := testConfig(t)
	cfg.BatchSize = 10
	cfg.AckDeadline = 900 * time.Millisecond
	ps := newPubSub(t, cfg)
	topic := brokertest.Topic(t)
	ids := publishNumbered(t, ps, topic, 10)

	ctx, cancel := context.WithCancel(broker.WithConcurrency(context.Background(), out))
	defer cancel()
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)
	var held []*message.Message
	for range out {
		held = append(held, brokertest.Next(t, msgs, 10*time.Second))
	}
	cancel()
	stuck := held[out-1]
	broker.StartAttempt(stuck.Context(), time.Now()) // overdue at once, never ended
	// Longer than the lease: the held messages are renewed meanwhile.
	time.Sleep(2 * cfg.AckDeadline)
	for _, m := range held[:out-1] {
		require.NoError(t, m.Context().Err(), "a handed-out message's context ends with its settlement, not the subscription")
		require.True(t, m.Ack())
	}
	for range msgs { // until the subscription has wound down
	}
	assert.Error(t, stuck.Context().Err(), "the overdue message's lease ended")

	rest, err := newPubSub(t, cfg).Subscribe(context.Background(), topic)
	require.NoError(t, err)
	attempts := map[string]string{}
	for range 10 - (out - 1) {
		m := brokertest.Next(t, rest, 10*time.Second)
		attempts[m.UUID] = m.Metadata.Get(metadata.AttemptKey)
		m.Ack()
	}
	for _, m := range held[:out-1] {
		assert.NotContains(t, attempts, m.UUID, "acked during the drain: settled")
	}
	assert.Equal(t, "1", attempts[stuck.UUID], "the overdue delivery counts")
	for _, id := range ids {
		if !slices.ContainsFunc(held, func(m *message.Message) bool { return m.UUID == id }) {
			assert.Equal(t, "0", attempts[id], "claimed, never handed out: given back uncounted")
		}
	}
	select {
	case m := <-rest:
		require.Failf(t, "unexpected extra delivery", "message %s", m.UUID)
	case <-time.After(300 * time.Millisecond):
	}
}

// With several messages handed out at once, the heartbeat keeps every one
// of them leased while its handler runs past the ack deadline — a second
// subscriber gets none of them — but the one whose handler is past its
// deadline: that one alone goes to the other subscriber, counted.
func TestConcurrentHeartbeatRenewsAllButTheOverdue(t *testing.T) {
	t.Parallel()
	const out = 3
	cfg := testConfig(t)
	cfg.AckDeadline = 900 * time.Millisecond
	cfg.PollInterval = 50 * time.Millisecond
	ps := newPubSub(t, cfg)
	topic := brokertest.Topic(t)
	publishNumbered(t, ps, topic, out)

	ctx, cancel := context.WithCancel(broker.WithConcurrency(context.Background(), out))
	defer cancel()
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)
	var held []*message.Message
	for range out {
		held = append(held, brokertest.Next(t, msgs, 10*time.Second))
	}
	stuck := held[0]
	broker.StartAttempt(stuck.Context(), time.Now())

	other, err := newPubSub(t, cfg).Subscribe(ctx, topic)
	require.NoError(t, err)
	again := brokertest.Next(t, other, 3*cfg.AckDeadline)
	assert.Equal(t, stuck.UUID, again.UUID, "only the overdue message's lease ends")
	assert.Equal(t, "1", again.Metadata.Get(metadata.AttemptKey))
	require.True(t, again.Ack())
	select {
	case m := <-other:
		t.Fatalf("%s delivered to another subscriber while its handler runs", m.UUID)
	case <-time.After(2 * cfg.AckDeadline):
	}
	for _, m := range held[1:] {
		require.NoError(t, m.Context().Err(), "renewed, its context goes on")
		require.True(t, m.Ack())
	}
	assert.Eventually(t, func() bool { return rowsLeft(t, cfg, topic) == 0 }, 10*time.Second, 20*time.Millisecond, "acked: deleted")
}

// Messages published while a subscription's handlers still run go out to
// its free room (broker.WithConcurrency) a poll interval later, as to an
// idle subscription: a claim that came back with fewer rows than the room
// does not keep the rest of it empty until its batch is settled.
func TestConcurrentDeliveriesFillTheRoomAsMessagesArrive(t *testing.T) {
	t.Parallel()
	const room = 4
	cfg := testConfig(t)
	cfg.PollInterval = 50 * time.Millisecond
	ps := newPubSub(t, cfg)
	topic := brokertest.Topic(t)
	require.NoError(t, ps.SubscribeInitialize(topic))

	ctx, cancel := context.WithCancel(broker.WithConcurrency(context.Background(), room))
	defer cancel()
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)
	publishNumbered(t, ps, topic, 1)
	first := brokertest.Next(t, msgs, 10*time.Second)
	later := publishNumbered(t, ps, topic, room-1)
	var got []string
	for range room - 1 {
		got = append(got, brokertest.Next(t, msgs, 5*time.Second).UUID)
	}
	assert.ElementsMatch(t, later, got, "handed out while the first is unsettled")
	require.NoError(t, first.Context().Err())
	require.True(t, first.Ack())
}

// On a busy queue, a handler that runs long does not keep the room the
// rest of its batch freed empty: once half the room is free behind it for
// longer than the slack, the subscription claims more for it.
func TestConcurrentDeliveriesDoNotWaitForAStraggler(t *testing.T) {
	t.Parallel()
	const room = 4
	cfg := testConfig(t)
	cfg.BatchSize = room
	cfg.AckDeadline = time.Second // slack 100 ms
	ps := newPubSub(t, cfg)
	topic := brokertest.Topic(t)
	ids := publishNumbered(t, ps, topic, 2*room)

	ctx, cancel := context.WithCancel(broker.WithConcurrency(context.Background(), room))
	defer cancel()
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)
	var first []*message.Message
	for range room {
		first = append(first, brokertest.Next(t, msgs, 10*time.Second))
	}
	straggler := first[0]
	for _, m := range first[1:] {
		require.True(t, m.Ack())
	}
	var got []string
	for range room - 1 {
		m := brokertest.Next(t, msgs, 5*time.Second)
		got = append(got, m.UUID)
		require.True(t, m.Ack())
	}
	assert.Equal(t, ids[room:2*room-1], got, "the next claim's messages, while the straggler runs")
	require.NoError(t, straggler.Context().Err())
	require.True(t, straggler.Ack())
	require.True(t, brokertest.Next(t, msgs, 5*time.Second).Ack())
}
