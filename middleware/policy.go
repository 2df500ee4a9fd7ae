package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/msgctx"
	"github.com/eventpipe/eventpipe/app/route"
)

// MaxReasonBytes bounds the reason a dead letter carries: enough for an
// error chain, small against SQS's attribute budget.
const MaxReasonBytes = 1024

// Policy applies a route's failure policy (route.Policy) to every message:
// it retries, redelivers, drops or dead-letters, the same way on every broker.
//
//   - Success: the message is acked.
//   - Duplicate (failure.Duplicate): returned unchanged for Observe to ack.
//   - Cancelled (shutdown): returned at once, so the message is nacked and
//     redelivered; shutdown never dead-letters.
//   - Permanent: dropped, dead-lettered at once, or treated as transient
//     (route.OnPermanent).
//   - Transient, and unclassified: attempted again after the backoff (in
//     process, or nacked for the broker to redeliver) until MaxAttempts, then
//     dead-lettered with its reason.
//
// A message delivered with MaxAttempts earlier attempts already (its
// consumers crashed or timed out each time — a poison message) is
// dead-lettered without running the handler again, unless Seen says its
// effect committed (acknowledged as a duplicate then), and so is one whose body
// exceeds broker.MaxPayloadBytes (from a foreign publisher: ours refuse them).
type Policy struct {
	Route route.Policy
	// Publisher publishes dead letters to Route.DeadLetterQueue.
	Publisher message.Publisher
	// NackDelay says the broker delays a nacked message by its
	// metadata.NackDelayKey (broker.NackDelayer). Otherwise the backoff before
	// a broker redelivery is waited here, before the nack.
	NackDelay bool
	Logger    *slog.Logger
	Metrics   *Metrics // optional
	// Seen, when set, reports whether the effect of the message with this
	// body has committed (the route's inbox marker). A message delivered
	// MaxAttempts times without an outcome is acknowledged as a duplicate
	// when it has, not dead-lettered: its last attempt did the work and its
	// consumer died before settling it.
	Seen func(ctx context.Context, payload []byte) (bool, error)

	// retried is Metrics.Retried of the route's queue and handler, when
	// Chain knows them; otherwise they are read from each message's context.
	retried prometheus.Counter
}

// Middleware returns h wrapped with the policy.
func (p Policy) Middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		// Each attempt starts from the original context: an earlier attempt
		// may have cancelled a context derived from it.
		ctx := msg.Context()
		earlier := earlierAttempts(msg)
		firstFailure := parseTime(msg.Metadata.Get(metadata.FirstFailureKey))

		if n := len(msg.Payload); n > broker.MaxPayloadBytes {
			// A foreign publisher's message over the one size limit: no
			// handler is written for it, and retrying cannot shrink it.
			err := failure.Permanentf("payload of %d bytes exceeds the %d-byte limit", n, broker.MaxPayloadBytes)
			return nil, p.deadLetter(ctx, msg, earlier+1, failure.Permanent, err, firstFailure)
		}
		if earlier >= p.Route.MaxAttempts {
			if p.Seen != nil {
				seen, err := p.Seen(ctx, msg.Payload)
				if err != nil {
					// Not known: dead-lettering might shelve a message
					// that only waits for its answer. It comes back.
					return nil, fmt.Errorf("delivered %d times without an outcome; whether it was processed is not known: %w", earlier, err)
				}
				if seen {
					return nil, failure.AsDuplicate(fmt.Errorf("delivered %d times without an outcome, but its effect is committed: only its settlement was lost", earlier))
				}
			}
			err := fmt.Errorf("delivered %d times without an outcome (its consumer crashed or timed out each time)", earlier)
			return nil, p.deadLetter(ctx, msg, earlier, failure.Transient, err, firstFailure)
		}
		for try := 1; ; try++ {
			attempt := earlier + try
			msg.SetContext(msgctx.WithAttempt(ctx, attempt))
			produced, err := h(msg)
			msg.SetContext(ctx)
			if err == nil {
				return produced, nil
			}
			class := failure.Of(err)
			if class == failure.Duplicate {
				return produced, err
			}
			if errors.Is(err, context.Canceled) || ctx.Err() != nil {
				return nil, err
			}
			if firstFailure.IsZero() {
				firstFailure = time.Now().UTC()
			}
			if class == failure.Permanent {
				switch p.Route.OnPermanent {
				case route.Drop:
					setOutcome(ctx, outcomeDropped, err)
					return nil, nil
				case route.DeadLetter:
					return nil, p.deadLetter(ctx, msg, attempt, class, err, firstFailure)
				}
			}
			if attempt >= p.Route.MaxAttempts {
				return nil, p.deadLetter(ctx, msg, attempt, class, err, firstFailure)
			}

			wait := max(p.jittered(p.Route.Backoff.Wait(attempt)), failure.RetryAfter(err))
			if p.Route.Redelivery == route.Broker {
				msg.Metadata.Set(metadata.FirstFailureKey, firstFailure.Format(time.RFC3339Nano))
				if p.NackDelay {
					msg.Metadata.Set(metadata.NackDelayKey, wait.String())
					// Only an explicit backoff overrides the broker's own
					// timing (SQS's visibility timeout).
					if p.Route.ExplicitBackoff {
						msg.Metadata.Set(metadata.ExplicitNackDelayKey, "true")
					} else {
						delete(msg.Metadata, metadata.ExplicitNackDelayKey)
					}
				} else if !sleep(ctx, wait) {
					return nil, err
				}
				return nil, err
			}

			if p.retried != nil {
				p.retried.Inc()
			} else if p.Metrics != nil {
				p.Metrics.Retried.With(labelsOf(msg)).Inc()
			}
			p.Logger.LogAttrs(ctx, slog.LevelWarn, "handler failed, retrying",
				append(messageAttrs(msg),
					slog.Int("attempt", attempt),
					slog.Duration("wait", wait),
					slog.String("error_class", class.String()),
					slog.Any("error", err))...)
			if !sleep(ctx, wait) {
				return nil, err
			}
		}
	}
}

