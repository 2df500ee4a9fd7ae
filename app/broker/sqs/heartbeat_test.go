package sqs_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/sqs"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// queueWithVisibility creates a queue with the given visibility timeout, as
// the topology would, and returns its name and URL.
func queueWithVisibility(t *testing.T, c *awssqs.Client, seconds string) (string, string) {
	t.Helper()
	topic := brokertest.Topic(t)
	out, err := c.CreateQueue(context.Background(), &awssqs.CreateQueueInput{
		QueueName:  aws.String(topic),
		Attributes: map[string]string{string(types.QueueAttributeNameVisibilityTimeout): seconds},
	})
	require.NoError(t, err)
	return topic, aws.ToString(out.QueueUrl)
}

// receiveRaw receives up to one message of url as another consumer would,
// waiting up to wait. (Asking the emulator for the queue's depth is no test of
// visibility: it moves expired messages back only when someone receives.)
func receiveRaw(t *testing.T, c *awssqs.Client, url string, wait int32) []types.Message {
	t.Helper()
	out, err := c.ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{
		QueueUrl:        aws.String(url),
		WaitTimeSeconds: wait,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{
			types.MessageSystemAttributeNameApproximateReceiveCount,
		},
	})
	require.NoError(t, err)
	return out.Messages
}

// countingClient counts ChangeMessageVisibilityBatch calls (heartbeats and
// nacks) and DeleteMessageBatch calls.
type countingClient struct {
	inner            aws.HTTPClient
	extends, deletes atomic.Int32
}

func (c *countingClient) Do(r *http.Request) (*http.Response, error) {
	switch r.Header.Get("X-Amz-Target") {
	case "AmazonSQS.ChangeMessageVisibilityBatch":
		c.extends.Add(1)
	case "AmazonSQS.DeleteMessageBatch":
		c.deletes.Add(1)
	}
	return c.inner.Do(r)
}

// x-attempt is the number of earlier deliveries: 0, 1, 2 for a message nacked
// twice. A publisher's x-attempt is ignored, and neither it nor the receive
// count is sent on when a handler republishes the metadata it received.
func TestAttemptNumber(t *testing.T) {
	t.Parallel()
	ps := newPubSub(t, queueVisibilityConfig(t))
	topic := brokertest.Topic(t)
	require.NoError(t, ps.SubscribeInitialize(topic))
	c := rawClient(t)
	_, err := c.SendMessage(context.Background(), &awssqs.SendMessageInput{
		QueueUrl:    aws.String(queueURL(t, c, topic)),
		MessageBody: aws.String(`{"n":1}`),
		MessageAttributes: map[string]types.MessageAttributeValue{
			metadata.AttemptKey: {DataType: aws.String("String"), StringValue: aws.String("7")},
			"requestId":         {DataType: aws.String("String"), StringValue: aws.String("r-1")},
		},
	})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)

	var last *message.Message
	for want := range 3 {
		m := brokertest.Next(t, msgs, 10*time.Second)
		assert.Equal(t, []string{
			string(rune('0' + want)), string(rune('1' + want)),
		}, []string{m.Metadata.Get(metadata.AttemptKey), m.Metadata.Get(sqs.ReceiveCountKey)},
			"delivery %d: x-attempt and receive count", want+1)
		if want < 2 {
			nackAtOnce(t, m)
		} else {
			last = m
		}
	}

	// Republish what the handler got: the attempt and receive count stay behind.
	other := brokertest.Topic(t)
	require.NoError(t, ps.SubscribeInitialize(other))
	fwd := message.NewMessage(last.UUID, last.Payload)
	for k, v := range last.Metadata {
		fwd.Metadata.Set(k, v)
	}
	require.NoError(t, ps.Publish(other, fwd))
	require.True(t, last.Ack())

	out, err := c.ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{
		QueueUrl:              aws.String(queueURL(t, c, other)),
		MessageAttributeNames: []string{"All"},
		WaitTimeSeconds:       5,
	})
	require.NoError(t, err)
	require.Len(t, out.Messages, 1)
	attrs := out.Messages[0].MessageAttributes
	assert.NotContains(t, attrs, metadata.AttemptKey)
	assert.NotContains(t, attrs, sqs.ReceiveCountKey)
	assert.Equal(t, "r-1", aws.ToString(attrs["requestId"].StringValue), "other metadata is sent on")
}

