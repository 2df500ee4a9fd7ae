package middleware_test

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/msgctx"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/middleware"
)

func TestCorrelationKeepsIncomingTraceID(t *testing.T) {
	t.Parallel()
	in := message.NewMessage(watermill.NewUUID(), nil)
	in.Metadata.Set(metadata.TraceIDKey, "trace-from-upstream")

	var seen string
	produced, err := middleware.Correlation(func(msg *message.Message) ([]*message.Message, error) {
		seen = msgctx.TraceID(msg.Context())
		return []*message.Message{
			message.NewMessage(watermill.NewUUID(), nil),
			msgctx.NewMessage(msg.Context(), nil),
		}, nil
	})(in)
	require.NoError(t, err)
	assert.Equal(t, "trace-from-upstream", seen)
	for _, p := range produced {
		assert.Equal(t, "trace-from-upstream", p.Metadata.Get(metadata.TraceIDKey))
	}
}

func TestCorrelationGivesATraceIDToMessagesWithout(t *testing.T) {
	t.Parallel()
	in := message.NewMessage(watermill.NewUUID(), nil)
	var seen string
	_, err := middleware.Correlation(func(msg *message.Message) ([]*message.Message, error) {
		seen = msgctx.TraceID(msg.Context())
		return nil, nil
	})(in)
	require.NoError(t, err)
	assert.Regexp(t, regexp.MustCompile(`^[0-9a-f]{32}$`), seen)
	assert.Equal(t, seen, in.Metadata.Get(metadata.TraceIDKey))
}

// withRoute stands for the router, which puts the queue and handler names in
// the context (the service test checks those labels end to end); called
// directly, both labels are empty.
func withRoute(msg *message.Message) *message.Message { return msg }

// fastPolicy retries in process at once: three attempts, then the DLQ.
func fastPolicy() route.Policy {
	p := route.DefaultPolicy()
	p.Backoff = route.Backoff{Initial: time.Millisecond, Multiplier: 1, Max: time.Millisecond}
	p.DeadLetterQueue = "dlq"
	return p
}

func wrap(chain []message.HandlerMiddleware, h message.HandlerFunc) message.HandlerFunc {
	for i := len(chain) - 1; i >= 0; i-- {
		h = chain[i](h)
	}
	return h
}

func TestChainCountsHandledFailedRetried(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := middleware.NewMetrics(reg)
	dlq := &recordingPublisher{}
	chain := middleware.Chain(middleware.Deps{Logger: slog.New(slog.DiscardHandler), Metrics: m, Publisher: dlq}, route.Route{Policy: fastPolicy()})

	ok := wrap(chain, func(*message.Message) ([]*message.Message, error) { return nil, nil })
	_, err := ok(withRoute(message.NewMessage("1", nil)))
	require.NoError(t, err)

	calls := 0
	flaky := wrap(chain, func(*message.Message) ([]*message.Message, error) {
		calls++
		if calls < 2 {
			return nil, errors.New("transient")
		}
		return nil, nil
	})
	_, err = flaky(withRoute(message.NewMessage("2", nil)))
	require.NoError(t, err)

	failing := wrap(chain, func(*message.Message) ([]*message.Message, error) { return nil, errors.New("always") })
	_, err = failing(withRoute(message.NewMessage("3", nil)))
	require.NoError(t, err, "dead-lettered after three attempts, then acked")

	panicking := wrap(chain, func(*message.Message) ([]*message.Message, error) { panic("boom") })
	_, err = panicking(withRoute(message.NewMessage("4", nil)))
	require.NoError(t, err, "a panic becomes an error, retried, then dead-lettered")

	dlq.fail = errors.New("broker down")
	_, err = failing(withRoute(message.NewMessage("5", nil)))
	require.Error(t, err, "a dead letter that cannot be published leaves the message nacked")

	labels := prometheus.Labels{"queue": "", "handler": ""}
	assert.Equal(t, 2.0, testutil.ToFloat64(m.Handled.With(labels)))
	assert.Equal(t, 2.0, testutil.ToFloat64(m.DeadLettered.With(labels)))
	assert.Equal(t, 1.0, testutil.ToFloat64(m.Failed.With(labels)))
	// flaky: 1 retry; failing (twice) and panicking: 2 retries each.
	assert.Equal(t, 7.0, testutil.ToFloat64(m.Retried.With(labels)))
	assert.Len(t, dlq.published("dlq"), 2)
}

