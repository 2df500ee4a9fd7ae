package rabbitmq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/rabbitmq"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/topology"
)

// On an ordered (FIFO) classic queue a consumer that dies holding messages
// does not reorder them: the redeliveries are handed over in their place,
// never republished behind the later messages, and still say they were
// delivered before.
func TestCrashKeepsOrderOnAFIFOQueue(t *testing.T) {
	t.Parallel()
	amqpURL, _ := newVhost(t)
	queue := "t" + watermill.NewShortUUID() + ".fifo"
	declared, err := rabbitmq.NewDeclared(topology.Topology{Name: "ordered", Queues: []topology.Queue{{Name: queue, FIFO: true}}}, nil)
	require.NoError(t, err)
	withTopology := func(c *rabbitmq.Config) { c.Topology = declared; c.Prefetch = 2 }
	publisher := newPubSub(t, amqpURL, withTopology)
	var sent []string
	for i := range 6 {
		m := message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, "event %d", i))
		sent = append(sent, m.UUID)
		require.NoError(t, publisher.Publish(queue, m))
	}

	proxy, viaProxy := proxyURL(t, amqpURL)
	ps := newPubSub(t, viaProxy, withTopology)
	msgs, err := ps.Subscribe(context.Background(), queue)
	require.NoError(t, err)
	require.Equal(t, sent[0], brokertest.Next(t, msgs, 30*time.Second).UUID)
	proxy.kill() // dies holding the first two messages; the rest wait in the queue
	_ = ps.Close()

	ps = newPubSub(t, amqpURL, withTopology)
	msgs, err = ps.Subscribe(context.Background(), queue)
	require.NoError(t, err)
	var got []string
	for range sent {
		m := brokertest.Next(t, msgs, 30*time.Second)
		got = append(got, m.UUID)
		if len(got) == 1 {
			assert.Equal(t, "1", m.Metadata.Get(metadata.AttemptKey), "the crashed delivery counts for this delivery")
		}
		require.True(t, m.Ack())
	}
	assert.Equal(t, sent, got, "publish order after the crash")
}
