package app_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/app/testenv"
)

// deadLetter is a dead letter of source with reason, as eventpipe records it.
func deadLetter(source, reason, class string, at time.Time) *message.Message {
	msg := newTracedMessage(fmt.Sprintf(`{"reason":%q}`, reason))
	metadata.SetDeadLetter(msg, metadata.DeadLetter{Reason: reason, Class: class, Attempts: 3, SourceQueue: source,
		FirstFailureAt: at.Add(-time.Minute), LastFailureAt: at, DeadLetteredAt: at, TraceID: msg.Metadata.Get(metadata.TraceIDKey)})
	return msg
}

// Dead letters group by class and reason with its ids and numbers masked; a
// dry run of a group changes nothing; a group redrive moves only that group,
// unspent (x-attempt 0), and leaves the rest in the DLQ; an edit whose body
// the target's validation refuses sends nothing and keeps the dead letter;
// a discard removes it without a copy.
func TestRedriveGroupDryRunEditAndDiscard(t *testing.T) {
	t.Parallel()
	for _, b := range testbrokers.Kinds {
		if !b.Durable {
			continue
		}
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			scope := testbrokers.Scope(t, b.Name)
			ps := testbrokers.New(t, b.Name, scope)
			source := brokertest.Topic(t)
			dlq := source + "-dlq"
			at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
			notFound := []*message.Message{
				deadLetter(source, "order 17 not found", "permanent", at),
				deadLetter(source, "order 99 not found", "permanent", at.Add(time.Hour)),
				deadLetter(source, "order 5 not found", "permanent", at.Add(2*time.Hour)),
			}
			timeout := deadLetter(source, "timeout talking to the database", "transient", at)
			publish(t, ps, source)
			publish(t, ps, dlq, append(notFound, timeout)...)

			var peek app.DeadLetterPeek
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				var err error
				peek, err = app.PeekDeadLetters(ctx, ps, dlq, 100)
				if assert.NoError(c, err) {
					assert.Len(c, peek.Letters, 4)
				}
			}, 30*time.Second, 200*time.Millisecond)
			groups := app.GroupDeadLetters(peek.Letters)
			require.Len(t, groups, 2)
			assert.Equal(t, "order <n> not found", groups[0].Reason)
			assert.Equal(t, "permanent", groups[0].Class)
			assert.Equal(t, 3, groups[0].Count)
			assert.Equal(t, at, groups[0].FirstSeen)
			assert.Equal(t, at.Add(2*time.Hour), groups[0].LastSeen)
			assert.Equal(t, "transient", groups[1].Class)

			dry, err := app.Redrive(ctx, ps, ps, dlq, app.RedriveOptions{Group: groups[0].Key, DryRun: true})
			require.NoError(t, err)
			assert.Len(t, dry, 3)
			for _, r := range dry {
				assert.Equal(t, source, r.To)
			}
			again, err := app.PeekDeadLetters(ctx, ps, dlq, 100)
			require.NoError(t, err)
			assert.Len(t, again.Letters, 4, "a dry run changes nothing")

			done, err := app.Redrive(ctx, ps, ps, dlq, app.RedriveOptions{Group: groups[0].Key, Idle: 3 * time.Second})
			require.NoError(t, err)
			var moved []string
			for _, r := range done {
				moved = append(moved, r.ID)
			}
			assert.ElementsMatch(t, []string{notFound[0].UUID, notFound[1].UUID, notFound[2].UUID}, moved)

			subCtx, stop := context.WithCancel(ctx)
			defer stop()
			msgs, err := ps.Subscribe(subCtx, source)
			require.NoError(t, err)
			for range 3 {
				m := brokertest.Next(t, msgs, 30*time.Second)
				assert.Equal(t, "0", m.Metadata.Get(metadata.AttemptKey), "a redriven copy starts afresh")
				assert.Empty(t, m.Metadata.Get(metadata.DeadLetterKey))
				m.Ack()
			}
			stop()

			left := func(n int) app.DeadLetterPeek {
				t.Helper()
				var p app.DeadLetterPeek
				require.EventuallyWithT(t, func(c *assert.CollectT) {
					var err error
					p, err = app.PeekDeadLetters(ctx, ps, dlq, 100)
					if assert.NoError(c, err) {
						assert.Len(c, p.Letters, n)
					}
				}, 30*time.Second, 200*time.Millisecond)
				return p
			}
			rest := left(1)
			assert.Equal(t, timeout.UUID, rest.Letters[0].ID, "the other group stays")
			assert.NotNil(t, rest.Letters[0].History, "passed over with its history")

			refused := errors.New("payload.orderId is required")
			_, err = app.Redrive(ctx, ps, ps, dlq, app.RedriveOptions{
				IDs: []string{timeout.UUID}, Idle: 3 * time.Second,
				Edits:    map[string][]byte{timeout.UUID: []byte(`{}`)},
				Validate: func(string, []byte) error { return refused },
			})
			require.ErrorIs(t, err, refused)
			left(1)

			gone, err := app.Redrive(ctx, ps, ps, dlq, app.RedriveOptions{IDs: []string{timeout.UUID}, Discard: true, Idle: 3 * time.Second})
			require.NoError(t, err)
			require.Len(t, gone, 1)
			assert.True(t, gone[0].Discarded)
			left(0)
		})
	}
}

