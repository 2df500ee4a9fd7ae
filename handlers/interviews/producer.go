package interviews

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/msgctx"
)

type requestIDKey struct{}

// WithRequestID returns ctx carrying the API request id that producers put
// in the requestId attribute (getRequestId()).
func WithRequestID(ctx context.Context, requestID string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, requestID)
}

// RequestIDFromContext returns the request id ctx carries, or "unknown" as
// the spec's requestIdForPublish does.
func RequestIDFromContext(ctx context.Context) string {
	if id, _ := ctx.Value(requestIDKey{}).(string); id != "" {
		return id
	}
	return unknownRequestID
}

// isoTime formats like JavaScript's Date.toISOString (UTC, milliseconds),
// what the spec's producers send.
func isoTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// Producer publishes the spec's messages (sqs.service.ts): strict on what it
// sends, with the requestId and eventType attributes. A queue left empty is
// not configured: its publishes are skipped with a warning (the spec's
// INTERVIEW_COMPLETED_QUEUE_URL / REPORT_GENERATE_QUEUE_URL rule).
type Producer struct {
	Publisher message.Publisher
	// InterviewCompletedQueue receives completions and failures; "" skips.
	InterviewCompletedQueue string
	// ReportGenerateQueue receives report requests; "" skips.
	ReportGenerateQueue string
	Logger              *slog.Logger
	// Now defaults completedAt and failedAt; time.Now when nil.
	Now func() time.Time
}

// NewProducer returns a producer on the spec's queue names.
func NewProducer(pub message.Publisher, logger *slog.Logger) Producer {
	return Producer{Publisher: pub, InterviewCompletedQueue: InterviewCompletedQueue, ReportGenerateQueue: ReportGenerateQueue, Logger: logger}
}

func (p Producer) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p Producer) logger() *slog.Logger {
	if p.Logger != nil {
		return p.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// PublishInterviewCompleted publishes a completion. A zero CompletedAt
// defaults to now, DurationSeconds to 0 (its zero value). It returns the
// message id, or "" when the queue is not configured.
func (p Producer) PublishInterviewCompleted(ctx context.Context, ev InterviewCompleted) (string, error) {
	if ev.CompletedAt.IsZero() {
		ev.CompletedAt = p.now()
	}
	if err := checkIDs(ev.InterviewID, ev.OrganizationID); err != nil {
		return "", fmt.Errorf("publish %s: %w", EventInterviewCompleted, err)
	}
	if err := checkDuration(ev.DurationSeconds); err != nil {
		return "", fmt.Errorf("publish %s: %w", EventInterviewCompleted, err)
	}
	body, err := json.Marshal(struct {
		InterviewID     string  `json:"interviewId"`
		OrganizationID  string  `json:"organizationId"`
		CompletedAt     string  `json:"completedAt"`
		DurationSeconds float64 `json:"durationSeconds"`
	}{ev.InterviewID, ev.OrganizationID, isoTime(ev.CompletedAt), ev.DurationSeconds})
	if err != nil {
		return "", fmt.Errorf("publish %s: encode: %w", EventInterviewCompleted, err)
	}
	return p.publish(ctx, p.InterviewCompletedQueue, EventInterviewCompleted, RequestIDFromContext(ctx), body, "")
}

// PublishInterviewFailed publishes a failure; Type is set for the caller, a
// zero FailedAt defaults to now.
func (p Producer) PublishInterviewFailed(ctx context.Context, ev InterviewFailed) (string, error) {
	if ev.FailedAt.IsZero() {
		ev.FailedAt = p.now()
	}
	if err := checkIDs(ev.InterviewID, ev.OrganizationID); err != nil {
		return "", fmt.Errorf("publish %s: %w", EventInterviewFailed, err)
	}
	body, err := json.Marshal(struct {
		Type           string `json:"type"`
		InterviewID    string `json:"interviewId"`
		OrganizationID string `json:"organizationId"`
		FailureReason  string `json:"failureReason"`
		FailedAt       string `json:"failedAt"`
	}{EventInterviewFailed, ev.InterviewID, ev.OrganizationID, ev.FailureReason, isoTime(ev.FailedAt)})
	if err != nil {
		return "", fmt.Errorf("publish %s: encode: %w", EventInterviewFailed, err)
	}
	return p.publish(ctx, p.InterviewCompletedQueue, EventInterviewFailed, RequestIDFromContext(ctx), body, "")
}

// PublishReportGenerate asks for a report, with requestId
// settlement-<interviewId> (the only producer the spec has is the
// settlement).
func (p Producer) PublishReportGenerate(ctx context.Context, req ReportGenerate) (string, error) {
	msg, err := NewReportGenerateMessage(ctx, req)
	if err != nil {
		return "", err
	}
	return p.publish(ctx, p.ReportGenerateQueue, EventReportGenerate, msg.Metadata.Get(RequestIDKey), msg.Payload, msg.UUID)
}

// NewReportGenerateMessage builds the report.generate message for an
// interview: its id is derived from the interview id, so a settlement that
// is retried after a crash asks for the same report with the same message
// id (consumers and the outbox recognise it).
func NewReportGenerateMessage(ctx context.Context, req ReportGenerate) (*message.Message, error) {
	if err := checkIDs(req.InterviewID, req.OrganizationID); err != nil {
		return nil, fmt.Errorf("publish %s: %w", EventReportGenerate, err)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("publish %s: encode: %w", EventReportGenerate, err)
	}
	msg := msgctx.NewMessage(ctx, body)
	msg.UUID = reportGenerateMessageID(req.InterviewID)
	msg.Metadata.Set(RequestIDKey, settlementRequestIDPrefix+req.InterviewID)
	msg.Metadata.Set(EventTypeKey, EventReportGenerate)
	return msg, nil
}

func (p Producer) publish(ctx context.Context, queue, eventType, requestID string, body []byte, id string) (string, error) {
	if queue == "" {
		p.logger().WarnContext(ctx, "queue not configured, publish skipped",
			slog.String("event_type", eventType), slog.String("request_id", requestID))
		return "", nil
	}
	msg := msgctx.NewMessage(ctx, body)
	if id != "" {
		msg.UUID = id
	}
	msg.Metadata.Set(RequestIDKey, requestID)
	msg.Metadata.Set(EventTypeKey, eventType)
	if msg.Metadata.Get(metadata.TraceIDKey) == "" {
		// A producer outside a handler starts a trace; the request id seeds
		// it when there is one, so API logs and message logs line up.
		if requestID != unknownRequestID {
			msg.Metadata.Set(metadata.TraceIDKey, requestID)
		} else {
			msg.Metadata.Set(metadata.TraceIDKey, msgctx.NewTraceID())
		}
	}
	if err := p.Publisher.Publish(queue, msg); err != nil {
		return "", fmt.Errorf("publish %s to %s: %w", eventType, queue, err)
	}
	p.logger().InfoContext(ctx, "published",
		slog.String("message_id", msg.UUID),
		slog.String("trace_id", msg.Metadata.Get(metadata.TraceIDKey)),
		slog.String("queue", queue),
		slog.String("event_type", eventType),
		slog.String("request_id", requestID))
	return msg.UUID, nil
}

func checkIDs(interviewID, organizationID string) error {
	if !IsObjectID(interviewID) {
		return invalid("interviewId %q is not an ObjectId (24 hex digits)", truncate(interviewID, 64))
	}
	if !IsObjectID(organizationID) {
		return invalid("organizationId %q is not an ObjectId (24 hex digits)", truncate(organizationID, 64))
	}
	return nil
}
