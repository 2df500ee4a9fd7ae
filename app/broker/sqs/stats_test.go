package sqs_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/brokertest"
)

// brokertest checks ready, in flight and drained; here: a delayed message
// is counted as delayed, not ready, and a queue deleted after its URL was
// cached is an error, not zeros.
func TestQueueStatsDelayedAndDeletedQueue(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := rawClient(t)
	queue := brokertest.Topic(t)
	_, err := client.CreateQueue(ctx, &awssqs.CreateQueueInput{
		QueueName:  aws.String(queue),
		Attributes: map[string]string{"DelaySeconds": "60"},
	})
	require.NoError(t, err)
	ps := newPubSub(t, testConfig(t))

	require.NoError(t, ps.Publish(queue, message.NewMessage(watermill.NewUUID(), []byte(`{}`))))
	var s broker.QueueStats
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		s, err = ps.QueueStats(ctx, queue)
		if assert.NoError(c, err) {
			assert.Equal(c, int64(1), s.Delayed)
		}
	}, 10*time.Second, 100*time.Millisecond, "the delayed message counted")
	assert.Equal(t, broker.QueueStats{
		Queue: queue, Delayed: 1, InFlightKnown: true, Approximate: true, Note: s.Note,
	}, s)
	assert.False(t, s.Empty(), "a delayed message is not drained")

	_, err = client.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: aws.String(queueURL(t, client, queue))})
	require.NoError(t, err)
	_, err = ps.QueueStats(ctx, queue)
	require.ErrorIs(t, err, broker.ErrQueueNotFound)
}
