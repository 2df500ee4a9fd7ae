package app_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/app/testenv"
)

// A message dead-lettered by its route can be inspected in place, then
// redriven to its source queue, where a fixed handler processes it.
func TestPeekAndRedriveDeadLetters(t *testing.T) {
	t.Parallel()
	for _, b := range testbrokers.Kinds {
		if !b.Durable {
			continue // the embedded broker's queues live in serve's process
		}
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			scope := testbrokers.Scope(t, b.Name)
			ps := testbrokers.New(t, b.Name, scope)
			queue := brokertest.Topic(t)
			dlq := queue + "-dlq"
			var fixed atomic.Bool
			var handled atomic.Int64
			r := route.Route{
				Name:  "redrive",
				Queue: queue,
				Handle: func(*message.Message) error {
					if !fixed.Load() {
						return failure.AsPermanent(errors.New("bug in the handler"))
					}
					handled.Add(1)
					return nil
				},
				Policy: testPolicy(route.InProcess, route.DeadLetter, dlq),
			}
			stop := startRoute(t, ps, r)
			msgs := []*message.Message{newTracedMessage(`{"n":1}`), newTracedMessage(`{"n":2}`)}
			publish(t, ps, queue, msgs...)

			var views []app.DeadLetterView
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				peeker := testbrokers.New(t, b.Name, scope)
				var err error
				got, err := app.PeekDeadLetters(context.Background(), peeker, dlq, 10)
				_ = peeker.Close()
				views = got.Letters
				if assert.NoError(c, err) {
					assert.Len(c, views, 2)
				}
			}, 3*b.Redelivery, 100*time.Millisecond, "both dead letters visible")
			for _, v := range views {
				require.NotNil(t, v.History, v.ID)
				assert.Equal(t, queue, v.History.SourceQueue)
				assert.Contains(t, v.History.Reason, "bug in the handler")
				assert.Equal(t, "permanent", v.History.Class)
			}
			stop()

			fixed.Store(true)
			ps2 := testbrokers.New(t, b.Name, scope)
			startRoute(t, ps2, r)
			redriver := testbrokers.New(t, b.Name, scope)
			var total []app.Redriven
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				done, err := app.RedriveDeadLetters(context.Background(), redriver, redriver, dlq, "", 0, 2*time.Second)
				total = append(total, done...)
				if assert.NoError(c, err) {
					assert.GreaterOrEqual(c, len(total), 2)
				}
			}, 3*b.Redelivery, 100*time.Millisecond)
			for _, r := range total {
				assert.Equal(t, queue, r.To)
			}
			require.Eventually(t, func() bool { return handled.Load() == 2 }, 3*b.Redelivery, 50*time.Millisecond, "the fixed handler processes both")
		})
	}
}

// A peek puts what it read back at once, on every broker: the next peek, or a
// redrive right after it, sees the same dead letters. (On SQS a nack leaves
// the visibility as it is, so a plain nack would hide them for the queue's
// visibility timeout.)
func TestPeekDeadLettersLeavesThemVisible(t *testing.T) {
	t.Parallel()
	for _, b := range testbrokers.Kinds {
		if !b.Durable {
			continue
		}
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			scope := testbrokers.Scope(t, b.Name)
			ps := testbrokers.New(t, b.Name, scope)
			dlq := brokertest.Topic(t) + "-dlq"
			publish(t, ps, dlq, newTracedMessage(`{"n":1}`), newTracedMessage(`{"n":2}`))

			peeker := testbrokers.New(t, b.Name, scope)
			var views []app.DeadLetterView
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				got, err := app.PeekDeadLetters(context.Background(), peeker, dlq, 10)
				views = got.Letters
				if assert.NoError(c, err) {
					assert.Len(c, views, 2)
				}
			}, 3*b.Redelivery, 100*time.Millisecond, "both dead letters visible")
			for range 2 {
				again, err := app.PeekDeadLetters(context.Background(), peeker, dlq, 10)
				require.NoError(t, err)
				assert.Len(t, again.Letters, 2, "what a peek read is there for the next one at once")
				for _, v := range again.Letters {
					assert.NotContains(t, v.Metadata, metadata.NackDelayKey, "the peek's own redelivery request is not shown")
					assert.NotContains(t, v.Metadata, metadata.ExplicitNackDelayKey)
				}
			}
		})
	}
}