// A handler that holds a message longer than the queue's visibility timeout
// keeps it: the heartbeat extends it, so another consumer of the queue does
// not get it meanwhile; after the ack it is gone.
func TestHeartbeatKeepsMessageInvisible(t *testing.T) {
	t.Parallel()
	c := rawClient(t)
	topic, url := queueWithVisibility(t, c, "2")

	ps := newPubSub(t, queueVisibilityConfig(t))
	require.NoError(t, ps.Publish(topic, newMessages(1)...))
	msgs, err := ps.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	held := brokertest.Next(t, msgs, 10*time.Second)
	assert.Equal(t, "0", held.Metadata.Get(metadata.AttemptKey))

	other := newPubSub(t, queueVisibilityConfig(t))
	otherMsgs, err := other.Subscribe(context.Background(), topic)
	require.NoError(t, err)

	nothing(t, otherMsgs, 5*time.Second)
	require.NoError(t, held.Context().Err())
	require.True(t, held.Ack())

	assert.EventuallyWithT(t, func(c2 *assert.CollectT) {
		visible, inFlight := depth(c2, c, url)
		assert.Equal(c2, 0, visible+inFlight, "acked: deleted")
	}, 5*time.Second, 50*time.Millisecond)
	nothing(t, otherMsgs, 3*time.Second)
}

// The heartbeat stops at the handler's deadline (the route's timeout, which
// middleware.Timeout reports through broker.StartAttempt): a handler that
// ignores its context no longer keeps the message, which another consumer
// then receives as a redelivery. Within the deadline it is extended.
func TestHeartbeatStopsAtTheHandlersDeadline(t *testing.T) {
	t.Parallel()
	c := rawClient(t)
	topic, _ := queueWithVisibility(t, c, "2")

	ps := newPubSub(t, queueVisibilityConfig(t))
	require.NoError(t, ps.Publish(topic, newMessages(1)...))
	msgs, err := ps.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	held := brokertest.Next(t, msgs, 10*time.Second)
	end := broker.StartAttempt(held.Context(), time.Now().Add(3*time.Second)) // Timeout(3s) as the route has it
	defer end()

	other := newPubSub(t, queueVisibilityConfig(t))
	otherMsgs, err := other.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	nothing(t, otherMsgs, 2500*time.Millisecond) // within the deadline: extended past the 2 s visibility
	// Past it: delivered again, to either subscription's receivers.
	var again *message.Message
	select {
	case again = <-otherMsgs:
	case again = <-msgs:
	case <-time.After(10 * time.Second):
		t.Fatal("not delivered again after the handler's deadline: the heartbeat kept it")
	}
	assert.Equal(t, held.UUID, again.UUID)
	assert.Equal(t, "1", again.Metadata.Get(metadata.AttemptKey), "delivered again, one more receive counted")
	require.True(t, again.Ack())
}

// The heartbeat extends a held message, and stops at the ack.
func TestHeartbeatStopsAfterAck(t *testing.T) {
	t.Parallel()
	c := rawClient(t)
	topic, url := queueWithVisibility(t, c, "1")

	counter := &countingClient{inner: awshttp.NewBuildableClient()}
	cfg := queueVisibilityConfig(t)
	cfg.ClientOptions = []func(*awssqs.Options){func(o *awssqs.Options) { o.HTTPClient = counter }}
	ps := newPubSub(t, cfg)
	require.NoError(t, ps.Publish(topic, newMessages(1)...))
	msgs, err := ps.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	m := brokertest.Next(t, msgs, 10*time.Second)

	time.Sleep(2 * time.Second)
	assert.GreaterOrEqual(t, counter.extends.Load(), int32(2), "extended while held (1 s visibility, 2 s held)")
	assert.Empty(t, receiveRaw(t, c, url, 0), "still invisible after twice its visibility timeout")

	require.True(t, m.Ack())
	require.Eventually(t, func() bool { return counter.deletes.Load() == 1 }, 5*time.Second, 10*time.Millisecond)
	after := counter.extends.Load()
	time.Sleep(1500 * time.Millisecond)
	assert.Equal(t, after, counter.extends.Load(), "no extension after the ack")
	nothing(t, msgs, 0)
}

