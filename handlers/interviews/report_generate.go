package interviews

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/eventpipe/eventpipe/app/failure"
)

// MaxReportAttempts is the report's own attempt cap (MAX_ATTEMPTS = 3): a
// report tried that many times is marked FAILED and the message acknowledged.
const MaxReportAttempts = 3

// DefaultStaleClaim is how long a PROCESSING claim is honoured. The spec
// only says "another worker holds PROCESSING → skip"; without a bound, a
// worker that died mid-generation would leave the report PROCESSING for
// ever. A live claim lasts one generation, bounded by the LLM client's
// timeout (2 min by default), so 10 min is surely dead; and it is shorter
// than the report queue's 1800 s visibility, so the delivery SQS hands out
// again after a crash finds the claim stale and takes it over.
const DefaultStaleClaim = 10 * time.Minute

// reportNamespace derives report.generate message ids.
var reportNamespace = uuid.MustParse("5b8f0c8e-3d0a-4c1e-9b7a-6f1d2e3c4b5a")

func reportGenerateMessageID(interviewID string) string {
	return uuid.NewSHA1(reportNamespace, []byte("report.generate/"+interviewID)).String()
}

// handleReportGenerate is the report-generate consumer (generateReport).
func (h Handlers) handleReportGenerate(msg *message.Message) error {
	ctx := msg.Context()
	log := h.messageLogger(ctx, msg)
	req, err := DecodeReportGenerate(msg.Payload)
	if err != nil {
		log.WarnContext(ctx, "invalid report request dropped", slog.Any("error", err))
		return failure.AsPermanent(fmt.Errorf("decode report request: %w", err))
	}
	log = log.With(slog.String("interview_id", req.InterviewID), slog.String("organization_id", req.OrganizationID))

	// 1. The interview, org-scoped and not soft-deleted.
	iv, err := h.Store.LoadInterview(ctx, req.OrganizationID, req.InterviewID)
	if err != nil {
		return storeError(ctx, log, "load interview", err)
	}
	// 2. Done already.
	report, ok, err := h.Store.LoadReport(ctx, req.InterviewID)
	if err != nil {
		return fmt.Errorf("load report: %w", err)
	}
	if ok && report.Status == ReportCompleted {
		log.InfoContext(ctx, "report already completed, nothing to do")
		return nil
	}
	// 3. The document's own cap: FAILED, acknowledged.
	if ok && report.AttemptCount >= MaxReportAttempts {
		if err := h.Store.FailReport(ctx, req.InterviewID, 0, fmt.Sprintf("gave up after %d attempts", report.AttemptCount)); err != nil {
			return fmt.Errorf("fail report at the cap: %w", err)
		}
		log.WarnContext(ctx, "report failed: attempt cap reached", slog.Int("attempt_count", report.AttemptCount))
		return nil
	}
	// 4. The claim.
	claim, err := h.Store.ClaimReport(ctx, req.OrganizationID, req.InterviewID, h.staleClaim())
	if err != nil {
		return fmt.Errorf("claim report: %w", err)
	}
	// 5. Held by another worker's live claim: retried once that claim
	// could be stale, never acknowledged — the holder may have died
	// mid-generation (eventpipe's rule: a redelivery that finds a live
	// claim is retried later). Completed meanwhile: done.
	if !claim.Claimed {
		if claim.Status == ReportProcessing {
			log.InfoContext(ctx, "report held by another worker's live claim, retried later")
			return failure.AsTransient(errors.New("report held by another worker's live claim"), h.staleClaim())
		}
		log.InfoContext(ctx, "report completed by another worker, nothing to do", slog.String("status", claim.Status))
		return nil
	}
	log = log.With(slog.Int("attempt_count", claim.AttemptCount))

	// 6. Not enough to judge: no model call.
	var content ReportContent
	if thin, why := InsufficientEvidence(iv); thin {
		content = insufficientEvidenceReport(why, time.Now().UTC())
		log.InfoContext(ctx, "insufficient evidence, report written without the model", slog.String("reason", why))
	} else {
		// 7. The model.
		content, err = h.Generator.Generate(ctx, iv)
		if err != nil {
			// FAILED (so the next delivery may claim it again), then the
			// error to the broker: retry, dead letter after three. A
			// generator error is never dropped, even when it is permanent
			// (a bad key, an unusable answer): the spec sends every throw
			// to the DLQ, where it can be redriven once fixed; its
			// Retry-After is kept.
			if ferr := h.Store.FailReport(context.WithoutCancel(ctx), req.InterviewID, claim.AttemptCount, truncate(err.Error(), 1000)); ferr != nil {
				log.ErrorContext(ctx, "report generation failed and could not be marked FAILED", slog.Any("error", ferr))
			}
			log.WarnContext(ctx, "report generation failed", slog.Any("error", err))
			return failure.AsTransient(fmt.Errorf("report generation (attempt %d): %w", claim.AttemptCount, err), failure.RetryAfter(err))
		}
	}
	done, err := h.Store.CompleteReport(ctx, req.InterviewID, claim.AttemptCount, content)
	if err != nil {
		return fmt.Errorf("store report: %w", err)
	}
	if !done {
		log.WarnContext(ctx, "report claim lost to another worker; its result stands")
		return nil
	}
	log.InfoContext(ctx, "report completed",
		slog.String("recommendation", content.Recommendation),
		slog.Int("overall_score", content.OverallScore),
		slog.String("model", content.Generation.Model),
		slog.String("prompt_version", content.Generation.PromptVersion),
		slog.Int("total_tokens", content.Generation.TotalTokens))
	return nil
}
