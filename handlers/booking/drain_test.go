package booking_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/handlers/booking"
)

type fakeDepth map[string]int64

func (f fakeDepth) Depth(_ context.Context, q string) (int64, error) {
	n, ok := f[q]
	if !ok {
		return 0, errors.New("no such queue")
	}
	return n, nil
}

func TestCheckDrained(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, err := booking.CheckDrained(ctx, fakeDepth{booking.Queue: 0, booking.DLQ: 0}, booking.Queue, booking.DLQ)
	require.NoError(t, err)
	assert.True(t, r.Drained())
	assert.Contains(t, r.String(), "drained")
	for _, d := range []fakeDepth{{booking.Queue: 3, booking.DLQ: 0}, {booking.Queue: 0, booking.DLQ: 1}} {
		r, err := booking.CheckDrained(ctx, d, booking.Queue, booking.DLQ)
		require.NoError(t, err)
		assert.False(t, r.Drained(), "a message in the queue or its DLQ blocks the deploy")
		assert.Contains(t, r.String(), "not drained")
	}
	_, err = booking.CheckDrained(ctx, fakeDepth{booking.Queue: 0}, booking.Queue, booking.DLQ)
	require.ErrorContains(t, err, booking.DLQ, "a DLQ that cannot be counted is an error, not zero")
	_, err = booking.CheckDrained(ctx, booking.NoDepth{Broker: "memory"}, booking.Queue, booking.DLQ)
	require.ErrorIs(t, err, booking.ErrDepthNotSupported)
}

// The gate against each durable broker's own count: one message in the
// queue → not drained; consumed → drained; a missing queue → an error.
func TestDrainGateOnBrokers(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqs", "postgres", "rabbitmq"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			scope := testbrokers.Scope(t, kind)
			ps := testbrokers.New(t, kind, scope)
			prefix := "d" + strings.ToLower(watermill.NewShortUUID())[:8] + "-"
			queue, dlq := prefix+booking.Queue, prefix+booking.DLQ
			var d booking.Depther
			switch kind {
			case "sqs":
				d = booking.SQSDepth{Client: sqs.New(sqs.Options{
					Region: testenv.SQSRegion, BaseEndpoint: aws.String(testenv.SQSEndpoint(t)),
					Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
				})}
			case "postgres":
				d = booking.PostgresDepth{Pool: dbtest.Pool(t), Schema: scope}
			case "rabbitmq":
				d = booking.RabbitMQDepth{URL: scope}
			}
			_, err := booking.CheckDrained(ctx, d, queue, dlq)
			require.Error(t, err, "queues not created yet: never reported drained")

			init, ok := ps.(message.SubscribeInitializer)
			require.True(t, ok)
			require.NoError(t, init.SubscribeInitialize(queue))
			require.NoError(t, init.SubscribeInitialize(dlq))
			r, err := booking.CheckDrained(ctx, d, queue, dlq)
			require.NoError(t, err)
			assert.True(t, r.Drained(), r.String())

			ev := withID(t, booking.Event{BookingSessionID: "bks_gate", Type: booking.TypeStepCompleted, OccurredAt: moment})
			msg, err := booking.Message(ev)
			require.NoError(t, err)
			require.NoError(t, ps.Publish(dlq, msg))
			testbrokers.Eventually(t, 10*time.Second, "the DLQ counted", func() bool {
				r, err = booking.CheckDrained(ctx, d, queue, dlq)
				require.NoError(t, err)
				return r.DLQMessages == 1
			})
			assert.False(t, r.Drained(), r.String())

			msgs, err := ps.Subscribe(ctx, dlq)
			require.NoError(t, err)
			select {
			case m := <-msgs:
				require.NotNil(t, m)
				m.Ack()
			case <-ctx.Done():
				t.Fatal("no message")
			}
			testbrokers.Eventually(t, 10*time.Second, "drained", func() bool {
				r, err = booking.CheckDrained(ctx, d, queue, dlq)
				require.NoError(t, err)
				return r.Drained()
			})
		})
	}
}
