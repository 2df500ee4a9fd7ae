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

	"github.com/eventpipe/eventpipe/app/schemas"
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
// the failed event, checked against interview.failed's lenient schema; any
// other object the completed one, against interview.completed's. Not an
// object (null, an array, a string, …) or a body its schema refuses is an
// error wrapping ErrInvalidBody that names the field.
func DecodeInterviewEvent(payload []byte) (InterviewEvent, error) {
	return decodeInterviewEvent(payload, schemas.Lenient)
}

func decodeInterviewEvent(payload []byte, mode schemas.Mode) (InterviewEvent, error) {
	v, err := object(payload)
	if err != nil {
		return InterviewEvent{}, err
	}
	if _, ok := v["type"]; ok {
		var f InterviewFailed
		if err := decode(EventInterviewFailed, v, payload, mode, &f); err != nil {
			return InterviewEvent{}, err
		}
		f.InterviewID, f.OrganizationID, f.FailedAt = lower(f.InterviewID), lower(f.OrganizationID), f.FailedAt.UTC()
		return InterviewEvent{Failed: &f}, nil
	}
	var c InterviewCompleted
	if err := decode(EventInterviewCompleted, v, payload, mode, &c); err != nil {
		return InterviewEvent{}, err
	}
	c.InterviewID, c.OrganizationID, c.CompletedAt = lower(c.InterviewID), lower(c.OrganizationID), c.CompletedAt.UTC()
	return InterviewEvent{Completed: &c}, nil
}

// object reads a body as a JSON object; anything else is invalid.
func object(payload []byte) (map[string]any, error) {
	v, err := schemas.Decode(payload)
	if err != nil {
		return nil, invalid("body is not a JSON object: %v", err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, invalid("body is not a JSON object")
	}
	return obj, nil
}

// decode checks v, the decoded payload, against the schema of eventType
// in mode, then reads payload into out.
func decode(eventType string, v map[string]any, payload []byte, mode schemas.Mode, out any) error {
	cat, err := schemas.Default()
	if err != nil {
		return fmt.Errorf("interviews schemas: %w", err)
	}
	m, ok := cat.Message("interviews", eventType)
	if !ok {
		return fmt.Errorf("interviews schemas: no %s", eventType)
	}
	if err := m.CheckValue(v, mode); err != nil {
		return invalid("%s: %v", eventType, err)
	}
	if err := json.Unmarshal(payload, out); err != nil {
		// What the schema takes but Go cannot hold (a number past
		// float64, a leap second).
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) {
			return invalid("%s: field %s: does not fit a %s", eventType, typ.Field, typ.Type)
		}
		return invalid("%s: %v", eventType, err)
	}
	return nil
}

// DecodeReportGenerate decodes a report-generate body leniently, checked
// against report.generate's lenient schema.
func DecodeReportGenerate(payload []byte) (ReportGenerate, error) {
	return decodeReportGenerate(payload, schemas.Lenient)
}

func decodeReportGenerate(payload []byte, mode schemas.Mode) (ReportGenerate, error) {
	v, err := object(payload)
	if err != nil {
		return ReportGenerate{}, err
	}
	var r ReportGenerate
	if err := decode(EventReportGenerate, v, payload, mode, &r); err != nil {
		return ReportGenerate{}, err
	}
	r.InterviewID, r.OrganizationID = lower(r.InterviewID), lower(r.OrganizationID)
	return r, nil
}

// ValidateInterviewEvent is the strict check `eventpipe publish` runs for
// interview-completed: the consumer's decoder with the strict schemas (no
// unknown fields; eventpipe's rule: strict on publish, lenient on consume).
func ValidateInterviewEvent(payload []byte) error {
	_, err := decodeInterviewEvent(payload, schemas.Strict)
	return err
}

// ValidateReportGenerate is the strict check for report-generate.
func ValidateReportGenerate(payload []byte) error {
	_, err := decodeReportGenerate(payload, schemas.Strict)
	return err
}

// The bot API's request fields (bot_api.go) are read with these.

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

func checkDuration(d float64) error {
	switch {
	case math.IsNaN(d) || math.IsInf(d, 0):
		return invalid("durationSeconds must be a finite number")
	case d < 0:
		return invalid("durationSeconds %g is negative", d)
	}
	return nil
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