// deadLetter publishes a copy of msg, with the reason and history, to the
// dead-letter queue. The copy keeps the message id, so a consumer's inbox
// still recognises it after a redrive. If the publish fails, the error is
// returned and the message is nacked: it is never acked unless its dead
// letter is safe.
func (p Policy) deadLetter(ctx context.Context, msg *message.Message, attempts int, class failure.Class, cause error, firstFailure time.Time) error {
	if p.Route.DeadLetterQueue == "" {
		setOutcome(ctx, outcomeDroppedNoDLQ, cause)
		return nil
	}
	now := time.Now().UTC()
	if firstFailure.IsZero() {
		firstFailure = now
	}
	dl := message.NewMessage(msg.UUID, msg.Payload)
	for k, v := range msg.Metadata {
		switch k {
		case metadata.AttemptKey, metadata.NackDelayKey, metadata.ExplicitNackDelayKey, metadata.FirstFailureKey, metadata.DeadLetterKey, metadata.TracestateKey:
			// The DLQ's adapter counts its own attempts; the history is in
			// DeadLetterKey; tracestate would cost an SQS attribute.
		default:
			dl.Metadata.Set(k, v)
		}
	}
	metadata.SetDeadLetter(dl, metadata.DeadLetter{
		Reason:         truncateUTF8(cause.Error(), MaxReasonBytes),
		Class:          class.String(),
		Attempts:       attempts,
		FirstFailureAt: firstFailure,
		LastFailureAt:  now,
		SourceQueue:    message.SubscribeTopicFromCtx(ctx),
		DeadLetteredAt: now,
		TraceID:        msgctx.TraceID(ctx),
	})
	if id := msgctx.TraceID(ctx); id != "" {
		dl.Metadata.Set(metadata.TraceIDKey, id)
	}
	dl.SetContext(ctx)
	if err := p.Publisher.Publish(p.Route.DeadLetterQueue, dl); err != nil {
		// The cause stays text: the error to classify and retry is the publish's.
		return failure.AsTransient(fmt.Errorf("dead-letter to %s (because: %s): %w", p.Route.DeadLetterQueue, cause.Error(), err), 0)
	}
	setOutcome(ctx, outcomeDeadLettered, cause)
	return nil
}

func (p Policy) jittered(d time.Duration) time.Duration {
	j := p.Route.Backoff.Jitter
	if j == 0 || d == 0 {
		return d
	}
	return time.Duration(float64(d) * (1 + j*(2*rand.Float64()-1)))
}

// earlierAttempts reads x-attempt, which every adapter sets on delivery.
func earlierAttempts(msg *message.Message) int {
	n, err := strconv.Atoi(msg.Metadata.Get(metadata.AttemptKey))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// parseTime reads a time written by Policy; "" (a first delivery: no
// failure yet) is the zero time without time.Parse's error, which allocates.
func parseTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}

// sleep waits d, or less if ctx ends first; it reports whether it waited d.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func messageAttrs(msg *message.Message) []slog.Attr {
	ctx := msg.Context()
	return []slog.Attr{
		slog.String("message_id", msg.UUID),
		slog.String("trace_id", msgctx.TraceID(ctx)),
		slog.String("queue", message.SubscribeTopicFromCtx(ctx)),
		slog.String("handler", message.HandlerNameFromCtx(ctx)),
	}
}
