package sqs_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/sqs"
	"github.com/eventpipe/eventpipe/app/metadata"
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
