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

	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/rabbitmq"
	"github.com/eventpipe/eventpipe/app/broker/routing"
	"github.com/eventpipe/eventpipe/app/broker/routing/routingtest"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// With a Declared topology the adapter routes "<exchange>/<key>" natively,
// declares the whole topology on first use (so a message reaches queues
// nobody consumes yet), and agrees with `topology apply` on every argument.
func TestDeclaredTopology(t *testing.T) {
	t.Parallel()
	amqpURL, vhost := newVhost(t)
	tp := routingtest.Topology()
	declared, err := rabbitmq.NewDeclared(tp, nil)
	require.NoError(t, err)
	ps := newPubSub(t, amqpURL, func(c *rabbitmq.Config) { c.Topology = declared })

	// Provisioned first by the CLI's path: the adapter must not conflict.
	unresolved, err := ps.Apply(context.Background(), tp)
	require.NoError(t, err)
	require.True(t, unresolved.InSync(), unresolved.String())

	pub, err := routing.NewNative(ps, tp)
	require.NoError(t, err)
	sent := message.NewMessage(watermill.NewUUID(), []byte(`{"messageType":"analyze.resume"}`))
	require.NoError(t, pub.Publish("core/analyze.resume", sent))
	var unroutable *routing.UnroutableError
	require.ErrorAs(t, pub.Publish("core/nothing.bound", message.NewMessage(watermill.NewUUID(), nil)), &unroutable)

	assert.Equal(t, "1", queueDepth(t, vhost, "q.analyze"))
	assert.Equal(t, "1", queueDepth(t, vhost, "q.realtime"))
	assert.Equal(t, "0", queueDepth(t, vhost, "q.generate"))

	msgs, err := ps.Subscribe(context.Background(), "q.realtime")
	require.NoError(t, err)
	got := brokertest.Next(t, msgs, 30*time.Second)
	got.Ack()
	assert.Equal(t, sent.UUID, got.UUID)
	assert.Equal(t, "core", got.Metadata.Get(metadata.ExchangeKey))
	assert.Equal(t, "analyze.resume", got.Metadata.Get(metadata.RoutingKeyKey))

	// A queue outside the topology is a plain durable queue.
	other := brokertest.Topic(t)
	require.NoError(t, ps.Publish(other, message.NewMessage(watermill.NewUUID(), nil)))
	assert.Equal(t, "1", queueDepth(t, vhost, other))
}

// A fresh vhost: the adapter alone declares everything, no Apply needed.
func TestDeclaredTopologyWithoutApply(t *testing.T) {
	t.Parallel()
	amqpURL, vhost := newVhost(t)
	declared, err := rabbitmq.NewDeclared(routingtest.Topology(), nil)
	require.NoError(t, err)
	ps := newPubSub(t, amqpURL, func(c *rabbitmq.Config) { c.Topology = declared })
	require.NoError(t, ps.Publish("core/generate.questions", message.NewMessage(watermill.NewUUID(), nil)))
	assert.Equal(t, "1", queueDepth(t, vhost, "q.generate"))
}

// A queue's own prefetch (a spec's batch size) replaces the default for its
// consumers only.
func TestQueuePrefetch(t *testing.T) {
	t.Parallel()
	amqpURL, vhost := newVhost(t)
	one, other := brokertest.Topic(t)+"-one", brokertest.Topic(t)+"-other"
	ps := newPubSub(t, amqpURL, func(c *rabbitmq.Config) { c.QueuePrefetch = map[string]int{one: 1} })
	for _, q := range []string{one, other} {
		_, err := ps.Subscribe(context.Background(), q)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		out := rabbitmqctl(t, "list_consumers", "-p", vhost, "queue_name", "prefetch_count")
		return strings.Contains(out, one+"\t1") && strings.Contains(out, other+"\t100")
	}, 30*time.Second, 200*time.Millisecond)

	_, err := rabbitmq.New(context.Background(), rabbitmq.Config{URL: amqpURL, QueuePrefetch: map[string]int{one: 0}}, nil)
	assert.ErrorContains(t, err, "prefetch 0 of queue")
}
