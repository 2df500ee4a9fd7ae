package middleware

import (
	"context"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill/message"
	wmw "github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/eventpipe/eventpipe/app/route"
)

// Deps is what the chain needs from the composition root.
type Deps struct {
	Logger  *slog.Logger
	Metrics *Metrics
	// Publisher publishes dead letters.
	Publisher message.Publisher
	// NackDelay says the broker delays nacked messages natively
	// (broker.NackDelayer).
	NackDelay bool
	// Tracer records spans (telemetry.Setup); nil or no-op records nothing.
	Tracer trace.TracerProvider
	// MessagingSystem is the broker kind (config.Kind*), on every consumer
	// span as messaging.system (MessagingSystem); none when empty.
	MessagingSystem string
	// Inbox, when set, is asked whether a message delivered MaxAttempts
	// times without an outcome was processed after all (Policy.Seen), for
	// routes that name their InboxConsumer and MessageID.
	Inbox Seer
	// Drain, when set, ends in-flight handlers' contexts instead of their
	// subscriptions (Drain): the root cancels it when the shutdown timeout
	// is over.
	Drain context.Context
	// Running, when set with Drain, counts the handlers running, for the
	// shutdown to wait for the ones it cancelled.
	Running *Running
}

// Seer tells whether a message's effect has committed (inbox.Store).
type Seer interface {
	Seen(ctx context.Context, consumer, messageID string) (bool, error)
}

// Chain returns the middleware of one route, in the one order they run,
// outermost first. They are a route's own (router handler middleware), not
// the router's, because the policy differs per route and must sit outside
// panic recovery.
//
//  0. Drain (when Deps.Drain is set): the handler's context outlives the
//     subscription, until the shutdown timeout is over.
//  1. Correlation: every message has a trace id (x-trace-id, else the one
//     its wire format carries, else its traceparent's, else a new one), in its
//     context and on what it produces.
//  2. Tracing: one consumer span per delivery, continuing the publisher's
//     trace (traceparent) or the x-trace-id's; dead letters and anything
//     published while handling are its children.
//  3. Observe: one log line and the metrics per message, after all attempts;
//     a duplicate (failure.Duplicate) is acknowledged here without effect.
//  4. Policy: the route's failure policy — retries with backoff (in process
//     or by the broker), drop or dead-letter with the reason; a handler cut
//     short by shutdown is nacked, never retried or dead-lettered.
//  5. UTF8 (unless the route is Binary): a body that is not valid UTF-8 is
//     a permanent failure, before any decoder replaces its bytes.
//  6. Timeout: each attempt ends after the route's timeout, a transient
//     failure.
//  7. Recoverer: a panicking handler becomes an error, never a crash.
//
// The route's policy must be valid (route.Policy.Validate).
func Chain(d Deps, r route.Route) []message.HandlerMiddleware {
	policy := Policy{
		Route:     r.EffectivePolicy(),
		Publisher: d.Publisher,
		NackDelay: d.NackDelay,
		Logger:    d.Logger,
		Metrics:   d.Metrics,
	}
	if d.Inbox != nil && r.InboxConsumer != "" && r.MessageID != nil {
		policy.Seen = func(ctx context.Context, payload []byte) (bool, error) {
			id := r.MessageID(payload)
			if id == "" {
				return false, nil
			}
			return d.Inbox.Seen(ctx, r.InboxConsumer, id)
		}
	}
	if d.Metrics != nil {
		policy.retried = d.Metrics.Retried.WithLabelValues(r.Queue, r.Name)
	}
	var chain []message.HandlerMiddleware
	if d.Drain != nil {
		chain = append(chain, Drain(d.Drain, d.Running))
	}
	chain = append(chain, CorrelationFrom(r.TraceID), Tracing(d.Tracer, d.tracingAttrs()...), observeRoute(d.Logger, d.Metrics, r.Queue, r.Name), policy.Middleware)
	if !r.Binary {
		// Inside the policy: a bad body fails as the route says (drop,
		// dead-letter, fail until max).
		chain = append(chain, UTF8)
	}
	return append(chain, Timeout(r.EffectiveTimeout()), wmw.Recoverer)
}

func (d Deps) tracingAttrs() []attribute.KeyValue {
	if d.MessagingSystem == "" {
		return nil
	}
	return []attribute.KeyValue{MessagingSystem(d.MessagingSystem)}
}
