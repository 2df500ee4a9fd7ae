package middleware

import (
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	wmw "github.com/ThreeDotsLabs/watermill/message/router/middleware"
)

// Deps is what the chain needs from the composition root.
type Deps struct {
	Logger  *slog.Logger
	Metrics *Metrics
}

// Chain returns eventpipe's router middleware in the one order they run,
// outermost first:
//
//  1. Correlation: every message has a trace id, in its context and on what it produces.
//  2. Observe: one log line and the metrics per message, after all retries;
//     a duplicate (failure.Duplicate) is acknowledged here without effect.
//  3. Retry: in-process retries of transient failures with exponential
//     backoff and jitter (and a transient error's retry-after); permanent and
//     duplicate failures, and a handler cut short by shutdown, are not
//     retried (the message is nacked and redelivered, or acked if duplicate).
//  4. Recoverer: a panicking handler becomes an error, never a crash.
func Chain(d Deps) []message.HandlerMiddleware {
	retry := Retry{
		MaxRetries:          2,
		InitialInterval:     100 * time.Millisecond,
		MaxInterval:         2 * time.Second,
		Multiplier:          2,
		RandomizationFactor: 0.5,
		OnRetry: func(msg *message.Message, retry int, wait time.Duration, err error) {
			d.Metrics.Retried.With(labelsOf(msg)).Inc()
			d.Logger.LogAttrs(msg.Context(), slog.LevelWarn, "handler failed, retrying",
				slog.String("message_id", msg.UUID),
				slog.String("trace_id", TraceID(msg.Context())),
				slog.String("queue", message.SubscribeTopicFromCtx(msg.Context())),
				slog.Int("retry", retry),
				slog.Duration("wait", wait),
				slog.Any("error", err))
		},
	}
	return []message.HandlerMiddleware{
		Correlation,
		Observe(d.Logger, d.Metrics),
		retry.Middleware,
		wmw.Recoverer,
	}
}
