package interviews

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/msgctx"
	"github.com/eventpipe/eventpipe/app/outbox"
)

// handleInterviewCompleted is the interview-completed consumer
// (interview-completed.ts): decode the union, settle, and ask for the report
// when this delivery really settled a completion.
func (h Handlers) handleInterviewCompleted(msg *message.Message) error {
	ctx := msg.Context()
	log := h.messageLogger(ctx, msg)
	ev, err := DecodeInterviewEvent(msg.Payload)
	if err != nil {
		// The route drops permanent failures: logged (by Observe, and here
		// with the reason) and acknowledged, as the spec says.
		log.WarnContext(ctx, "invalid interview event dropped", slog.Any("error", err))
		return failure.AsPermanent(fmt.Errorf("decode interview event: %w", err))
	}
	if ev.Failed != nil {
		return h.settleFailed(ctx, log, *ev.Failed)
	}
	return h.settleCompleted(ctx, log, msg, *ev.Completed)
}

// storeError classifies a store error: facts no retry can change (unknown
// interview or organisation, another organisation's interview) are
// permanent; the rest (the database) transient.
func storeError(ctx context.Context, log *slog.Logger, what string, err error) error {
	if errors.Is(err, ErrUnknownInterview) || errors.Is(err, ErrUnknownOrganization) || errors.Is(err, ErrOrganizationMismatch) {
		log.WarnContext(ctx, what+" refused, nothing changed", slog.Any("error", err))
		return failure.AsPermanent(fmt.Errorf("%s: %w", what, err))
	}
	return fmt.Errorf("%s: %w", what, err)
}

func (h Handlers) settleCompleted(ctx context.Context, log *slog.Logger, msg *message.Message, ev InterviewCompleted) error {
	billedCredits := BilledCredits(ev.DurationSeconds)
	log = log.With(slog.String("interview_id", ev.InterviewID), slog.String("organization_id", ev.OrganizationID))

	report, err := NewReportGenerateMessage(ctx, ReportGenerate{InterviewID: ev.InterviewID, OrganizationID: ev.OrganizationID})
	if err != nil {
		return failure.AsPermanent(err) // unreachable: the ids were validated
	}
	// The request is written with the settlement and leaves after it
	// commits, only when this delivery really settled.
	var followUp FollowUp
	if q := h.reportQueue(); q == "" {
		log.WarnContext(ctx, "report-generate queue not configured, report request skipped")
	} else {
		followUp = func(ctx context.Context) error { return h.Outbox.Write(ctx, q, report) }
	}
	var res SettleResult
	err = outbox.Unit(ctx, func(ctx context.Context) error {
		var err error
		res, err = h.Store.SettleCompleted(ctx, Settlement{
			InterviewID: ev.InterviewID, OrganizationID: ev.OrganizationID, Consumed: billedCredits, Anchor: ev.CompletedAt,
		}, followUp)
		return err
	})
	if np := (*outbox.NotPublishedError)(nil); errors.As(err, &np) {
		// Committed: returning the error would redeliver a message whose
		// settlement is done (the embedded mode has no relay to retry).
		log.ErrorContext(ctx, "report request not published; settlement stays committed",
			slog.String("report_message_id", report.UUID), slog.Any("error", err))
		return nil
	}
	if err != nil {
		return storeError(ctx, log, "settle completed interview", err)
	}
	if !res.Settled {
		// A redelivery (or a second publish): the claim was taken, nothing
		// changed, and no second report is asked for.
		log.InfoContext(ctx, "interview already settled, nothing to do",
			slog.Int64("credits_consumed", res.CreditsConsumed))
		return nil
	}
	log.InfoContext(ctx, "interview settled",
		slog.Int64("billed_credits", billedCredits),
		slog.Int64("credits_reserved", res.CreditsReserved),
		slog.Int64("credits_consumed", res.CreditsConsumed),
		slog.Time("retention_expires_at", res.RetentionExpiresAt),
		slog.String("report_message_id", report.UUID))
	return nil
}

func (h Handlers) settleFailed(ctx context.Context, log *slog.Logger, ev InterviewFailed) error {
	log = log.With(slog.String("interview_id", ev.InterviewID), slog.String("organization_id", ev.OrganizationID))
	// failureReason is part of the schema but, as in settleFailedInterview,
	// not used: it was recorded by the API before it enqueued.
	res, err := h.Store.SettleFailed(ctx, Settlement{InterviewID: ev.InterviewID, OrganizationID: ev.OrganizationID, Anchor: ev.FailedAt})
	if err != nil {
		return storeError(ctx, log, "settle failed interview", err)
	}
	if !res.Settled {
		log.InfoContext(ctx, "interview already settled, nothing to do")
		return nil
	}
	log.InfoContext(ctx, "failed interview settled, reservation released",
		slog.Int64("credits_released", res.CreditsReserved),
		slog.Time("retention_expires_at", res.RetentionExpiresAt))
	return nil
}

// messageLogger is msgctx.Logger plus the message's requestId attribute,
// which the producer logs too, so a request's lines can be found on both
// sides.
func (h Handlers) messageLogger(ctx context.Context, msg *message.Message) *slog.Logger {
	return msgctx.Logger(ctx, h.Logger, msg).With(slog.String("request_id", RequestIDOf(msg)))
}

// BilledCredits is what an interview of d seconds consumes: one credit per
// whole minute (rounded down). The spec caps consumption at the reserved
// credits, which the store applies; any finite, non-negative d settles, so a
// duration larger than int64 minutes is the largest count rather than a
// conversion that overflows (seen: 1e308 seconds must settle as "all the
// reserved credits", not be dropped and leave them reserved forever).
func BilledCredits(d float64) int64 {
	m := math.Floor(d / 60)
	if m >= math.MaxInt64 {
		return math.MaxInt64
	}
	return max(0, int64(m))
}
