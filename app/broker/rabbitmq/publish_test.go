package rabbitmq_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/rabbitmq"
	"github.com/eventpipe/eventpipe/app/broker/routing/routingtest"
	"github.com/eventpipe/eventpipe/app/failure"
)

// deleteQueue deletes queue with a raw channel, as an operator would.
func deleteQueue(t *testing.T, amqpURL, queue string) {
	t.Helper()
	conn, err := amqp.Dial(amqpURL)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDelete(queue, false, false, false)
	require.NoError(t, err)
}

// A publish no queue takes — its queue was deleted under the adapter — is an
// error the caller can inspect, not a confirmed success with the message
// dropped: publishes are mandatory and the broker's returns are watched. The
// error is retryable, and the retry declares the queue again.
func TestPublishNoQueueTakesIsAnError(t *testing.T) {
	t.Parallel()
	amqpURL, _ := newVhost(t)
	ps := newPubSub(t, amqpURL, nil)
	topic := brokertest.Topic(t)
	require.NoError(t, ps.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("declares"))))
	_ = receiveOne(t, ps, topic)
	deleteQueue(t, amqpURL, topic)

	lost := message.NewMessage(watermill.NewUUID(), []byte("no queue"))
	err := ps.Publish(topic, lost, message.NewMessage(watermill.NewUUID(), []byte("no queue either")))
	var unroutable *rabbitmq.UnroutableError
	require.ErrorAs(t, err, &unroutable)
	assert.Equal(t, lost.UUID, unroutable.MessageUUID)
	assert.Equal(t, 2, unroutable.Returned)
	assert.Equal(t, "", unroutable.Exchange)
	assert.Equal(t, topic, unroutable.RoutingKey)
	assert.Equal(t, failure.Transient, failure.Of(err), "retryable: the queue may come back")

	retried := message.NewMessage(watermill.NewUUID(), []byte("again"))
	require.NoError(t, ps.Publish(topic, retried), "the return made the adapter declare the queue again")
	assert.Equal(t, retried.UUID, receiveOne(t, ps, topic).UUID)
	require.NoError(t, ps.Publish(topic, message.NewMessage(watermill.NewUUID(), nil)), "the channel is still usable")
}

// With the spec topology, a return also makes the adapter declare the whole
// topology again (Declared declares once, and remembered it).
func TestPublishNoQueueTakesDeclaredTopology(t *testing.T) {
	t.Parallel()
	amqpURL, vhost := newVhost(t)
	declared, err := rabbitmq.NewDeclared(routingtest.Topology(), nil)
	require.NoError(t, err)
	ps := newPubSub(t, amqpURL, func(c *rabbitmq.Config) { c.Topology = declared })
	require.NoError(t, ps.Publish("core/generate.questions", message.NewMessage(watermill.NewUUID(), nil)))
	deleteQueue(t, amqpURL, "q.generate")

	var unroutable *rabbitmq.UnroutableError
	require.ErrorAs(t, ps.Publish("core/generate.questions", message.NewMessage(watermill.NewUUID(), nil)), &unroutable)
	assert.Equal(t, "core", unroutable.Exchange)
	assert.Equal(t, "generate.questions", unroutable.RoutingKey)

	require.NoError(t, ps.Publish("core/generate.questions", message.NewMessage(watermill.NewUUID(), nil)))
	assert.Equal(t, "1", queueDepth(t, vhost, "q.generate"), "declared again, then delivered")
}

// After a reconnect the adapter declares again before it publishes: the
// broker may have lost what was declared (a restart without its data). Here
// the queues are deleted while the adapter is not looking, then its
// connections are closed from the server side; the first publish after the
// reconnect is delivered.
func TestRedeclareAfterReconnect(t *testing.T) {
	t.Parallel()
	amqpURL, vhost := newVhost(t)
	declared, err := rabbitmq.NewDeclared(routingtest.Topology(), nil)
	require.NoError(t, err)
	plainTopic := brokertest.Topic(t)
	type publisher struct {
		topic, queue string
		ps           *rabbitmq.PubSub
		logger       recordingLogger
	}
	var pubs []publisher
	for _, tc := range []struct {
		topology     rabbitmq.Topology
		topic, queue string
	}{
		{nil, plainTopic, plainTopic},
		{declared, "core/generate.questions", "q.generate"},
	} {
		logger := newRecordingLogger()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		ps, err := rabbitmq.New(ctx, rabbitmq.Config{
			URL: amqpURL, Topology: tc.topology, ReconnectInitialInterval: 50 * time.Millisecond,
		}, logger)
		cancel()
		require.NoError(t, err)
		t.Cleanup(func() { _ = ps.Close() })
		require.NoError(t, ps.Publish(tc.topic, message.NewMessage(watermill.NewUUID(), nil)))
		deleteQueue(t, amqpURL, tc.queue)
		pubs = append(pubs, publisher{tc.topic, tc.queue, ps, logger})
	}

	closeConnectionsViaAPI(t, amqpURL, vhost, 2*len(pubs)) // a publish and a subscribe connection each

	for _, p := range pubs {
		require.Eventually(t, func() bool {
			return len(p.logger.find("RabbitMQ connection lost, reconnecting")) == 2 && p.ps.Ping(context.Background()) == nil
		}, 30*time.Second, 50*time.Millisecond, "both connections lost and back")
		require.NoError(t, p.ps.Publish(p.topic, message.NewMessage(watermill.NewUUID(), nil)), "%s declared again", p.queue)
		assert.Equal(t, "1", queueDepth(t, vhost, p.queue))
	}
}
