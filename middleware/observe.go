package middleware

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/msgctx"
)

// Metrics are the per-queue message counters and the handler latency that
// /metrics exposes. One instance per service, registered once.
type Metrics struct {
	Handled      *prometheus.CounterVec
	Failed       *prometheus.CounterVec
	Retried      *prometheus.CounterVec
	DeadLettered *prometheus.CounterVec
	Dropped      *prometheus.CounterVec
	Duplicates   *prometheus.CounterVec
	Duration     *prometheus.HistogramVec
}

// NewMetrics creates the collectors and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	labels := []string{"queue", "handler"}
	m := &Metrics{
		Handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "eventpipe", Name: "messages_handled_total",
			Help: "Messages whose handler succeeded (acked).",
		}, labels),
		Failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "eventpipe", Name: "messages_failed_total",
			Help: "Messages whose handler failed after its in-process retries (nacked).",
		}, labels),
		Retried: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "eventpipe", Name: "messages_retried_total",
			Help: "In-process retries of a failed handler.",
		}, labels),
		DeadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "eventpipe", Name: "messages_dead_lettered_total",
			Help: "Messages moved to a dead-letter queue by eventpipe.",
		}, labels),
		Dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "eventpipe", Name: "messages_dropped_total",
			Help: "Messages acknowledged without effect by their route's policy: a permanent failure on a drop route, or attempts exhausted on a route without a dead-letter queue.",
		}, labels),
		Duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "eventpipe", Name: "messages_duplicate_total",
			Help: "Deliveries whose effect had already happened (acked without effect).",
		}, labels),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "eventpipe", Name: "handler_duration_seconds",
			Help:    "Time spent in a handler, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, labels),
	}
	reg.MustRegister(m.Handled, m.Failed, m.Retried, m.DeadLettered, m.Dropped, m.Duplicates, m.Duration)
	return m
}

// routeMetrics are the collectors of one queue and handler, looked up in
// the vectors once instead of per message (a labels map and a hash each).
// Nothing deletes label values from Metrics, so they stay the vectors' own.
type routeMetrics struct {
	queue, handler                                     string
	handled, failed, deadLettered, dropped, duplicates prometheus.Counter
	duration                                           prometheus.Observer
}

func (m *Metrics) route(queue, handler string) *routeMetrics {
	return &routeMetrics{
		queue: queue, handler: handler,
		handled:      m.Handled.WithLabelValues(queue, handler),
		failed:       m.Failed.WithLabelValues(queue, handler),
		deadLettered: m.DeadLettered.WithLabelValues(queue, handler),
		dropped:      m.Dropped.WithLabelValues(queue, handler),
		duplicates:   m.Duplicates.WithLabelValues(queue, handler),
		duration:     m.Duration.WithLabelValues(queue, handler),
	}
}

// routeCache keeps the routeMetrics of the last message's queue and handler:
// a route's Observe sees one pair only, so it looks them up once.
type routeCache struct{ last atomic.Pointer[routeMetrics] }

func (c *routeCache) get(m *Metrics, msg *message.Message) *routeMetrics {
	queue, handler := message.SubscribeTopicFromCtx(msg.Context()), message.HandlerNameFromCtx(msg.Context())
	if rm := c.last.Load(); rm != nil && rm.queue == queue && rm.handler == handler {
		return rm
	}
	rm := m.route(queue, handler)
	c.last.Store(rm)
	return rm
}

func labelsOf(msg *message.Message) prometheus.Labels {
	return prometheus.Labels{
		"queue":   message.SubscribeTopicFromCtx(msg.Context()),
		"handler": message.HandlerNameFromCtx(msg.Context()),
	}
}

// Observe logs the outcome of every message (with its message id, trace id,
// queue and handler) and records it in m. A duplicate (failure.Duplicate) is
// acknowledged here: its effect already happened.
func Observe(logger *slog.Logger, m *Metrics) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		var metrics routeCache
		return observe(logger, h, func(msg *message.Message) *routeMetrics { return metrics.get(m, msg) })
	}
}

// observeRoute is Observe for a route whose queue and handler name are known
// when the chain is built (Chain): its counters are looked up once, not
// matched against the message's router context every time.
func observeRoute(logger *slog.Logger, m *Metrics, queue, handler string) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		rm := m.route(queue, handler)
		return observe(logger, h, func(*message.Message) *routeMetrics { return rm })
	}
}

