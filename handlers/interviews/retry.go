package interviews

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/eventpipe/eventpipe/app/outbox"
)

// RetryReport is the operator's retry of a FAILED report (the spec's "production
// retries should re-publish to SQS"): in one unit of work it resets the
// report to NOT_STARTED with a fresh attempt budget and writes a new
// report.generate request for it to out, so the request leaves (through the
// outbox relay) exactly when the reset commits. The request has a message id
// of its own, not the settlement's, so nothing takes it for that one's
// duplicate. It returns the report as it was; a report that is not FAILED is
// ErrReportNotFailed and changes nothing.
func RetryReport(ctx context.Context, store Store, out outbox.Writer, queue, interviewID string) (Report, error) {
	var was Report
	err := outbox.Unit(ctx, func(ctx context.Context) error {
		var err error
		if was, err = store.ResetFailedReport(ctx, interviewID); err != nil {
			return err
		}
		msg, err := NewReportGenerateMessage(ctx, ReportGenerate{InterviewID: was.InterviewID, OrganizationID: was.OrganizationID})
		if err != nil {
			return err
		}
		msg.UUID = uuid.NewString()
		msg.Metadata.Set(RequestIDKey, "retry-"+interviewID)
		return out.Write(ctx, queue, msg)
	})
	if err != nil {
		return Report{}, fmt.Errorf("retry report of interview %s: %w", interviewID, err)
	}
	return was, nil
}
