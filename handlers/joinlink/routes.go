package joinlink

import (
	"errors"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/jsonfields"
	"github.com/eventpipe/eventpipe/app/msgctx"
	"github.com/eventpipe/eventpipe/app/route"
)

// Handlers is the processor (JoinLinkGenerationProcessor) and what it needs.
type Handlers struct {
	// Service is the generation entry point the processor delegates to.
	Service *Service
	Logger  *slog.Logger
	// Backoff overrides the route's backoff (tests shorten it);
	// DefaultBackoff when zero.
	Backoff route.Backoff
	// Now is the clock for MaxEventAge; time.Now when nil.
	Now func() time.Time
}

// DefaultBackoff is join-link-generation's wait between attempts. The spec
// gives none (SQS's own retry is the visibility timeout, unset in the
// topology); generation errors are bulkRegister's (Zoom rate limits, the
// online-session service), so the retries spread over minutes: 30 s, 1 min,
// 2 min, 4 min — the fifth and last attempt about 7.5 min after the first,
// well inside MaxEventAge, and the sweep catches what is left.
func DefaultBackoff() route.Backoff {
	return route.Backoff{Initial: 30 * time.Second, Multiplier: 2, Max: 5 * time.Minute, Jitter: 0.2}
}

// Policy is join-link-generation's failure policy (§Idempotency and Failure
// Contracts): broker redelivery (SQS retry), MAX_RETRY_ATTEMPTS = 5 attempts
// in all, non-retryable (validation) failures dropped — acknowledged with a
// log line and eventpipe_messages_dropped_total — and no dead-letter queue
// (dec-07): an event that exhausts its attempts is acknowledged the same way
// and left to the fallback sweep.
func (h Handlers) Policy() route.Policy {
	b := h.Backoff
	if b == (route.Backoff{}) {
		b = DefaultBackoff()
	}
	return route.Policy{MaxAttempts: MaxRetryAttempts, Redelivery: route.Broker, Backoff: b, OnPermanent: route.Drop}
}

// Routes returns the processor's route on Queue. Running it needs Service.
func (h Handlers) Routes() route.Set {
	return route.Set{{
		Name:     "join-link-generation-processor",
		Queue:    Queue,
		Validate: Validate,
		Handle:   h.handle,
		Policy:   h.Policy(),
		// The spec names none: a claim, a bulkRegister call and a status
		// write, well under a minute.
		Timeout: time.Minute,
	}}
}

// Catalog is the spec's route for `eventpipe publish` validation only: its
// handler must not be run.
func Catalog() route.Set { return Handlers{}.Routes() }

// handle is the processor: validate, apply the retry budget, delegate to the
// single entry point and classify.
//
//   - A body that does not decode (invalid type, missing programSessionId)
//     is non-retryable: failure.Permanent, dropped by the policy.
//   - Past MaxRetryAttempts receives, or older than MaxEventAge (by its
//     timestamp), the event is acknowledged with a log line and left to the
//     fallback sweep (eventpipe's rule: there is no DLQ to send it to).
//   - A lost claim is a no-op (ack). A missing session is non-retryable.
//     A generation error keeps its class: unmarked = retryable (the
//     session is FAILED meanwhile), failure.Permanent = non-retryable
//     (FAILED, acked; the sweep retries it every 4 h).
func (h Handlers) handle(msg *message.Message) error {
	ctx := msg.Context()
	log := msgctx.Logger(ctx, h.Logger, msg)
	m, err := Decode(msg.Payload)
	if err != nil {
		log.WarnContext(ctx, "join-link event rejected (non-retryable)", slog.Any("error", err))
		return failure.AsPermanent(err)
	}
	log = log.With(slog.Int64("program_session_id", m.Data.ProgramSessionID), slog.String("correlation_id", jsonfields.Truncate(m.CorrelationID, 128)))
	attempt := msgctx.Attempt(ctx)
	if attempt > MaxRetryAttempts {
		log.WarnContext(ctx, "join-link event past its retry budget; acknowledged, left to the fallback sweep",
			slog.Int("attempt", attempt), slog.Int("max_attempts", MaxRetryAttempts))
		return nil
	}
	now := time.Now()
	if h.Now != nil {
		now = h.Now()
	}
	if !m.Timestamp.IsZero() && now.Sub(m.Timestamp) > MaxEventAge {
		log.WarnContext(ctx, "join-link event older than its max age; acknowledged, left to the fallback sweep",
			slog.Time("timestamp", m.Timestamp), slog.Duration("max_age", MaxEventAge))
		return nil
	}
	if _, err := h.Service.GenerateForSession(ctx, m.Data); err != nil {
		if errors.Is(err, ErrNotFound) {
			return failure.AsPermanent(err)
		}
		return err
	}
	return nil
}