func observe(logger *slog.Logger, h message.HandlerFunc, metricsOf func(*message.Message) *routeMetrics) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		start := time.Now()
		// The outcome and the context that carries it are one allocation.
		oc := &outcomeCtx{Context: msg.Context()}
		msg.SetContext(oc)
		produced, err := h(msg)
		// Everything else is in settle, whose frame is not on the stack
		// while the handler runs: the router starts each message on a
		// new goroutine's small stack, which a deep chain must copy.
		return settle(logger, metricsOf(msg), msg, time.Since(start), &oc.outcome, produced, err)
	}
}

// settle records and logs the outcome of one message (Observe). The log
// line's attributes are built only when the logger takes its level: a
// handled message logs at debug, which production runs without.
func settle(logger *slog.Logger, m *routeMetrics, msg *message.Message, elapsed time.Duration, oc *outcome, produced []*message.Message, err error) ([]*message.Message, error) {
	m.duration.Observe(elapsed.Seconds())
	ctx := msg.Context()
	if err != nil && failure.Of(err) == failure.Duplicate {
		// The effect already happened: acknowledge, change nothing.
		m.duplicates.Inc()
		logOutcome(ctx, logger, slog.LevelInfo, "duplicate delivery, acknowledged without effect", m, msg, elapsed, slog.Any("reason", err))
		return nil, nil
	}
	if err != nil {
		m.failed.Inc()
		logOutcome(ctx, logger, levelFor(err), "message failed", m, msg, elapsed,
			slog.String("error_class", failure.Of(err).String()), slog.Any("error", err))
		return produced, err
	}
	switch oc.kind {
	case outcomeDeadLettered:
		m.deadLettered.Inc()
		logOutcome(ctx, logger, slog.LevelWarn, "message dead-lettered", m, msg, elapsed, slog.Any("reason", oc.cause))
	case outcomeDropped:
		m.dropped.Inc()
		logOutcome(ctx, logger, slog.LevelWarn, "message dropped: permanent failure on a route that drops them", m, msg, elapsed, slog.Any("reason", oc.cause))
	case outcomeDroppedNoDLQ:
		m.dropped.Inc()
		logOutcome(ctx, logger, slog.LevelError, "message dropped: attempts exhausted and the route has no dead-letter queue", m, msg, elapsed, slog.Any("reason", oc.cause))
	default:
		m.handled.Inc()
		logOutcome(ctx, logger, slog.LevelDebug, "message handled", m, msg, elapsed)
	}
	return produced, nil
}

// logOutcome writes Observe's line about msg, if logger takes level: the
// attributes every line about a message carries, then extra.
func logOutcome(ctx context.Context, logger *slog.Logger, level slog.Level, text string, m *routeMetrics, msg *message.Message, elapsed time.Duration, extra ...slog.Attr) {
	if !logger.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 5+len(extra))
	attrs = append(attrs,
		slog.String("message_id", msg.UUID),
		slog.String("trace_id", msgctx.TraceID(ctx)),
		slog.String("queue", m.queue),
		slog.String("handler", m.handler),
		slog.Duration("took", elapsed))
	logger.LogAttrs(ctx, level, text, append(attrs, extra...)...)
}

// levelFor keeps shutdown quiet: a handler cut short by cancellation is not an
// operator's problem, the message is simply redelivered.
func levelFor(err error) slog.Level {
	if errors.Is(err, context.Canceled) {
		return slog.LevelInfo
	}
	return slog.LevelError
}

// outcome is how Policy tells Observe that an acknowledged message was not
// handled but dropped or dead-lettered.
type outcome struct {
	kind  outcomeKind
	cause error
}

type outcomeKind int

const (
	outcomeHandled outcomeKind = iota
	outcomeDropped
	outcomeDroppedNoDLQ
	outcomeDeadLettered
)

type outcomeKey struct{}

// outcomeCtx is a message's context carrying its outcome (outcomeKey): a
// context.WithValue of a *outcome would be two allocations per message.
// Everything else is the embedded context's, so contexts derived from it
// (Timeout's) still hang on the delivery's cancelable context directly.
type outcomeCtx struct {
	context.Context
	outcome
}

func (c *outcomeCtx) Value(key any) any {
	if _, ok := key.(outcomeKey); ok {
		return &c.outcome
	}
	return c.Context.Value(key)
}

func (c *outcomeCtx) String() string { return contextName(c.Context) + ".WithValue(outcome)" }

func setOutcome(ctx context.Context, kind outcomeKind, cause error) {
	if oc, ok := ctx.Value(outcomeKey{}).(*outcome); ok {
		oc.kind, oc.cause = kind, cause
	}
}
