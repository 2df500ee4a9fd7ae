package middleware_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/middleware"
)

// chainRun runs one message through the whole chain of r, the way the router
// does, and returns the dead letters.
func chainRun(t *testing.T, r route.Route, payload []byte) ([]*message.Message, error) {
	t.Helper()
	pub := &recordingPublisher{}
	h := message.HandlerFunc(func(msg *message.Message) ([]*message.Message, error) { return nil, r.Handle(msg) })
	mws := middleware.Chain(middleware.Deps{Logger: slog.New(slog.DiscardHandler), Publisher: pub, Metrics: middleware.NewMetrics(prometheus.NewRegistry())}, r)
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	msg := message.NewMessage("msg-1", payload)
	msg.SetContext(context.Background())
	_, err := h(msg)
	return pub.published(r.Policy.DeadLetterQueue), err
}

// A handler past its route's timeout is cancelled and the attempt counts as
// a transient failure: retried, then dead-lettered with the reason — never
// taken for a shutdown (which would requeue it for ever).
func TestTimeoutEndsTheAttemptAsAFailure(t *testing.T) {
	t.Parallel()
	calls := 0
	r := route.Route{Name: "slow", Queue: "work", Timeout: 50 * time.Millisecond,
		Policy: policyFor(route.InProcess, route.DeadLetter),
		Handle: func(msg *message.Message) error {
			calls++
			<-msg.Context().Done()
			return msg.Context().Err()
		}}
	dlq, err := chainRun(t, r, []byte(`{}`))
	require.NoError(t, err, "dead-lettered, so acknowledged")
	assert.Equal(t, 3, calls, "every attempt ran and timed out")
	require.Len(t, dlq, 1)
	info, ok, err := metadata.DeadLetterOf(dlq[0])
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "transient", info.Class)
	assert.Contains(t, info.Reason, "handler timed out after 50ms")
}

func TestEveryRouteHasATimeout(t *testing.T) {
	t.Parallel()
	assert.Equal(t, route.DefaultTimeout, route.Route{}.EffectiveTimeout())
	assert.Equal(t, time.Second, route.Route{Timeout: time.Second}.EffectiveTimeout())
}

// A body that is not valid UTF-8 is a permanent failure before its handler
// runs (a decoder would replace the bytes and handle other text than sent),
// landing where the route's policy says; a Binary route lets it through.
func TestInvalidUTF8IsPermanent(t *testing.T) {
	t.Parallel()
	for name, body := range map[string][]byte{
		"C3 28 in a path":  []byte("{\"filePath\":\"resumes/\xc3\x28.pdf\"}"),
		"Latin-1 Caf\\xe9": []byte("{\"merchant\":\"Caf\xe9\"}"),
	} {
		called := false
		r := route.Route{Name: "strict", Queue: "work", Policy: policyFor(route.InProcess, route.DeadLetter),
			Handle: func(*message.Message) error { called = true; return nil }}
		dlq, err := chainRun(t, r, body)
		require.NoError(t, err, name)
		assert.False(t, called, "%s: no handler sees it", name)
		require.Len(t, dlq, 1, name)
		info, _, err := metadata.DeadLetterOf(dlq[0])
		require.NoError(t, err)
		assert.Equal(t, failure.Permanent.String(), info.Class, name)
		assert.Contains(t, info.Reason, "not valid UTF-8", name)
		assert.Equal(t, body, []byte(dlq[0].Payload), "%s: the dead letter keeps the bytes as they arrived", name)

		r.Binary = true
		dlq, err = chainRun(t, r, body)
		require.NoError(t, err)
		assert.True(t, called, "%s: a binary route takes any bytes", name)
		assert.Empty(t, dlq)
	}
}

// Timeout reports each attempt's deadline to the broker's clock in the
// message's context, and the end of the attempt: a handler past its deadline
// is overdue, and between attempts nothing is.
func TestTimeoutReportsTheAttemptDeadline(t *testing.T) {
	t.Parallel()
	ctx, clock := broker.WithAttemptClock(context.Background())
	msg := message.NewMessage("msg-1", nil)
	msg.SetContext(ctx)
	var during, overdue bool
	h := middleware.Timeout(50 * time.Millisecond)(func(msg *message.Message) ([]*message.Message, error) {
		during = clock.Overdue(time.Now())
		<-msg.Context().Done()
		overdue = clock.Overdue(time.Now())
		return nil, nil
	})
	_, err := h(msg)
	require.NoError(t, err)
	assert.False(t, during, "within the deadline")
	assert.True(t, overdue, "past the deadline while the handler still runs")
	assert.False(t, clock.Overdue(time.Now()), "the attempt is over")
}