func TestChainDoesNotRetryShutdown(t *testing.T) {
	t.Parallel()
	m := middleware.NewMetrics(prometheus.NewRegistry())
	dlq := &recordingPublisher{}
	chain := middleware.Chain(middleware.Deps{Logger: slog.New(slog.DiscardHandler), Metrics: m, Publisher: dlq}, route.Route{Policy: fastPolicy()})
	calls := 0
	h := wrap(chain, func(*message.Message) ([]*message.Message, error) {
		calls++
		return nil, context.Canceled
	})
	_, err := h(withRoute(message.NewMessage("1", nil)))
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 1, calls)
	assert.Empty(t, dlq.published("dlq"), "shutdown never dead-letters")
}

func TestDuplicateIsAcknowledgedWithoutRetry(t *testing.T) {
	t.Parallel()
	m := middleware.NewMetrics(prometheus.NewRegistry())
	chain := middleware.Chain(middleware.Deps{Logger: slog.New(slog.DiscardHandler), Metrics: m, Publisher: &recordingPublisher{}}, route.Route{Policy: fastPolicy()})
	calls := 0
	h := wrap(chain, func(*message.Message) ([]*message.Message, error) {
		calls++
		return nil, failure.AsDuplicate(errors.New("processed_messages row exists"))
	})
	_, err := h(message.NewMessage("1", nil))
	require.NoError(t, err, "a duplicate is acked")
	assert.Equal(t, 1, calls)
	labels := prometheus.Labels{"queue": "", "handler": ""}
	assert.Equal(t, 1.0, testutil.ToFloat64(m.Duplicates.With(labels)))
	assert.Equal(t, 0.0, testutil.ToFloat64(m.Failed.With(labels)))
}

// Observe counts each message under its own queue and handler (the router's
// context values), also when one Observe sees several routes in turn.
func TestObserveCountsPerQueueAndHandler(t *testing.T) {
	t.Parallel()
	m := middleware.NewMetrics(prometheus.NewRegistry())
	h := middleware.Observe(slog.New(slog.DiscardHandler), m)(func(*message.Message) ([]*message.Message, error) { return nil, nil })
	a, b := routerContext(t, "handler-a", "queue-a"), routerContext(t, "handler-b", "queue-b")
	for _, ctx := range []context.Context{a, a, b, a, b, b, b} {
		msg := message.NewMessage(watermill.NewUUID(), nil)
		msg.SetContext(ctx)
		_, err := h(msg)
		require.NoError(t, err)
	}
	assert.Equal(t, 3.0, testutil.ToFloat64(m.Handled.WithLabelValues("queue-a", "handler-a")))
	assert.Equal(t, 4.0, testutil.ToFloat64(m.Handled.WithLabelValues("queue-b", "handler-b")))
	assert.Equal(t, 0.0, testutil.ToFloat64(m.Handled.WithLabelValues("", "")))
}

// The chain asks the root's inbox (Deps.Inbox) about a message delivered
// MaxAttempts times without an outcome, for a route that names its inbox
// consumer and message id: one whose marker is committed is acked, one
// without is dead-lettered, and a route that names no consumer is never
// asked about.
func TestChainAcksACrashLoopedMessageItsInboxHasSeen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ib := inbox.NewMemory()
	require.NoError(t, ib.Process(ctx, "worker", "done-1", func(context.Context) error { return nil }))
	idOf := func(payload []byte) string { return strings.TrimPrefix(string(payload), "id:") }
	run := func(r route.Route, payload string) (dead int, err error) {
		dlq := &recordingPublisher{}
		r.Policy = fastPolicy()
		chain := middleware.Chain(middleware.Deps{Logger: slog.New(slog.DiscardHandler), Metrics: middleware.NewMetrics(prometheus.NewRegistry()), Publisher: dlq, Inbox: ib}, r)
		h := wrap(chain, func(*message.Message) ([]*message.Message, error) {
			t.Fatal("the handler must not run again")
			return nil, nil
		})
		msg := withRoute(message.NewMessage("m", []byte(payload)))
		msg.Metadata.Set(metadata.AttemptKey, strconv.Itoa(fastPolicy().MaxAttempts))
		_, err = h(msg)
		return len(dlq.published("dlq")), err
	}
	withInbox := route.Route{InboxConsumer: "worker", MessageID: idOf}
	dead, err := run(withInbox, "id:done-1")
	require.NoError(t, err)
	assert.Zero(t, dead, "processed: acked without a dead letter")
	dead, err = run(withInbox, "id:other")
	require.NoError(t, err)
	assert.Equal(t, 1, dead, "not processed: dead-lettered")
	dead, err = run(route.Route{MessageID: idOf}, "id:done-1")
	require.NoError(t, err)
	assert.Equal(t, 1, dead, "no inbox consumer named: dead-lettered as before")
}
