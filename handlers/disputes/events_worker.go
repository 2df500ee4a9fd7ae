package disputes

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/jsonfields"
	"github.com/eventpipe/eventpipe/app/msgctx"
)

// Consumer is the events-worker's name in the inbox (processed_messages'
// consumer column): the §1 processed_events dedupe is keyed by (Consumer,
// event_id).
const Consumer = "events-worker"

// handleDomainEvent is the events-worker: decode, then the event's effect
// inside the inbox (once per event_id).
func (h Handlers) handleDomainEvent(msg *message.Message) error {
	ctx := msg.Context()
	log := msgctx.Logger(ctx, h.Logger, msg)
	env, ev, err := DecodeEvent(msg.Payload)
	if err != nil {
		// §4: "Log with event_id, raise; reaches DLQ after maxReceiveCount".
		// The event id is the body's when it decoded that far, else the
		// attribute's copy.
		id := env.EventID
		if id == "" {
			id = msg.Metadata.Get(EventIDKey)
		}
		log.ErrorContext(ctx, "domain event rejected", slog.String("event_id", jsonfields.Truncate(id, MaxIDLength)),
			slog.String("event_type", jsonfields.Truncate(env.EventType, 64)), slog.Any("error", err))
		return failure.AsPermanent(err)
	}
	log = log.With(slog.String("event_id", env.EventID), slog.String("event_type", env.EventType))
	if attr := msg.Metadata.Get(EventIDKey); attr != "" && attr != env.EventID {
		// The body wins (eventpipe's rule): the attribute is only a copy.
		log.WarnContext(ctx, "event_id attribute differs from the body's; deduplicating on the body's",
			slog.String("attribute_event_id", jsonfields.Truncate(attr, MaxIDLength)))
	}
	err = h.Inbox.Process(ctx, Consumer, env.EventID, func(ctx context.Context) error {
		return h.apply(ctx, env, ev, log)
	})
	if failure.Of(err) == failure.Duplicate {
		log.InfoContext(ctx, "duplicate domain event, acknowledged without effect")
	}
	return err
}

func (h Handlers) apply(ctx context.Context, env Envelope, ev Event, log *slog.Logger) error {
	switch {
	case ev.DisputeRaised != nil:
		r := h.reminderFor(env, *ev.DisputeRaised)
		if err := h.Store.ScheduleReminder(ctx, r); err != nil {
			return err
		}
		log.InfoContext(ctx, "dispute TAT timer started", slog.String("dispute_id", r.DisputeID),
			slog.Time("tat_due_at", r.TATDueAt), slog.Time("remind_at", r.RemindAt), slog.Bool("auto_reverse", r.AutoReverse))
	case ev.TransactionFlagged != nil:
		f := ev.TransactionFlagged
		e := ReviewEntry{EventID: env.EventID, TxnID: f.TxnID, RiskScore: f.RiskScore, Reason: f.Reason, Queue: QueueReview, FlaggedAt: env.OccurredAt}
		if f.RiskScore >= h.amlThreshold() {
			e.Queue = QueueAML
		}
		if err := h.Store.EnqueueReview(ctx, e); err != nil {
			return err
		}
		log.InfoContext(ctx, "transaction queued for review", slog.String("txn_id", f.TxnID),
			slog.Float64("risk_score", f.RiskScore), slog.String("review_queue", e.Queue))
	case ev.DocumentIngested != nil:
		if err := h.Store.RefreshKBStats(ctx, env.EventID); err != nil {
			return err
		}
		log.InfoContext(ctx, "kb statistics refreshed", slog.String("document_id", env.AggregateID))
	default:
		return errors.New("events-worker: empty event") // unreachable: DecodeEvent sets one
	}
	return nil
}

// reminderFor computes a dispute's TAT timer from its event alone (§1: each
// event carries the full state its consumers need), so a redelivery computes
// the same one: the payload's tat_due_at, else occurred_at + DefaultTAT; the
// reminder ReminderLead before it, never before occurred_at.
func (h Handlers) reminderFor(env Envelope, d DisputeRaised) Reminder {
	due := env.OccurredAt.Add(h.defaultTAT())
	if d.TATDueAt != nil {
		due = *d.TATDueAt
	}
	remind := due.Add(-h.reminderLead())
	if remind.Before(env.OccurredAt) {
		remind = env.OccurredAt
	}
	return Reminder{
		DisputeID: env.AggregateID, EventID: env.EventID, TxnID: d.TxnID,
		TATDueAt: due.UTC(), RemindAt: remind.UTC(),
		AutoReverse: d.ReasonCode == ReasonFailedButDebited && strings.EqualFold(d.Rail, RailUPI),
	}
}

func (h Handlers) defaultTAT() time.Duration {
	if h.DefaultTAT > 0 {
		return h.DefaultTAT
	}
	return DefaultTAT
}

func (h Handlers) reminderLead() time.Duration {
	if h.ReminderLead > 0 {
		return h.ReminderLead
	}
	return DefaultReminderLead
}

func (h Handlers) amlThreshold() float64 {
	if h.AMLThreshold > 0 {
		return h.AMLThreshold
	}
	return DefaultAMLThreshold
}
