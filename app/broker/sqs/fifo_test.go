package sqs_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/sqs"
	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/middleware"
)

// FIFO queues: the group comes from x-group-id (or the outbox's ordering
// key), the deduplication id is the message id, so the same event published
// twice is stored once; a message without a group is refused before sending.
func TestFIFOPublish(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.CreateQueues = true
	ps := newPubSub(t, cfg)
	queue := brokertest.Topic(t) + ".fifo"

	first := message.NewMessage(watermill.NewUUID(), []byte(`{"seq":1}`))
	first.Metadata.Set(metadata.GroupIDKey, "booking-1")
	second := message.NewMessage(watermill.NewUUID(), []byte(`{"seq":2}`))
	second.Metadata.Set(metadata.OrderingKeyKey, "booking-1")
	require.NoError(t, ps.Publish(queue, first, second))
	again := message.NewMessage(first.UUID, first.Payload)
	again.Metadata.Set(metadata.GroupIDKey, "booking-1")
	require.NoError(t, ps.Publish(queue, again), "a duplicate is accepted and dropped by SQS")

	var invalid *sqs.InvalidMessageError
	require.ErrorAs(t, ps.Publish(queue, message.NewMessage(watermill.NewUUID(), []byte(`{}`))), &invalid)
	assert.Contains(t, invalid.Error(), "message group id")

	c := rawClient(t)
	url := queueURL(t, c, queue)
	visible, inFlight := depth(t, c, url)
	assert.Equal(t, 2, visible+inFlight, "the duplicate was deduplicated")

	msgs, err := ps.Subscribe(context.Background(), queue)
	require.NoError(t, err)
	for _, want := range []*message.Message{first, second} {
		got := brokertest.Next(t, msgs, 10*time.Second)
		assert.Equal(t, want.UUID, got.UUID, "in order within the group")
		got.Ack()
	}
}

// createFIFO creates a FIFO queue the way the topology does, without content
// deduplication, and returns its name and URL.
func createFIFO(t *testing.T, c *awssqs.Client, name string) (string, string) {
	t.Helper()
	out, err := c.CreateQueue(context.Background(), &awssqs.CreateQueueInput{
		QueueName:  aws.String(name),
		Attributes: map[string]string{string(types.QueueAttributeNameFifoQueue): "true"},
	})
	require.NoError(t, err)
	return name, aws.ToString(out.QueueUrl)
}

// A FIFO message carries its SQS MessageGroupId as metadata.GroupIDKey, so a
// foreign publisher's message (it sets no attribute of ours) can be
// republished to a FIFO queue: dead-lettered, redriven.
func TestFIFOGroupOnReceipt(t *testing.T) {
	t.Parallel()
	c := rawClient(t)
	queue, url := createFIFO(t, c, brokertest.Topic(t)+".fifo")
	_, err := c.SendMessage(context.Background(), &awssqs.SendMessageInput{
		QueueUrl:               aws.String(url),
		MessageBody:            aws.String(`{"bookingSessionId":"bks_1"}`),
		MessageGroupId:         aws.String("bks_1"),
		MessageDeduplicationId: aws.String("evt-1"),
	})
	require.NoError(t, err)

	ps := newPubSub(t, testConfig(t))
	msgs, err := ps.Subscribe(context.Background(), queue)
	require.NoError(t, err)
	m := brokertest.Next(t, msgs, 10*time.Second)
	assert.Equal(t, "bks_1", m.Metadata.Get(metadata.GroupIDKey))
	m.Ack()
}

// deadLetterOne receives one message of queue and runs it through the failure
// policy with a handler that fails permanently, as a booking-like route on
// SQS does: the policy publishes the dead letter to dlq, then it is acked.
func deadLetterOne(t *testing.T, ps *sqs.PubSub, queue, dlq string) *message.Message {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := ps.Subscribe(ctx, queue)
	require.NoError(t, err)
	m := brokertest.Next(t, msgs, 10*time.Second)
	policy := middleware.Policy{
		Route: route.Policy{
			MaxAttempts: 5, Redelivery: route.Broker,
			Backoff:     route.Backoff{Initial: time.Second, Multiplier: 2, Max: time.Second},
			OnPermanent: route.DeadLetter, DeadLetterQueue: dlq,
		},
		Publisher: ps,
		NackDelay: true,
		Logger:    slog.New(slog.DiscardHandler),
	}
	_, err = policy.Middleware(func(*message.Message) ([]*message.Message, error) {
		return nil, failure.Permanentf("unknown event type")
	})(m)
	require.NoError(t, err, "dead-lettered")
	require.True(t, m.Ack())
	return m
}

