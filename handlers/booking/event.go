package booking

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/jsonfields"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// Queues of the spec (config/topology/booking.yaml).
const (
	Queue = "booking-session-events.fifo"
	DLQ   = "booking-session-events-dlq.fifo"
)

// Event types the spec names ("step-completed, question-answered,
// booking-abandoned, booking-completed, etc."). The list is open: any
// lower-case kebab-case type is accepted.
const (
	TypeStepCompleted    = "step-completed"
	TypeQuestionAnswered = "question-answered"
	TypeBookingAbandoned = "booking-abandoned"
	TypeBookingCompleted = "booking-completed"
)

// Transports of the two producers (§"Why a unified pipeline"). The transport
// travels in TransportKey metadata only: it is not part of the event.
const (
	TransportHTTP     = "http"
	TransportSocketIO = "socket.io"
	TransportKey      = "transport"
)

// MaxIDLength bounds every id (eventId, bookingSessionId, stepId) a consumer
// accepts; SQS allows 128 characters for a group or deduplication id.
const MaxIDLength = 128

// occurredAtLayout is how occurredAt is written: RFC 3339, UTC, milliseconds.
const occurredAtLayout = "2006-01-02T15:04:05.000Z"

// Event is one booking-session event: the body of a message on
// booking-session-events.fifo.
type Event struct {
	// EventID is the producer's DeriveEventID; the consumer's dedupe key.
	EventID          string
	BookingSessionID string
	Type             string
	OccurredAt       time.Time
	// StepID is the booking flow step; optional.
	StepID string
	// Data is the event's fields, a JSON object; nil, null and {} are the
	// same.
	Data json.RawMessage
}

type wireEvent struct {
	EventID          string          `json:"eventId"`
	BookingSessionID string          `json:"bookingSessionId"`
	Type             string          `json:"type"`
	OccurredAt       string          `json:"occurredAt"`
	StepID           string          `json:"stepId,omitempty"`
	Data             json.RawMessage `json:"data,omitempty"`
}

// ErrInvalidEvent is wrapped by every decode and validation error.
var ErrInvalidEvent = errors.New("invalid booking-session event")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidEvent, fmt.Sprintf(format, args...))
}

var (
	// groupIDPattern is what SQS accepts as a MessageGroupId.
	groupIDPattern = regexp.MustCompile(`^[!-~]{1,128}$`)
	typePattern    = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)
	eventIDPattern = regexp.MustCompile(`^bse_[0-9a-f]{64}$`)
)

// Encode returns ev as JSON, strictly: eventId must be DeriveEventID(ev),
// bookingSessionId a valid SQS message group id, type lower-case kebab-case,
// occurredAt set, data a JSON object (or empty). occurredAt is written in UTC
// with milliseconds; empty data is left out.
func Encode(ev Event) ([]byte, error) {
	if !groupIDPattern.MatchString(ev.BookingSessionID) {
		return nil, invalid("bookingSessionId %q is not 1..128 printable ASCII characters", jsonfields.Truncate(ev.BookingSessionID, 64))
	}
	if len(ev.Type) > 64 || !typePattern.MatchString(ev.Type) {
		return nil, invalid("type %q is not lower-case kebab-case", jsonfields.Truncate(ev.Type, 64))
	}
	if ev.OccurredAt.IsZero() {
		return nil, invalid("occurredAt is required")
	}
	if len(ev.StepID) > MaxIDLength {
		return nil, invalid("stepId longer than %d bytes", MaxIDLength)
	}
	data, err := canonicalData(ev.Data)
	if err != nil {
		return nil, err
	}
	want, err := DeriveEventID(ev)
	if err != nil {
		return nil, err
	}
	if ev.EventID != want {
		return nil, invalid("eventId %q is not the derived id %s", jsonfields.Truncate(ev.EventID, 80), want)
	}
	w := wireEvent{EventID: ev.EventID, BookingSessionID: ev.BookingSessionID, Type: ev.Type,
		OccurredAt: ev.OccurredAt.UTC().Format(occurredAtLayout), StepID: ev.StepID}
	if string(data) != "{}" {
		w.Data = data
	}
	b, err := json.Marshal(w)
	if err != nil {
		return nil, invalid("encode: %v", err)
	}
	return b, nil
}

