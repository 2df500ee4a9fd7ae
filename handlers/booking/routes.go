package booking

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/jsonfields"
	"github.com/eventpipe/eventpipe/app/msgctx"
	"github.com/eventpipe/eventpipe/app/route"
)

// Consumer is the processor's name in the inbox (processed_messages'
// consumer column).
const Consumer = "booking-session-processor"

// MaxAttempts: the spec is silent ("DLQ posture" gives no count);
// eventpipe's rule is max receives 5 before the DLQ
// (config/topology/booking.yaml max_receives 5).
const MaxAttempts = 5

// Handlers is the booking-session processor and its dependencies.
type Handlers struct {
	// Store holds the effects (NewPostgres, or NewMemory in the embedded
	// mode).
	Store Store
	// Inbox is the per-event-id dedupe (inbox.NewPostgres on Store's
	// database, inbox.NewMemory with the memory store).
	Inbox  inbox.Store
	Logger *slog.Logger
	// Backoff overrides the route's backoff (tests shorten it);
	// DefaultBackoff when zero.
	Backoff route.Backoff
}

func (h Handlers) logger() *slog.Logger {
	if h.Logger != nil {
		return h.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// DefaultBackoff is the wait between attempts; the spec gives none. A failing
// message holds back the later events of its session (one SQS message
// group), so retries come soon: 2 s, 4 s, 8 s, 16 s (capped at 30 s, SQS's
// default visibility timeout) — the DLQ about half a minute after the first
// failure.
func DefaultBackoff() route.Backoff {
	return route.Backoff{Initial: 2 * time.Second, Multiplier: 2, Max: 30 * time.Second, Jitter: 0.2}
}

// Policy is the route's failure policy: five attempts, permanent errors
// failing until then (the spec's only path to the DLQ is "fails to handle
// after retries", which SQS's redrive policy also takes), then
// booking-session-events-dlq.fifo.
//
// The attempts run in process, holding the delivery: FIFO means per-session
// order, and a nacked message goes behind the later ones on RabbitMQ and on
// the Postgres broker (seen: the 3rd of 12 events failing once was applied
// last). SQS holds the rest of the group while the message is in flight
// anyway. The cost, on brokers whose consumer takes one delivery at a time
// (RabbitMQ, Postgres): other sessions on the queue wait out the retries too,
// up to about half a minute per failing event.
func (h Handlers) Policy() route.Policy {
	b := h.Backoff
	if b == (route.Backoff{}) {
		b = DefaultBackoff()
	}
	return route.Policy{
		MaxAttempts: MaxAttempts, Redelivery: route.InProcess, Backoff: b,
		OnPermanent: route.FailUntilMax, DeadLetterQueue: DLQ,
	}
}

// Routes returns the processor's route on booking-session-events.fifo.
// Running it needs Store and Inbox.
func (h Handlers) Routes() route.Set {
	return route.Set{{
		Name:     Consumer,
		Queue:    Queue,
		Validate: Validate,
		Handle:   h.handle,
		Policy:   h.Policy(),
		// The spec names none: one insert, well under SQS's default 30 s
		// visibility, which holds the session's FIFO group meanwhile.
		Timeout:       20 * time.Second,
		MessageID:     messageIDOf,
		InboxConsumer: Consumer,
	}}
}

// Catalog is the spec's route for `eventpipe publish` validation only: its
// handler must not be run.
func Catalog() route.Set { return Handlers{}.Routes() }

// handle is the processor: decode, then the effect inside the inbox, once
// per body eventId — forwarded unchanged, never synthesised.
func (h Handlers) handle(msg *message.Message) error {
	ctx := msg.Context()
	// msgctx.Logger's attributes, but with the id cut: the transport's
	// message id is whatever the publisher sent, of any length.
	log := h.logger().With(slog.String("message_id", jsonfields.Truncate(msg.UUID, MaxIDLength)),
		slog.String("queue", message.SubscribeTopicFromCtx(ctx)), slog.String("trace_id", msgctx.TraceID(ctx)))
	ev, err := Decode(msg.Payload)
	if err != nil {
		log.ErrorContext(ctx, "booking-session event rejected", slog.Any("error", err))
		return failure.AsPermanent(err)
	}
	log = log.With(slog.String("event_id", ev.EventID), slog.String("booking_session_id", ev.BookingSessionID),
		slog.String("type", ev.Type))
	if ev.EventID != "" && ev.EventID != msg.UUID {
		// The body is the contract (§"Consumer-side idempotency"). A
		// publisher other than eventpipe never sets the transport's id to
		// the eventId (SQS assigns its own MessageId), so this is the normal
		// case for the spec's producers: debug, not a warning.
		log.DebugContext(ctx, "message id differs from the body's eventId; deduplicating on the body's")
	}
	// ev.EventID goes to the inbox as the body has it, "" included: the
	// inbox refuses an empty id (permanent), so a missing id surfaces as a
	// failure instead of being papered over with DeriveEventID(ev).
	err = h.Inbox.Process(ctx, Consumer, ev.EventID, func(ctx context.Context) error {
		return h.Store.Apply(ctx, ev)
	})
	switch {
	case err == nil:
		log.InfoContext(ctx, "booking-session event applied")
	case failure.Of(err) == failure.Duplicate:
		log.InfoContext(ctx, "duplicate booking-session event, acknowledged without effect")
	case ev.EventID == "":
		log.ErrorContext(ctx, "booking-session event without eventId: not synthesised", slog.Any("error", err))
		return failure.AsPermanent(fmt.Errorf("eventId missing from the body (the producer's contract; the consumer never synthesises one): %w", err))
	}
	return err
}
