package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// On an ordered (FIFO) queue a consumer holding a group's head (here: it
// never acks, as one killed mid-handler) holds back that group's later
// messages — another consumer gets the other groups' heads, never the next
// message of the held group — until the head is settled. Seen before: a
// consumer killed holding event 36 of a booking session, and the next one
// applied 37–44 first.
func TestOrderedQueueHoldsAGroupBehindItsHead(t *testing.T) {
	t.Parallel()
	topic := brokertest.Topic(t)
	cfg := testConfig(t)
	cfg.OrderedQueues = map[string]bool{topic: true}
	cfg.QueueBatchSizes = map[string]int{topic: 1}
	cfg.AckDeadline = time.Minute
	cfg.PollInterval = 50 * time.Millisecond
	a, b := newPubSub(t, cfg), newPubSub(t, cfg)
	var msgs []*message.Message
	for _, id := range []string{"g1-1", "g1-2", "g2-1"} {
		m := message.NewMessage(id, []byte(id))
		m.Metadata.Set(metadata.GroupIDKey, id[:2])
		msgs = append(msgs, m)
	}
	require.NoError(t, a.Publish(topic, msgs...))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fromA, err := a.Subscribe(ctx, topic)
	require.NoError(t, err)
	head := brokertest.Next(t, fromA, 10*time.Second)
	require.Equal(t, "g1-1", head.UUID)

	fromB, err := b.Subscribe(ctx, topic)
	require.NoError(t, err)
	other := brokertest.Next(t, fromB, 10*time.Second)
	assert.Equal(t, "g2-1", other.UUID, "another group's head goes to the other consumer")
	require.True(t, other.Ack())
	select {
	case m := <-fromB:
		t.Fatalf("%s delivered while its group's head is held", m.UUID)
	case <-time.After(2 * time.Second):
	}

	require.True(t, head.Ack())
	next := brokertest.Next(t, fromB, 10*time.Second)
	assert.Equal(t, "g1-2", next.UUID, "after the head is settled, the group goes on")
	require.True(t, next.Ack())

}
