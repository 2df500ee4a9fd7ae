package app_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/testbrokers"
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
			require.Eventually(t, func() bool {
				peeker := testbrokers.New(t, b.Name, scope)
				var err error
				views, err = app.PeekDeadLetters(context.Background(), peeker, dlq, 10, 2*time.Second)
				require.NoError(t, err)
				_ = peeker.Close()
				return len(views) == 2
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
			require.Eventually(t, func() bool {
				done, err := app.RedriveDeadLetters(context.Background(), redriver, redriver, dlq, "", 0, 2*time.Second)
				require.NoError(t, err)
				total = append(total, done...)
				return len(total) >= 2
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
			require.Eventually(t, func() bool {
				var err error
				views, err = app.PeekDeadLetters(context.Background(), peeker, dlq, 10, time.Second)
				require.NoError(t, err)
				return len(views) == 2
			}, 3*b.Redelivery, 100*time.Millisecond, "both dead letters visible")
			for range 2 {
				again, err := app.PeekDeadLetters(context.Background(), peeker, dlq, 10, time.Second)
				require.NoError(t, err)
				assert.Len(t, again, 2, "what a peek read is there for the next one at once")
				for _, v := range again {
					assert.NotContains(t, v.Metadata, metadata.NackDelayKey, "the peek's own redelivery request is not shown")
					assert.NotContains(t, v.Metadata, metadata.ExplicitNackDelayKey)
				}
			}
		})
	}
}
