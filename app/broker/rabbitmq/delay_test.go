package rabbitmq_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/rabbitmq"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// A nack with a delay never holds its queue: the consumer gets the next
// message at once, and the nacked one comes back after the delay (kept by a
// delay queue of the broker's, not by a sleeping consumer), counted. On both
// queue types; a quorum queue's delay queue is a quorum queue too.
func TestNackDelayIsKeptByTheBroker(t *testing.T) {
	t.Parallel()
	amqpURL, vhost := newVhost(t)
	for _, qt := range queueTypes {
		t.Run(string(qt), func(t *testing.T) {
			t.Parallel()
			ps := newPubSub(t, amqpURL, func(c *rabbitmq.Config) { c.QueueType = qt })
			require.True(t, ps.NacksWithDelay())
			topic := brokertest.Topic(t)
			poison := message.NewMessage(watermill.NewUUID(), []byte("poison"))
			valid := message.NewMessage(watermill.NewUUID(), []byte("valid"))
			require.NoError(t, ps.Publish(topic, poison, valid))
			msgs, err := ps.Subscribe(context.Background(), topic)
			require.NoError(t, err)

			first := brokertest.Next(t, msgs, 30*time.Second)
			require.Equal(t, poison.UUID, first.UUID)
			first.Metadata.Set(metadata.NackDelayKey, (2 * time.Second).String())
			nackedAt := time.Now()
			require.True(t, first.Nack())

			next := brokertest.Next(t, msgs, 30*time.Second)
			assert.Equal(t, valid.UUID, next.UUID, "the queue moves on while the poison message waits")
			assert.Less(t, time.Since(nackedAt), time.Second, "at once, not after the delay")
			require.True(t, next.Ack())

			again := brokertest.Next(t, msgs, 30*time.Second)
			assert.Equal(t, poison.UUID, again.UUID)
			// RabbitMQ's expiry of the delayed copy can fire a few ms
			// before its TTL on this process's clock (seen: 1.993 s of 2 s).
			assert.GreaterOrEqual(t, time.Since(nackedAt), 2*time.Second-50*time.Millisecond, "back after its delay")
			assert.Equal(t, "1", again.Metadata.Get(metadata.AttemptKey), "the delayed redelivery counts")
			require.True(t, again.Ack())
			assert.Contains(t, rabbitmqctl(t, "list_queues", "-p", vhost, "name", "type"), topic+".eventpipe-delay-2s\t"+string(qt))
		})
	}
}
