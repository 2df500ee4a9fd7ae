package interviews

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Queues of the spec (config/topology/interviews.yaml).
const (
	InterviewCompletedQueue = "interview-completed"
	InterviewCompletedDLQ   = "interview-completed-dlq"
	ReportGenerateQueue     = "report-generate"
	ReportGenerateDLQ       = "report-generate-dlq"
)

// Event types: the eventType attribute's values.
const (
	EventInterviewCompleted = "interview.completed"
	EventInterviewFailed    = "interview.failed"
	EventReportGenerate     = "report.generate"
)

// Attribute (metadata) keys every message of the spec carries.
const (
	RequestIDKey = "requestId"
	EventTypeKey = "eventType"
)

const (
	// unknownRequestID is what producers send outside an API request
	// (requestIdForPublish).
	unknownRequestID = "unknown"
	// settlementRequestIDPrefix + interview id is report.generate's
	// requestId.
	settlementRequestIDPrefix = "settlement-"
)

var objectID = regexp.MustCompile(`^[0-9a-fA-F]{24}$`)

// IsObjectID reports whether s has the shape of a MongoDB ObjectId: 24 hex
// digits.
func IsObjectID(s string) bool { return objectID.MatchString(s) }

// InterviewCompleted is the completed-interview body (interviewCompletedSchema).
type InterviewCompleted struct {
	InterviewID     string    `json:"interviewId"`
	OrganizationID  string    `json:"organizationId"`
	CompletedAt     time.Time `json:"completedAt"`
	DurationSeconds float64   `json:"durationSeconds"`
}

// InterviewFailed is the failed-interview body (interviewFailedSchema).
type InterviewFailed struct {
	Type           string    `json:"type"`
	InterviewID    string    `json:"interviewId"`
	OrganizationID string    `json:"organizationId"`
	FailureReason  string    `json:"failureReason"`
	FailedAt       time.Time `json:"failedAt"`
}

// ReportGenerate asks for an interview's report (reportGenerateSchema).
type ReportGenerate struct {
	InterviewID    string `json:"interviewId"`
	OrganizationID string `json:"organizationId"`
}

// InterviewEvent is the decoded interview-completed union: exactly one of
// Completed and Failed is set.
type InterviewEvent struct {
	Completed *InterviewCompleted
	Failed    *InterviewFailed
}

// ErrInvalidBody is wrapped by every decode error.
var ErrInvalidBody = errors.New("invalid body")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidBody, fmt.Sprintf(format, args...))
}

// DecodeInterviewEvent decodes an interview-completed body leniently
// (unknown fields ignored, never kept): a JSON object with a "type" key is
// the failed event, any other object the completed one. Not an object
// (null, an array, a string, …) or a failed schema is an error wrapping
// ErrInvalidBody.
func DecodeInterviewEvent(payload []byte) (InterviewEvent, error) {
	fields, err := object(payload)
	if err != nil {
		return InterviewEvent{}, err
	}
	if _, ok := fields["type"]; ok {
		f, err := decodeFailed(fields)
		return InterviewEvent{Failed: f}, err
	}
	c, err := decodeCompleted(fields)
	return InterviewEvent{Completed: c}, err
}

// object splits a JSON object into its fields; anything else is invalid.
func object(payload []byte) (map[string]json.RawMessage, error) {
	trimmed := bytes.TrimSpace(payload)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, invalid("body is not a JSON object")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &fields); err != nil {
		return nil, invalid("body is not a JSON object: %v", err)
	}
	return fields, nil
}

func str(fields map[string]json.RawMessage, key string) (string, error) {
	raw, ok := fields[key]
	if !ok {
		return "", invalid("%s is required", key)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return "", invalid("%s must be a string", key)
	}
	return s, nil
}

func oid(fields map[string]json.RawMessage, key string) (string, error) {
	s, err := str(fields, key)
	if err != nil {
		return "", err
	}
	if !IsObjectID(s) {
		return "", invalid("%s %q is not an ObjectId (24 hex digits)", key, truncate(s, 64))
	}
	// ObjectIds are case-insensitive hex; stores key them in lower case.
	return lower(s), nil
}

func datetime(fields map[string]json.RawMessage, key string) (time.Time, error) {
	s, err := str(fields, key)
	if err != nil {
		return time.Time{}, err
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, invalid("%s %q is not an ISO-8601 datetime", key, truncate(s, 64))
	}
	return t.UTC(), nil
}