// A booking-like FIFO message that SQS's own redrive policy dead-lettered
// (maxReceiveCount 1, received twice without a delete) carries no history of
// ours; the redrive names its source from the queue whose redrive policy
// targets the DLQ, and it arrives there with its group, although its
// original deduplication id was used on that queue a moment ago.
func TestRedriveNativeFIFODeadLetter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := awssqs.New(awssqs.Options{
		Region:       testenv.SQSRegion,
		BaseEndpoint: aws.String(testenv.SQSEndpoint(t)),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	name := brokertest.Topic(t)
	source, dlq := name+".fifo", name+"-dlq.fifo"
	dlqOut, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(dlq), Attributes: map[string]string{"FifoQueue": "true"}})
	require.NoError(t, err)
	dlqURL := aws.ToString(dlqOut.QueueUrl)
	attrs, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(dlqURL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	require.NoError(t, err)
	srcOut, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(source), Attributes: map[string]string{
		"FifoQueue":         "true",
		"VisibilityTimeout": "1",
		"RedrivePolicy":     `{"deadLetterTargetArn":"` + attrs.Attributes["QueueArn"] + `","maxReceiveCount":1}`,
	}})
	require.NoError(t, err)
	srcURL := aws.ToString(srcOut.QueueUrl)

	ps := testbrokers.New(t, "sqs", testbrokers.Scope(t, "sqs"))
	event := message.NewMessage("evt-"+watermill.NewShortUUID(), []byte(`{"bookingSessionId":"bks_1","type":"session.started"}`))
	event.Metadata.Set(metadata.GroupIDKey, "bks_1")
	event.Metadata.Set(metadata.DeduplicationIDKey, event.UUID)
	require.NoError(t, ps.Publish(source, event))

	// Received and never deleted, until the redrive policy moves it.
	require.Eventually(t, func() bool {
		if _, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(srcURL), WaitTimeSeconds: 1}); err != nil {
			return false
		}
		out, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
			QueueUrl:       aws.String(dlqURL),
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages},
		})
		return err == nil && out.Attributes["ApproximateNumberOfMessages"] == "1"
	}, 20*time.Second, 100*time.Millisecond, "dead-lettered by the redrive policy")

	done, err := app.RedriveDeadLetters(ctx, ps, ps, dlq, "", 0, 2*time.Second)
	require.NoError(t, err)
	// The whole DLQ, filled by the broker: the broker moves it
	// (broker.MessageMover; batches eventpipe moves on the emulator).
	assert.Equal(t, []app.Redriven{{To: source, Moved: 1}}, done)

	var got []types.Message
	for start := time.Now(); len(got) == 0 && time.Since(start) < 10*time.Second; {
		out, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(srcURL),
			WaitTimeSeconds:             1,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		require.NoError(t, err)
		got = out.Messages
	}
	require.Len(t, got, 1, "the redriven copy arrives on its source queue")
	m := got[0]
	assert.Equal(t, string(event.Payload), aws.ToString(m.Body))
	assert.Equal(t, "bks_1", m.Attributes["MessageGroupId"], "in its group")
	assert.Equal(t, event.UUID, aws.ToString(m.MessageAttributes["_watermill_message_uuid"].StringValue), "the same message id")
	assert.NotEqual(t, event.UUID, m.Attributes["MessageDeduplicationId"], "a deduplication id of its own")

	out, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(dlqURL), WaitTimeSeconds: 1})
	require.NoError(t, err)
	assert.Empty(t, out.Messages, "the dead letter is gone")
}
