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

// While RabbitMQ blocks the publishing connection (a memory or disk alarm: it
// sends connection.blocked and stops reading from the socket), Publish fails
// fast with ErrBlocked instead of hanging until its timeout, consuming goes
// on (a redelivery whose counted copy cannot be published is handled all the
// same), and Close returns.
//
// The alarm is simulated by a proxy that does to the publishing connection
// what the broker does: setting a real one (rabbitmqctl
// set_vm_memory_high_watermark) would block every publisher of every test on
// this shared broker.
func TestBlockedConnection(t *testing.T) {
	t.Parallel()
	amqpURL, _ := newVhost(t)
	proxy, viaProxy := proxyURL(t, amqpURL)
	const publishTimeout = 5 * time.Second
	ps := newPubSub(t, viaProxy, func(c *rabbitmq.Config) { c.PublishTimeout = publishTimeout })
	topic := brokertest.Topic(t)
	require.NoError(t, ps.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("before the alarm"))))

	require.Equal(t, 1, proxy.block("eventpipe publish", "low on memory (simulated)"))
	start := time.Now()
	err := ps.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("during the alarm")))
	require.ErrorIs(t, err, rabbitmq.ErrBlocked)
	assert.Contains(t, err.Error(), "low on memory (simulated)")
	assert.Less(t, time.Since(start), 2*time.Second, "fails fast, not after the %s publish timeout", publishTimeout)
	start = time.Now()
	require.ErrorIs(t, ps.Publish(topic, message.NewMessage(watermill.NewUUID(), nil)), rabbitmq.ErrBlocked)
	assert.Less(t, time.Since(start), 100*time.Millisecond, "known blocked: nothing is sent")

	// A consumer dies holding a message; its redelivery reaches ps, which
	// cannot publish the counted copy, and handles it anyway.
	crashed := brokertest.Topic(t)
	require.NoError(t, newPubSub(t, amqpURL, nil).Publish(crashed, message.NewMessage(watermill.NewUUID(), nil)))
	dyingProxy, viaDying := proxyURL(t, amqpURL)
	dying := newPubSub(t, viaDying, nil)
	msgs, err := dying.Subscribe(context.Background(), crashed)
	require.NoError(t, err)
	_ = brokertest.Next(t, msgs, 30*time.Second)
	dyingProxy.kill()
	msgs, err = ps.Subscribe(context.Background(), crashed)
	require.NoError(t, err)
	start = time.Now()
	got := brokertest.Next(t, msgs, 30*time.Second)
	got.Ack()
	assert.Less(t, time.Since(start), 2*time.Second, "handled without waiting for the publish timeout")
	assert.Equal(t, "1", got.Metadata.Get(metadata.AttemptKey), "counted for this delivery")

	proxy.unblock("eventpipe publish")
	require.Eventually(t, func() bool {
		return ps.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("after the alarm"))) == nil
	}, 10*time.Second, 20*time.Millisecond, "publishing works again once the broker unblocks")

	proxy.block("eventpipe publish", "low on disk (simulated)")
	closed := make(chan error, 1)
	go func() { closed <- ps.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs on a blocked connection")
	}
}