// On Close the heartbeat goes on through the drain, then stops: a message
// still held after DrainTimeout is released and comes back at once.
func TestHeartbeatStopsAtDrainTimeout(t *testing.T) {
	t.Parallel()
	c := rawClient(t)
	topic, url := queueWithVisibility(t, c, "1")

	counter := &countingClient{inner: awshttp.NewBuildableClient()}
	cfg := queueVisibilityConfig(t)
	cfg.DrainTimeout = 3 * time.Second
	cfg.ClientOptions = []func(*awssqs.Options){func(o *awssqs.Options) { o.HTTPClient = counter }}
	ps := newPubSub(t, cfg)
	require.NoError(t, ps.Publish(topic, newMessages(1)...))
	msgs, err := ps.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	m := brokertest.Next(t, msgs, 10*time.Second)

	start := time.Now()
	closed := make(chan struct{})
	go func() {
		_ = ps.Close()
		close(closed)
	}()
	time.Sleep(1500 * time.Millisecond) // longer than the visibility timeout, within the drain
	assert.Empty(t, receiveRaw(t, c, url, 0), "kept invisible through the drain (longer than the visibility timeout)")
	<-closed
	assert.GreaterOrEqual(t, time.Since(start), cfg.DrainTimeout, "Close waited for the drain")

	after := counter.extends.Load()
	assert.Positive(t, after)
	again := receiveRaw(t, c, url, 5)
	if assert.Len(t, again, 1, "released after the drain: visible again") {
		assert.Equal(t, "2", again[0].Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	}
	assert.Equal(t, after, counter.extends.Load(), "no extension after Close")
	m.Ack()
	assert.Zero(t, counter.deletes.Load(), "an ack after the drain deletes nothing")
}

// A configured VisibilityTimeout is asked for on every receive, overriding
// the queue's: a message the subscription leaves alone (it cannot be
// unmarshaled) comes back after the configured 1 s, not the queue's 30 s.
func TestVisibilityTimeoutConfig(t *testing.T) {
	t.Parallel()
	c := rawClient(t)
	topic, url := queueWithVisibility(t, c, "30")

	cfg := queueVisibilityConfig(t)
	cfg.VisibilityTimeout = time.Second
	cfg.DrainTimeout = 100 * time.Millisecond
	seen := &seeingUnmarshaler{}
	cfg.Unmarshaler = seen
	ps := newPubSub(t, cfg)
	require.NoError(t, ps.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("poison"))))
	_, err := ps.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	require.Eventually(t, seen.poison.Load, 10*time.Second, 10*time.Millisecond, "the subscription received the message")
	require.NoError(t, ps.Close())

	start := time.Now()
	assert.Len(t, receiveRaw(t, c, url, 10), 1)
	assert.Less(t, time.Since(start), 10*time.Second, "left with the configured 1 s, not the queue's 30 s")
}

// seeingUnmarshaler is failingUnmarshaler that records whether it was handed
// the poison message.
type seeingUnmarshaler struct {
	failingUnmarshaler
	poison atomic.Bool
}

func (u *seeingUnmarshaler) Unmarshal(m *types.Message) (*message.Message, error) {
	if aws.ToString(m.Body) == "poison" {
		u.poison.Store(true)
	}
	return u.failingUnmarshaler.Unmarshal(m)
}
