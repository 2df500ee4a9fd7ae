package middleware

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/eventpipe/eventpipe/app/failure"
)

// Metrics are the per-queue message counters and the handler latency that
// /metrics exposes. One instance per service, registered once.
type Metrics struct {
	Handled      *prometheus.CounterVec
	Failed       *prometheus.CounterVec
	Retried      *prometheus.CounterVec
	DeadLettered *prometheus.CounterVec
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
	reg.MustRegister(m.Handled, m.Failed, m.Retried, m.DeadLettered, m.Duplicates, m.Duration)
	return m
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
		return func(msg *message.Message) ([]*message.Message, error) {
			start := time.Now()
			produced, err := h(msg)
			elapsed := time.Since(start)

			labels := labelsOf(msg)
			m.Duration.With(labels).Observe(elapsed.Seconds())
			attrs := []slog.Attr{
				slog.String("message_id", msg.UUID),
				slog.String("trace_id", TraceID(msg.Context())),
				slog.String("queue", labels["queue"]),
				slog.String("handler", labels["handler"]),
				slog.Duration("took", elapsed),
			}
			if err != nil && failure.Of(err) == failure.Duplicate {
				// The effect already happened: acknowledge, change nothing.
				m.Duplicates.With(labels).Inc()
				logger.LogAttrs(msg.Context(), slog.LevelInfo, "duplicate delivery, acknowledged without effect", append(attrs, slog.Any("reason", err))...)
				return nil, nil
			}
			if err != nil {
				m.Failed.With(labels).Inc()
				attrs = append(attrs, slog.String("error_class", failure.Of(err).String()))
				logger.LogAttrs(msg.Context(), levelFor(err), "message failed", append(attrs, slog.Any("error", err))...)
				return produced, err
			}
			m.Handled.With(labels).Inc()
			logger.LogAttrs(msg.Context(), slog.LevelDebug, "message handled", attrs...)
			return produced, nil
		}
	}
}

// levelFor keeps shutdown quiet: a handler cut short by cancellation is not an
// operator's problem, the message is simply redelivered.
func levelFor(err error) slog.Level {
	if errors.Is(err, context.Canceled) {
		return slog.LevelInfo
	}
	return slog.LevelError
}