// Dead-lettering to a FIFO DLQ keeps the message's group and gets a
// deduplication id of its own, derived from the original's and the
// dead-lettering: a foreign message (group from SQS alone) reaches the DLQ,
// and a message dead-lettered twice within SQS's five-minute deduplication
// window (redriven, failed again) is there twice rather than dropped the
// second time.
func TestFIFODeadLetterKeepsGroup(t *testing.T) {
	t.Parallel()
	c := rawClient(t)
	base := brokertest.Topic(t)
	queue, url := createFIFO(t, c, base+".fifo")
	dlq, dlqURL := createFIFO(t, c, base+"-dlq.fifo")
	ps := newPubSub(t, testConfig(t))

	// A foreign publisher's message, and a booking-like one of ours (id =
	// event id = deduplication id, group = booking session).
	_, err := c.SendMessage(context.Background(), &awssqs.SendMessageInput{
		QueueUrl:               aws.String(url),
		MessageBody:            aws.String(`{"n":"foreign"}`),
		MessageGroupId:         aws.String("bks_foreign"),
		MessageDeduplicationId: aws.String("foreign-1"),
	})
	require.NoError(t, err)
	foreign := deadLetterOne(t, ps, queue, dlq)

	ours := message.NewMessage("evt-"+watermill.NewShortUUID(), []byte(`{"n":"ours"}`))
	ours.Metadata.Set(metadata.GroupIDKey, "bks_ours")
	ours.Metadata.Set(metadata.DeduplicationIDKey, ours.UUID)
	require.NoError(t, ps.Publish(queue, ours))
	deadLetterOne(t, ps, queue, dlq)
	// The same message again within five minutes, as a redrive sends it
	// (same id, new deduplication id on the source queue), failing again.
	again := message.NewMessage(ours.UUID, ours.Payload)
	again.Metadata.Set(metadata.GroupIDKey, "bks_ours")
	again.Metadata.Set(metadata.DeduplicationIDKey, ours.UUID)
	_, err = c.SendMessage(context.Background(), &awssqs.SendMessageInput{
		QueueUrl:               aws.String(url),
		MessageBody:            aws.String(string(ours.Payload)),
		MessageGroupId:         aws.String("bks_ours"),
		MessageDeduplicationId: aws.String("redriven-" + ours.UUID),
		MessageAttributes: map[string]types.MessageAttributeValue{
			"_watermill_message_uuid":   {DataType: aws.String("String"), StringValue: aws.String(ours.UUID)},
			metadata.DeduplicationIDKey: {DataType: aws.String("String"), StringValue: aws.String(ours.UUID)},
		},
	})
	require.NoError(t, err)
	deadLetterOne(t, ps, queue, dlq)

	type dead struct{ group, dedup, body string }
	var got []dead
	for len(got) < 3 {
		out, err := c.ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(dlqURL),
			MaxNumberOfMessages:         10,
			WaitTimeSeconds:             2,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		require.NoError(t, err)
		if len(out.Messages) == 0 {
			break
		}
		for _, m := range out.Messages {
			// Deleted, so that the group's next message is delivered.
			_, err := c.DeleteMessage(context.Background(), &awssqs.DeleteMessageInput{QueueUrl: aws.String(dlqURL), ReceiptHandle: m.ReceiptHandle})
			require.NoError(t, err)
			got = append(got, dead{
				group: m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)],
				dedup: m.Attributes[string(types.MessageSystemAttributeNameMessageDeduplicationId)],
				body:  aws.ToString(m.Body),
			})
		}
	}
	require.Len(t, got, 3, "every dead letter reached the DLQ: %+v", got)
	assert.Equal(t, dead{group: "bks_foreign", body: `{"n":"foreign"}`}, dead{group: got[0].group, body: got[0].body})
	for _, d := range got[1:] {
		assert.Equal(t, "bks_ours", d.group)
		assert.Equal(t, `{"n":"ours"}`, d.body)
	}
	for _, d := range got {
		assert.NotContains(t, []string{"foreign-1", foreign.UUID, ours.UUID}, d.dedup, "a deduplication id of its own")
		assert.Len(t, d.dedup, 64, "hex SHA-256")
	}
	assert.NotEqual(t, got[1].dedup, got[2].dedup, "two dead-letterings, two deduplication ids")
}