// A DLQ that SQS's redrive policy filled (no history of eventpipe's) is
// moved by the broker (broker.MessageMover; on the emulator, batches
// eventpipe sends and deletes) to the source the broker names, after a
// canary moved one on its own, keeping ids and bodies.
func TestRedriveOfABrokerFilledDLQIsMovedByTheBroker(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ps := testbrokers.New(t, "sqs", "")
	source := brokertest.Topic(t)
	dlq := source + "-dlq"
	var sent []string
	for i := range 3 {
		msg := message.NewMessage(fmt.Sprintf("%s-%d", source, i), []byte(fmt.Sprintf(`{"n":%d}`, i)))
		sent = append(sent, msg.UUID)
		publish(t, ps, dlq, msg)
	}
	publish(t, ps, source)
	raw := awssqs.New(awssqs.Options{Region: testenv.SQSRegion, BaseEndpoint: aws.String(testenv.SQSEndpoint(t)),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")})
	dlqURL, err := raw.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(dlq)})
	require.NoError(t, err)
	arn, err := raw.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: dlqURL.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	require.NoError(t, err)
	srcURL, err := raw.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(source)})
	require.NoError(t, err)
	_, err = raw.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: srcURL.QueueUrl, Attributes: map[string]string{
		"RedrivePolicy": `{"deadLetterTargetArn":"` + arn.Attributes["QueueArn"] + `","maxReceiveCount":3}`}})
	require.NoError(t, err)

	var progress []app.RedriveProgress
	done, err := app.Redrive(ctx, ps, ps, dlq, app.RedriveOptions{Canary: true, CanaryWait: time.Second, Idle: 3 * time.Second,
		Progress: func(p app.RedriveProgress) { progress = append(progress, p) }})
	require.NoError(t, err)
	require.Len(t, done, 2, "%+v", done)
	assert.Contains(t, sent, done[0].ID, "the canary, moved on its own")
	assert.Equal(t, source, done[0].To)
	assert.Equal(t, app.Redriven{To: source, Moved: 2}, done[1], "the rest, moved by the broker")
	require.NotEmpty(t, progress)
	assert.EqualValues(t, 2, progress[len(progress)-1].Last.Moved)

	subCtx, stop := context.WithCancel(ctx)
	defer stop()
	msgs, err := ps.Subscribe(subCtx, source)
	require.NoError(t, err)
	var got []string
	for range 3 {
		m := brokertest.Next(t, msgs, 30*time.Second)
		got = append(got, m.UUID)
		m.Ack()
	}
	assert.ElementsMatch(t, sent, got, "ids kept")
	left, err := app.PeekDeadLetters(ctx, ps, dlq, 10)
	require.NoError(t, err)
	assert.Empty(t, left.Letters)
}

// countingPublisher counts Publish calls and messages.
type countingPublisher struct {
	message.Publisher
	mu          sync.Mutex
	calls, msgs int
}

func (c *countingPublisher) Publish(topic string, msgs ...*message.Message) error {
	c.mu.Lock()
	c.calls++
	c.msgs += len(msgs)
	c.mu.Unlock()
	return c.Publisher.Publish(topic, msgs...)
}

