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
		return func(msg *message.Message) ([]*message.Message, error) {
			start := time.Now()
			oc := &outcome{}
			msg.SetContext(context.WithValue(msg.Context(), outcomeKey{}, oc))
			produced, err := h(msg)
			// Everything else is in settle, whose frame is not on the stack
			// while the handler runs: the router starts each message on a
			// new goroutine's small stack, which a deep chain must copy.
			return settle(logger, metrics.get(m, msg), msg, time.Since(start), oc, produced, err)
		}
	}
}

// settle records and logs the outcome of one message (Observe).
func settle(logger *slog.Logger, m *routeMetrics, msg *message.Message, elapsed time.Duration, oc *outcome, produced []*message.Message, err error) ([]*message.Message, error) {
	m.duration.Observe(elapsed.Seconds())
	attrs := []slog.Attr{
		slog.String("message_id", msg.UUID),
		slog.String("trace_id", msgctx.TraceID(msg.Context())),
		slog.String("queue", m.queue),
		slog.String("handler", m.handler),
		slog.Duration("took", elapsed),
	}
	if err != nil && failure.Of(err) == failure.Duplicate {
		// The effect already happened: acknowledge, change nothing.
		m.duplicates.Inc()
		logger.LogAttrs(msg.Context(), slog.LevelInfo, "duplicate delivery, acknowledged without effect", append(attrs, slog.Any("reason", err))...)
		return nil, nil
	}
	if err != nil {
		m.failed.Inc()
		attrs = append(attrs, slog.String("error_class", failure.Of(err).String()))
		logger.LogAttrs(msg.Context(), levelFor(err), "message failed", append(attrs, slog.Any("error", err))...)
		return produced, err
	}
	switch oc.kind {
	case outcomeDeadLettered:
		m.deadLettered.Inc()
		logger.LogAttrs(msg.Context(), slog.LevelWarn, "message dead-lettered", append(attrs, slog.Any("reason", oc.cause))...)
	case outcomeDropped:
		m.dropped.Inc()
		logger.LogAttrs(msg.Context(), slog.LevelWarn, "message dropped: permanent failure on a route that drops them", append(attrs, slog.Any("reason", oc.cause))...)
	case outcomeDroppedNoDLQ:
		m.dropped.Inc()
		logger.LogAttrs(msg.Context(), slog.LevelError, "message dropped: attempts exhausted and the route has no dead-letter queue", append(attrs, slog.Any("reason", oc.cause))...)
	default:
		m.handled.Inc()
		logger.LogAttrs(msg.Context(), slog.LevelDebug, "message handled", attrs...)
	}
	return produced, nil
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

func setOutcome(ctx context.Context, kind outcomeKind, cause error) {
	if oc, ok := ctx.Value(outcomeKey{}).(*outcome); ok {
		oc.kind, oc.cause = kind, cause
	}
}
