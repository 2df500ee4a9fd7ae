package middleware_test

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/middleware"
)

func TestCorrelationKeepsIncomingTraceID(t *testing.T) {
	t.Parallel()
	in := message.NewMessage(watermill.NewUUID(), nil)
	in.Metadata.Set(middleware.TraceIDKey, "trace-from-upstream")

	var seen string
	produced, err := middleware.Correlation(func(msg *message.Message) ([]*message.Message, error) {
		seen = middleware.TraceID(msg.Context())
		return []*message.Message{
			message.NewMessage(watermill.NewUUID(), nil),
			middleware.NewMessage(msg.Context(), nil),
		}, nil
	})(in)
	require.NoError(t, err)
	assert.Equal(t, "trace-from-upstream", seen)
	for _, p := range produced {
		assert.Equal(t, "trace-from-upstream", p.Metadata.Get(middleware.TraceIDKey))
	}
}

func TestCorrelationGivesATraceIDToMessagesWithout(t *testing.T) {
	t.Parallel()
	in := message.NewMessage(watermill.NewUUID(), nil)
	var seen string
	_, err := middleware.Correlation(func(msg *message.Message) ([]*message.Message, error) {
		seen = middleware.TraceID(msg.Context())
		return nil, nil
	})(in)
	require.NoError(t, err)
	assert.Regexp(t, regexp.MustCompile(`^[0-9a-f]{32}$`), seen)
	assert.Equal(t, seen, in.Metadata.Get(middleware.TraceIDKey))
}

func TestNewMessageContinuesTrace(t *testing.T) {
	t.Parallel()
	ctx := middleware.WithTraceID(context.Background(), "t-1")
	msg := middleware.NewMessage(ctx, []byte("x"))
	assert.Equal(t, "t-1", msg.Metadata.Get(middleware.TraceIDKey))
	assert.Equal(t, "t-1", middleware.TraceID(msg.Context()))
	assert.NotEmpty(t, msg.UUID)

	bare := middleware.NewMessage(context.Background(), nil)
	assert.Empty(t, bare.Metadata.Get(middleware.TraceIDKey))
}

// withRoute stands for the router, which puts the queue and handler names in
// the context (the service test checks those labels end to end); called
// directly, both labels are empty.
func withRoute(msg *message.Message) *message.Message { return msg }

func TestChainCountsHandledFailedRetried(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := middleware.NewMetrics(reg)
	chain := middleware.Chain(middleware.Deps{Logger: slog.New(slog.DiscardHandler), Metrics: m})
	wrap := func(h message.HandlerFunc) message.HandlerFunc {
		for i := len(chain) - 1; i >= 0; i-- {
			h = chain[i](h)
		}
		return h
	}

	ok := wrap(func(*message.Message) ([]*message.Message, error) { return nil, nil })
	_, err := ok(withRoute(message.NewMessage("1", nil)))
	require.NoError(t, err)

	calls := 0
	flaky := wrap(func(*message.Message) ([]*message.Message, error) {
		calls++
		if calls < 2 {
			return nil, errors.New("transient")
		}
		return nil, nil
	})
	_, err = flaky(withRoute(message.NewMessage("2", nil)))
	require.NoError(t, err)

	failing := wrap(func(*message.Message) ([]*message.Message, error) { return nil, errors.New("always") })
	_, err = failing(withRoute(message.NewMessage("3", nil)))
	require.Error(t, err)

	panicking := wrap(func(*message.Message) ([]*message.Message, error) { panic("boom") })
	_, err = panicking(withRoute(message.NewMessage("4", nil)))
	require.Error(t, err, "a panic must become an error")

	labels := prometheus.Labels{"queue": "", "handler": ""}
	assert.Equal(t, 2.0, testutil.ToFloat64(m.Handled.With(labels)))
	assert.Equal(t, 2.0, testutil.ToFloat64(m.Failed.With(labels)))
	// flaky: 1 retry; failing and panicking: 2 retries each.
	assert.Equal(t, 5.0, testutil.ToFloat64(m.Retried.With(labels)))
}

func TestChainDoesNotRetryShutdown(t *testing.T) {
	t.Parallel()
	m := middleware.NewMetrics(prometheus.NewRegistry())
	chain := middleware.Chain(middleware.Deps{Logger: slog.New(slog.DiscardHandler), Metrics: m})
	calls := 0
	var h message.HandlerFunc = func(*message.Message) ([]*message.Message, error) {
		calls++
		return nil, context.Canceled
	}
	for i := len(chain) - 1; i >= 0; i-- {
		h = chain[i](h)
	}
	_, err := h(withRoute(message.NewMessage("1", nil)))
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 1, calls)
}

func TestRetryOnlyRetriesTransientFailures(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		err       error
		wantCalls int
	}{
		"unclassified is transient": {errors.New("db reset"), 3},
		"transient":                 {failure.AsTransient(errors.New("429"), 0), 3},
		"permanent":                 {failure.Permanentf("schema: %w", errors.New("missing id")), 1},
		"duplicate":                 {failure.AsDuplicate(errors.New("seen")), 1},
	} {
		calls := 0
		r := middleware.Retry{MaxRetries: 2, InitialInterval: time.Millisecond, MaxInterval: time.Millisecond, Multiplier: 1}
		_, err := r.Middleware(func(*message.Message) ([]*message.Message, error) {
			calls++
			return nil, c.err
		})(message.NewMessage("1", nil))
		assert.ErrorIs(t, err, c.err, name)
		assert.Equal(t, c.wantCalls, calls, name)
	}
}

func TestRetryHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	var waits []time.Duration
	r := middleware.Retry{
		MaxRetries: 1, InitialInterval: time.Millisecond, MaxInterval: time.Millisecond, Multiplier: 1,
		OnRetry: func(_ *message.Message, _ int, wait time.Duration, _ error) { waits = append(waits, wait) },
	}
	_, _ = r.Middleware(func(*message.Message) ([]*message.Message, error) {
		return nil, failure.AsTransient(errors.New("429"), 50*time.Millisecond)
	})(message.NewMessage("1", nil))
	assert.Equal(t, []time.Duration{50 * time.Millisecond}, waits)
}

func TestDuplicateIsAcknowledgedWithoutRetry(t *testing.T) {
	t.Parallel()
	m := middleware.NewMetrics(prometheus.NewRegistry())
	chain := middleware.Chain(middleware.Deps{Logger: slog.New(slog.DiscardHandler), Metrics: m})
	calls := 0
	var h message.HandlerFunc = func(*message.Message) ([]*message.Message, error) {
		calls++
		return nil, failure.AsDuplicate(errors.New("processed_messages row exists"))
	}
	for i := len(chain) - 1; i >= 0; i-- {
		h = chain[i](h)
	}
	_, err := h(message.NewMessage("1", nil))
	require.NoError(t, err, "a duplicate is acked")
	assert.Equal(t, 1, calls)
	labels := prometheus.Labels{"queue": "", "handler": ""}
	assert.Equal(t, 1.0, testutil.ToFloat64(m.Duplicates.With(labels)))
	assert.Equal(t, 0.0, testutil.ToFloat64(m.Failed.With(labels)))
}
