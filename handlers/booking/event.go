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
	"github.com/eventpipe/eventpipe/app/schemas"
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
	eventIDPattern = regexp.MustCompile(`^bse_[0-9a-f]{64}$`)
)

// Encode returns ev as JSON, strictly: the event's strict schema
// (bookingSessionId a valid SQS message group id, type lower-case kebab-case,
// occurredAt set, data a JSON object or empty, no unknown field) and eventId
// DeriveEventID(ev), which no schema can compute. occurredAt is written in
// UTC with milliseconds; empty data is left out.
func Encode(ev Event) ([]byte, error) {
	if ev.OccurredAt.IsZero() {
		return nil, invalid("field occurredAt: required")
	}
	data, err := canonicalData(ev.Data)
	if err != nil {
		return nil, err
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
	if err := check(b, schemas.Strict); err != nil {
		return nil, err
	}
	want, err := DeriveEventID(ev)
	if err != nil {
		return nil, err
	}
	if ev.EventID != want {
		return nil, invalid("eventId %q is not the derived id %s", jsonfields.Truncate(ev.EventID, 80), want)
	}
	return b, nil
}

// Decode decodes a body leniently against the event's lenient schema:
// unknown fields are ignored and never kept; bookingSessionId, type and
// occurredAt are required; stepId is optional and data may be absent, null or
// an object. eventId is returned as the body has it — "" when absent or null:
// the caller forwards it unchanged and never synthesises one (§"Consumer-side
// idempotency"), so the schema's eventId rules are waived on consume. Errors
// wrap ErrInvalidEvent and name the field.
func Decode(body []byte) (Event, error) {
	if err := check(body, schemas.Lenient); err != nil {
		return Event{}, err
	}
	var w struct {
		wireEvent
		EventID *string `json:"eventId"`
		StepID  *string `json:"stepId"`
	}
	if err := json.Unmarshal(body, &w); err != nil {
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) {
			return Event{}, invalid("field %s: want a string", typ.Field)
		}
		return Event{}, invalid("%v", err)
	}
	ev := Event{BookingSessionID: w.BookingSessionID, Type: w.Type}
	if w.EventID != nil {
		ev.EventID = *w.EventID
	}
	if len(ev.EventID) > MaxIDLength {
		return Event{}, invalid("field eventId: longer than %d bytes", MaxIDLength)
	}
	if w.StepID != nil {
		ev.StepID = *w.StepID
	}
	t, err := time.Parse(time.RFC3339Nano, w.OccurredAt)
	if err != nil {
		return Event{}, invalid("field occurredAt: not an RFC 3339 time")
	}
	ev.OccurredAt = t.UTC()
	if d := bytes.TrimSpace(w.Data); len(d) > 0 && !jsonfields.IsNull(d) {
		ev.Data = d
	}
	return ev, nil
}

// check validates body against the event's schema in mode; lenient, the
// eventId rules are waived (Decode).
// consumeWaiver is what the consumer accepts beyond the event's schema (the
// schema is what our producer writes): eventId as the body has it (the
// spec's "Consumer-side idempotency": forwarded unchanged, even absent), and
// a type of any shape — the spec names the event types by example only
// ("step-completed, question-answered, …, etc."); kebab-case binds our
// producer. bookingSessionId keeps its shape: it is the SQS message group id.
func consumeWaiver(p schemas.FieldError) bool {
	switch p.Field {
	case "eventId":
		return true
	case "type":
		return p.Keyword == "pattern" || p.Keyword == "maxLength"
	}
	return false
}

func check(body []byte, mode schemas.Mode) error {
	cat, err := schemas.Default()
	if err != nil {
		return invalid("schemas: %v", err)
	}
	m, ok := cat.Message("booking", "BookingSessionEvent")
	if !ok {
		return invalid("schemas: no BookingSessionEvent")
	}
	if err := m.CheckWaiving(body, mode, consumeWaiver); err != nil {
		return invalid("%v", err)
	}
	return nil
}

// Validate is the strict check `eventpipe publish` runs for
// booking-session-events.fifo: what Encode requires, on a body (unknown
// fields refused, eventId the derived id).
func Validate(body []byte) error {
	if err := check(body, schemas.Strict); err != nil {
		return err
	}
	ev, err := Decode(body)
	if err != nil {
		return err
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
