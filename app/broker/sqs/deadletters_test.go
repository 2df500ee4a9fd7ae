package sqs_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/brokertest"
)

// DeadLetterSources names the queues whose RedrivePolicy targets a DLQ (on
// the emulator, which lacks ListDeadLetterSourceQueues, by reading every
// queue's policy), and none for a queue nobody dead-letters into.
func TestDeadLetterSources(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := rawClient(t)
	base := brokertest.Topic(t)
	dlq := base + "-dlq"
	out, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(dlq)})
	require.NoError(t, err)
	attrs, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: out.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	require.NoError(t, err)
	policy := `{"deadLetterTargetArn":"` + attrs.Attributes["QueueArn"] + `","maxReceiveCount":3}`
	for _, name := range []string{base + "-b", base + "-a"} {
		_, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: map[string]string{"RedrivePolicy": policy}})
		require.NoError(t, err)
	}
	_, err = c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(base + "-unrelated")})
	require.NoError(t, err)

	var ps broker.PubSub = newPubSub(t, testConfig(t))
	sourcer, ok := ps.(broker.DeadLetterSourcer)
	require.True(t, ok, "the SQS PubSub is a broker.DeadLetterSourcer")
	got, err := sourcer.DeadLetterSources(ctx, dlq)
	require.NoError(t, err)
	assert.Equal(t, []string{base + "-a", base + "-b"}, got)

	got, err = sourcer.DeadLetterSources(ctx, base+"-unrelated")
	require.NoError(t, err)
	assert.Empty(t, got)

	_, err = sourcer.DeadLetterSources(ctx, base+"-missing")
	assert.ErrorIs(t, err, broker.ErrQueueNotFound)
}