func decodeCompleted(fields map[string]json.RawMessage) (*InterviewCompleted, error) {
	var c InterviewCompleted
	var err error
	if c.InterviewID, err = oid(fields, "interviewId"); err != nil {
		return nil, err
	}
	if c.OrganizationID, err = oid(fields, "organizationId"); err != nil {
		return nil, err
	}
	if c.CompletedAt, err = datetime(fields, "completedAt"); err != nil {
		return nil, err
	}
	raw, ok := fields["durationSeconds"]
	if !ok {
		return nil, invalid("durationSeconds is required")
	}
	if err := json.Unmarshal(raw, &c.DurationSeconds); err != nil || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, invalid("durationSeconds must be a number")
	}
	if err := checkDuration(c.DurationSeconds); err != nil {
		return nil, err
	}
	return &c, nil
}

func checkDuration(d float64) error {
	switch {
	case math.IsNaN(d) || math.IsInf(d, 0):
		return invalid("durationSeconds must be a finite number")
	case d < 0:
		return invalid("durationSeconds %g is negative", d)
	}
	return nil
}

func decodeFailed(fields map[string]json.RawMessage) (*InterviewFailed, error) {
	var f InterviewFailed
	var err error
	if f.Type, err = str(fields, "type"); err != nil {
		return nil, err
	}
	if f.Type != EventInterviewFailed {
		return nil, invalid("type %q is not %q", truncate(f.Type, 64), EventInterviewFailed)
	}
	if f.InterviewID, err = oid(fields, "interviewId"); err != nil {
		return nil, err
	}
	if f.OrganizationID, err = oid(fields, "organizationId"); err != nil {
		return nil, err
	}
	if f.FailureReason, err = str(fields, "failureReason"); err != nil {
		return nil, err
	}
	if f.FailedAt, err = datetime(fields, "failedAt"); err != nil {
		return nil, err
	}
	return &f, nil
}

// DecodeReportGenerate decodes a report-generate body leniently.
func DecodeReportGenerate(payload []byte) (ReportGenerate, error) {
	fields, err := object(payload)
	if err != nil {
		return ReportGenerate{}, err
	}
	var r ReportGenerate
	if r.InterviewID, err = oid(fields, "interviewId"); err != nil {
		return ReportGenerate{}, err
	}
	if r.OrganizationID, err = oid(fields, "organizationId"); err != nil {
		return ReportGenerate{}, err
	}
	return r, nil
}

// strictFields refuses unknown keys: our publishers are strict (eventpipe's
// rule: strict on publish, lenient on consume).
func strictFields(payload []byte, allowed ...string) error {
	fields, err := object(payload)
	if err != nil {
		return err
	}
	for k := range fields {
		known := false
		for _, a := range allowed {
			if k == a {
				known = true
				break
			}
		}
		if !known {
			return invalid("unknown field %q", truncate(k, 64))
		}
	}
	return nil
}

// ValidateInterviewEvent is the strict check `eventpipe publish` runs for
// interview-completed: the consumer's decoder plus no unknown fields.
func ValidateInterviewEvent(payload []byte) error {
	ev, err := DecodeInterviewEvent(payload)
	if err != nil {
		return err
	}
	if ev.Failed != nil {
		return strictFields(payload, "type", "interviewId", "organizationId", "failureReason", "failedAt")
	}
	return strictFields(payload, "interviewId", "organizationId", "completedAt", "durationSeconds")
}

// ValidateReportGenerate is the strict check for report-generate.
func ValidateReportGenerate(payload []byte) error {
	if _, err := DecodeReportGenerate(payload); err != nil {
		return err
	}
	return strictFields(payload, "interviewId", "organizationId")
}

// RequestIDOf returns a message's requestId attribute, or "".
func RequestIDOf(msg *message.Message) string { return msg.Metadata.Get(RequestIDKey) }

// traceIDFromRequestID is the routes' Route.TraceID: the spec's requestId
// attribute correlates a message with its API request, so it seeds the trace
// id — unless it is the producers' "unknown" placeholder, which would tie
// unrelated messages together.
func traceIDFromRequestID(msg *message.Message) string {
	id := RequestIDOf(msg)
	if id == unknownRequestID || len(id) > 128 {
		return ""
	}
	return id
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	r := []rune(s)
	if len(r) > n {
		r = r[:n]
	}
	return string(r) + "…"
}

func lower(s string) string { return string(bytes.ToLower([]byte(s))) }