// Decode decodes a body leniently: unknown fields are ignored and never
// kept. bookingSessionId, type and occurredAt are required; stepId is
// optional and data may be absent, null or an object. eventId is returned as
// the body has it — "" when absent: the caller forwards it unchanged and
// never synthesises one (§"Consumer-side idempotency"). Errors wrap
// ErrInvalidEvent.
func Decode(body []byte) (Event, error) {
	fields, err := object(body, "body")
	if err != nil {
		return Event{}, err
	}
	var ev Event
	if _, ok := fields["eventId"]; ok {
		if ev.EventID, err = str(fields, "eventId", false); err != nil {
			return Event{}, err
		}
	}
	if ev.BookingSessionID, err = str(fields, "bookingSessionId", true); err != nil {
		return Event{}, err
	}
	if ev.Type, err = str(fields, "type", true); err != nil {
		return Event{}, err
	}
	if ev.StepID, err = str(fields, "stepId", false); err != nil {
		return Event{}, err
	}
	s, err := str(fields, "occurredAt", true)
	if err != nil {
		return Event{}, err
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return Event{}, invalid("occurredAt %q is not an RFC 3339 time", jsonfields.Truncate(s, 64))
	}
	ev.OccurredAt = t.UTC()
	if raw, ok := fields["data"]; ok && !jsonfields.IsNull(raw) {
		if _, err := object(raw, "data"); err != nil {
			return Event{}, err
		}
		ev.Data = bytes.TrimSpace(raw)
	}
	return ev, nil
}

// Validate is the strict check `eventpipe publish` runs for
// booking-session-events.fifo: what Encode requires, on a body (unknown
// fields refused, eventId the derived id).
func Validate(body []byte) error {
	ev, err := Decode(body)
	if err != nil {
		return err
	}
	fields, _ := object(body, "body")
	for k := range fields {
		switch k {
		case "eventId", "bookingSessionId", "type", "occurredAt", "stepId", "data":
		default:
			return invalid("body: unknown field %q", jsonfields.Truncate(k, 64))
		}
	}
	if ev.EventID == "" {
		return invalid("eventId is required")
	}
	_, err = Encode(ev)
	return err
}

// Message returns ev encoded (strictly) as a message for
// booking-session-events.fifo: UUID = the derived event id, x-group-id = the
// booking session id, x-dedup-id = the event id.
func Message(ev Event) (*message.Message, error) {
	body, err := Encode(ev)
	if err != nil {
		return nil, err
	}
	msg := message.NewMessage(ev.EventID, body)
	msg.Metadata.Set(metadata.GroupIDKey, ev.BookingSessionID)
	msg.Metadata.Set(metadata.DeduplicationIDKey, ev.EventID)
	return msg, nil
}

// IsEventID reports whether id has DeriveEventID's shape.
func IsEventID(id string) bool { return eventIDPattern.MatchString(id) }

// messageIDOf is the route's Route.MessageID: the body's eventId.
func messageIDOf(payload []byte) string {
	ev, err := Decode(payload)
	if err != nil {
		return ""
	}
	return ev.EventID
}

// --- JSON helpers ---------------------------------------------------------

// object splits a JSON object into its fields; anything else is invalid.
func object(b []byte, what string) (map[string]json.RawMessage, error) {
	fields, err := jsonfields.Object(b, what)
	if err != nil {
		return nil, invalid("%s", err)
	}
	return fields, nil
}

// str reads a string field: required ones must be present and non-empty;
// every one is at most MaxIDLength bytes.
func str(fields map[string]json.RawMessage, key string, required bool) (string, error) {
	raw, ok := fields[key]
	if !ok {
		if required {
			return "", invalid("%s is required", key)
		}
		return "", nil
	}
	if !required && jsonfields.IsNull(raw) {
		return "", nil // lenient: null is absent
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil || jsonfields.IsNull(raw) {
		return "", invalid("%s must be a string", key)
	}
	if required && s == "" {
		return "", invalid("%s must not be empty", key)
	}
	if len(s) > MaxIDLength {
		return "", invalid("%s longer than %d bytes", key, MaxIDLength)
	}
	return s, nil
}
