package rabbitmq_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/rabbitmq"
)

// A broadcast topic reaches every instance, each on a queue of its own that
// goes away with it; other topics still compete on their durable queue.
func TestInstanceFanout(t *testing.T) {
	t.Parallel()
	amqpURL, vhost := newVhost(t)
	const topic, work = "test.broadcast", "test.work"
	instance := func(name string) *rabbitmq.PubSub {
		return newPubSub(t, amqpURL, func(c *rabbitmq.Config) {
			c.Topology = rabbitmq.InstanceFanout{Topics: []string{topic}, Instance: name}
		})
	}
	a, b := instance("a"), instance("b")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	subA, err := a.Subscribe(ctx, topic)
	require.NoError(t, err)
	bctx, stopB := context.WithCancel(ctx)
	subB, err := b.Subscribe(bctx, topic)
	require.NoError(t, err)

	id := watermill.NewUUID()
	require.NoError(t, a.Publish(topic, message.NewMessage(id, []byte("hello"))))
	for name, sub := range map[string]<-chan *message.Message{"a": subA, "b": subB} {
		select {
		case msg := <-sub:
			assert.Equal(t, id, msg.UUID, name)
			msg.Ack()
		case <-ctx.Done():
			require.Failf(t, "no broadcast", "instance %s did not receive the broadcast", name)
		}
	}
	queues := rabbitmqctl(t, "list_queues", "-p", vhost, "name", "durable", "auto_delete")
	assert.Contains(t, queues, topic+".a\tfalse\ttrue")
	assert.Contains(t, queues, topic+".b\tfalse\ttrue")

	// b stops consuming: its queue is deleted with its last consumer.
	stopB()
	require.Eventually(t, func() bool {
		return !strings.Contains(rabbitmqctl(t, "list_queues", "-p", vhost, "name"), topic+".b")
	}, 20*time.Second, 100*time.Millisecond, "b's queue outlived its consumer")

	// A topic that is not broadcast is the fallback's durable queue.
	exchange, key := rabbitmq.InstanceFanout{Topics: []string{topic}, Instance: "a"}.Route(work)
	assert.Equal(t, []string{"", work}, []string{exchange, key})
	assert.Equal(t, work, rabbitmq.InstanceFanout{Topics: []string{topic}, Instance: "a"}.Queue(work))
}
