package postgres_test

import (
	"context"
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

// brokertest checks ready, in flight and drained; here: a row waiting out
// its nack delay is Delayed (not ready, not drained), the oldest row's age
// is reported, and counting leaves a claimed batch alone.
func TestQueueStatsDelayedAndOldestAge(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.AutoInitializeSchema = false
	ps := newPubSub(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topic := brokertest.Topic(t)

	_, err := ps.QueueStats(ctx, topic)
	require.ErrorIs(t, err, broker.ErrQueueNotFound, "no table: never zeros")
	require.NoError(t, ps.SubscribeInitialize(topic))

	nacked := message.NewMessage(watermill.NewUUID(), []byte("nacked"))
	held := message.NewMessage(watermill.NewUUID(), []byte("held"))
	require.NoError(t, ps.Publish(topic, nacked, held))
	time.Sleep(50 * time.Millisecond) // an age to see

	subCtx, stop := context.WithCancel(ctx)
	defer stop()
	msgs, err := ps.Subscribe(subCtx, topic)
	require.NoError(t, err)
	m := brokertest.Next(t, msgs, 10*time.Second)
	require.Equal(t, nacked.UUID, m.UUID)
	s, err := ps.QueueStats(ctx, topic)
	require.NoError(t, err)
	assert.Equal(t, int64(2), s.InFlight, "the claimed batch: %s", s)
	assert.Zero(t, s.Ready, s.String())
	assert.GreaterOrEqual(t, s.OldestAge, 50*time.Millisecond, s.String())

	// The batch settles when its last message is: one nacked for a minute,
	// one acked.
	m.Metadata.Set(metadata.NackDelayKey, time.Minute.String())
	require.True(t, m.Nack())
	m = brokertest.Next(t, msgs, 10*time.Second)
	require.Equal(t, held.UUID, m.UUID, "counting did not take the claimed message away")
	require.True(t, m.Ack())
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		s, err = ps.QueueStats(ctx, topic)
		if assert.NoError(c, err) {
			assert.Zero(c, s.InFlight)
		}
	}, 10*time.Second, 50*time.Millisecond)
	assert.Equal(t, broker.QueueStats{Queue: topic, Delayed: 1, InFlightKnown: true, OldestAge: s.OldestAge}, s)
	assert.False(t, s.Empty(), "a message waiting for its redelivery is not drained")
}
