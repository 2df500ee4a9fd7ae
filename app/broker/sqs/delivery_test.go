package sqs_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/sqs"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// Retry timing is the queue's: a nack leaves the visibility as it is, so the
// message comes back when the visibility timeout (5 s here) runs out, even
// with the retry middleware's metadata.NackDelayKey on it; only a delay marked
// metadata.ExplicitNackDelayKey changes it. All three are nacked together:
// the explicit 0 s comes back at once, the explicit 2 s after 2 s, the plain
// one (asking 0 s without the mark) only after the visibility timeout.
func TestNackLeavesVisibilityUnlessExplicit(t *testing.T) {
	t.Parallel()
	var ps broker.PubSub = newPubSub(t, testConfig(t))
	d, ok := ps.(broker.NackDelayer)
	require.True(t, ok, "the SQS PubSub is a broker.NackDelayer")
	require.True(t, d.NacksWithDelay(), "the middleware must not wait in process: the queue times the redelivery")

	topic := brokertest.Topic(t)
	require.NoError(t, ps.(*sqs.PubSub).SubscribeInitialize(topic))
	now := message.NewMessage(watermill.NewUUID(), []byte(`{"m":"explicit 0s"}`))
	delayed := message.NewMessage(watermill.NewUUID(), []byte(`{"m":"explicit 2s"}`))
	plain := message.NewMessage(watermill.NewUUID(), []byte(`{"m":"backoff, not explicit"}`))
	require.NoError(t, ps.Publish(topic, now, delayed, plain))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)

	const delay = 2 * time.Second
	var nackedAt time.Time
	for pending := map[string]bool{now.UUID: true, delayed.UUID: true, plain.UUID: true}; len(pending) > 0; {
		m := brokertest.Next(t, msgs, 20*time.Second)
		require.True(t, pending[m.UUID], "unexpected delivery of %s before all were nacked", m.Payload)
		delete(pending, m.UUID)
		switch m.UUID {
		case now.UUID:
			m.Metadata.Set(metadata.NackDelayKey, "0s")
			m.Metadata.Set(metadata.ExplicitNackDelayKey, "true")
		case delayed.UUID:
			m.Metadata.Set(metadata.NackDelayKey, delay.String())
			m.Metadata.Set(metadata.ExplicitNackDelayKey, "true")
		case plain.UUID:
			// What the retry middleware sets for a route on the queue's timing.
			m.Metadata.Set(metadata.NackDelayKey, "0s")
		}
		nackedAt = time.Now()
		require.True(t, m.Nack())
	}

	want := []struct {
		msg      *message.Message
		min, max time.Duration
	}{
		{now, 0, delay - 500*time.Millisecond},
		{delayed, delay - 500*time.Millisecond, 4 * time.Second},
		{plain, 4 * time.Second, 15 * time.Second},
	}
	for _, w := range want {
		m := brokertest.Next(t, msgs, 20*time.Second)
		waited := time.Since(nackedAt)
		require.True(t, m.Ack())
		require.Equal(t, string(w.msg.Payload), string(m.Payload), "order of redelivery")
		assert.GreaterOrEqual(t, waited, w.min, "%s: redelivered too soon", m.Payload)
		assert.LessOrEqual(t, waited, w.max, "%s: redelivered too late", m.Payload)
		assert.Empty(t, m.Metadata.Get(metadata.NackDelayKey), "the delay request is not sent on with the message")
		assert.Empty(t, m.Metadata.Get(metadata.ExplicitNackDelayKey), "nor its mark")
	}
}

// metadata.FirstFailureKey is absent on a first delivery (a publisher's value
// included) and, on every redelivery, the time of the first receive.
func TestFirstFailureTime(t *testing.T) {
	t.Parallel()
	ps := newPubSub(t, testConfig(t))
	topic := brokertest.Topic(t)
	require.NoError(t, ps.SubscribeInitialize(topic))
	c := rawClient(t)
	sent := time.Now()
	_, err := c.SendMessage(context.Background(), &awssqs.SendMessageInput{
		QueueUrl:    aws.String(queueURL(t, c, topic)),
		MessageBody: aws.String(`{"n":1}`),
		MessageAttributes: map[string]types.MessageAttributeValue{
			metadata.FirstFailureKey: {DataType: aws.String("String"), StringValue: aws.String("2000-01-01T00:00:00Z")},
		},
	})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)

	m := brokertest.Next(t, msgs, 10*time.Second)
	assert.Equal(t, "0", m.Metadata.Get(metadata.AttemptKey))
	assert.NotContains(t, m.Metadata, metadata.FirstFailureKey, "a publisher's value is not delivered")
	nackAtOnce(t, m)

	var firstSeen string
	for range 2 {
		m := brokertest.Next(t, msgs, 10*time.Second)
		got := m.Metadata.Get(metadata.FirstFailureKey)
		at, err := time.Parse(time.RFC3339Nano, got)
		require.NoError(t, err, "%q", got)
		assert.True(t, strings.HasSuffix(got, "Z"), "UTC: %q", got)
		// The emulator's clock is this machine's; a second either way for
		// millisecond truncation and scheduling.
		assert.WithinRange(t, at, sent.Add(-time.Second), time.Now().Add(time.Second))
		if firstSeen == "" {
			firstSeen = got
			nackAtOnce(t, m)
		} else {
			assert.Equal(t, firstSeen, got, "the same on every redelivery")
			require.True(t, m.Ack())
		}
	}
}

// A message handed out and neither acked nor nacked when the drain of Close
// ends is released: another consumer gets it long before the queue's 30 s
// visibility timeout, and the handler's context is cancelled.
func TestCloseReleasesUnsettled(t *testing.T) {
	t.Parallel()
	c := rawClient(t)
	topic, url := queueWithVisibility(t, c, "30")
	logs := newSyncLogs()
	cfg := queueVisibilityConfig(t)
	cfg.DrainTimeout = 500 * time.Millisecond
	ps, err := sqs.New(context.Background(), cfg, logs)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ps.Close() })
	require.NoError(t, ps.Publish(topic, newMessages(1)...))

	msgs, err := ps.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	held := brokertest.Next(t, msgs, 10*time.Second)
	require.NoError(t, ps.Close())
	assert.Error(t, held.Context().Err(), "the handler is told")

	closed := time.Now()
	var again []types.Message
	for len(again) == 0 && time.Since(closed) < 15*time.Second {
		again = receiveRaw(t, c, url, 2)
	}
	// (Its receive count may be 3: a poll still under way when the drain
	// ended may take the released message, and it is released again.)
	require.Len(t, again, 1, "released: visible again well before the 30 s visibility timeout")

	logged := false
	for _, l := range logs.at(watermill.InfoLogLevel) {
		if strings.Contains(l.Msg, "releasing") && l.Fields["message_uuid"] == held.UUID {
			logged = true
		}
	}
	assert.True(t, logged, "the release is logged with the message")
}