// On RabbitMQ and the Postgres broker a redrive without a selection goes
// in batches (broker.BatchReceiver): a batch's copies in one publish
// (RabbitMQ: confirms pipelined), then one settlement for the batch (one
// multiple ack; one statement). --max is kept exactly (what the prefetch or
// the claim holds beyond it stays), and every copy arrives unspent, without
// its history.
func TestRedriveInBatches(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"rabbitmq", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			testRedriveInBatches(t, kind)
		})
	}
}

func testRedriveInBatches(t *testing.T, kind string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ps := testbrokers.New(t, kind, testbrokers.Scope(t, kind))
	source := brokertest.Topic(t)
	dlq := source + "-dlq"
	const n = 250
	at := time.Now().UTC()
	var letters []*message.Message
	for i := range n {
		letters = append(letters, deadLetter(source, fmt.Sprintf("order %d not found", i), "permanent", at))
	}
	publish(t, ps, source)
	publish(t, ps, dlq, letters...)

	pub := &countingPublisher{Publisher: ps}
	done, err := app.Redrive(ctx, ps, pub, dlq, app.RedriveOptions{Max: 150, Idle: 3 * time.Second})
	require.NoError(t, err)
	assert.Len(t, done, 150)
	// Two batches of 100 and 50, or a few more when a batch's next delivery
	// came later than the reader's fill window (20 ms; seen under -race on
	// two loaded cores) — never anywhere near a publish per message.
	assert.GreaterOrEqual(t, pub.calls, 2, "at most 100 a batch")
	assert.LessOrEqual(t, pub.calls, 4, "batches of 100, not a publish per message")
	first := pub.calls
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		peek, err := app.PeekDeadLetters(ctx, ps, dlq, 1000)
		if assert.NoError(c, err) {
			assert.Len(c, peek.Letters, n-150, "--max kept; the rest of the prefetch given back")
		}
	}, 30*time.Second, 200*time.Millisecond)

	var progress int
	done, err = app.Redrive(ctx, ps, pub, dlq, app.RedriveOptions{Idle: 2 * time.Second, Progress: func(p app.RedriveProgress) { progress = p.Done }})
	require.NoError(t, err)
	assert.Len(t, done, n-150)
	assert.Equal(t, n-150, progress)
	assert.LessOrEqual(t, pub.calls-first, 2, "the 100 left in batches")

	subCtx, stop := context.WithCancel(ctx)
	defer stop()
	msgs, err := ps.Subscribe(subCtx, source)
	require.NoError(t, err)
	seen := map[string]bool{}
	for range n {
		m := brokertest.Next(t, msgs, 30*time.Second)
		seen[m.UUID] = true
		assert.Equal(t, "0", m.Metadata.Get(metadata.AttemptKey), "a redriven copy starts afresh")
		assert.Empty(t, m.Metadata.Get(metadata.DeadLetterKey))
		m.Ack()
	}
	for _, l := range letters {
		assert.True(t, seen[l.UUID], "%s arrived", l.UUID)
	}
}

// A canary redrive reports its progress as one redrive: the rest's counts
// and time go on from the canary's, so a progress bar or the console's job
// page never goes back to 1.
func TestCanaryRedriveProgressCountsOnFromTheCanary(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ps := testbrokers.New(t, "postgres", testbrokers.Scope(t, "postgres"))
	source := brokertest.Topic(t)
	dlq := source + "-dlq"
	var letters []*message.Message
	for i := range 5 {
		letters = append(letters, deadLetter(source, fmt.Sprintf("order %d not found", i), "permanent", time.Now().UTC()))
	}
	publish(t, ps, source)
	publish(t, ps, dlq, letters...)

	var done []int
	var elapsed []time.Duration
	moved, err := app.Redrive(ctx, ps, ps, dlq, app.RedriveOptions{Canary: true, CanaryWait: time.Second, Idle: time.Second,
		Progress: func(p app.RedriveProgress) { done, elapsed = append(done, p.Done), append(elapsed, p.Elapsed) }})
	require.NoError(t, err)
	require.Len(t, moved, 5)
	assert.Equal(t, []int{1, 2, 3, 4, 5}, done)
	assert.Greater(t, elapsed[1], time.Second, "the rest's time includes the canary's watch")
}
