package disputes

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/oklog/ulid/v2"

	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/schemas"
)

// Queues of the spec (config/topology/disputes.yaml).
const (
	DomainEventsQueue = "domain-events"
	DomainEventsDLQ   = "domain-events-dlq"
	IngestQueue       = "ingest-queue"
	IngestDLQ         = "ingest-dlq"
)

// Event types (§2's table) and the one envelope version they have.
const (
	EventDisputeRaised      = "DisputeRaised"
	EventTransactionFlagged = "TransactionFlagged"
	EventDocumentIngested   = "DocumentIngested"

	// Version is the event_version every event type has today.
	Version = 1
)

// Aggregate types of our events.
const (
	AggregateDispute     = "dispute"
	AggregateTransaction = "transaction"
	AggregateDocument    = "document"
)

// EventIDKey is the metadata key (SQS message attribute, AMQP header) holding
// a copy of the envelope's event_id (§1: "event_id as message attribute").
const EventIDKey = "event_id"

// MaxIDLength bounds every id a consumer accepts (event_id, aggregate_id,
// trace_id): longer is a malformed envelope, not something to store.
const MaxIDLength = 128

// occurredAtLayout is §2's occurred_at: RFC 3339, UTC, milliseconds.
const occurredAtLayout = "2006-01-02T15:04:05.000Z"

// Envelope is §2's event envelope. Payload is the event's own JSON object.
type Envelope struct {
	EventID       string
	EventType     string
	EventVersion  int
	AggregateType string
	AggregateID   string
	OccurredAt    time.Time
	TraceID       string
	Payload       json.RawMessage
}

// wireEnvelope is the envelope's JSON shape.
type wireEnvelope struct {
	EventID       string          `json:"event_id"`
	EventType     string          `json:"event_type"`
	EventVersion  int             `json:"event_version"`
	AggregateType string          `json:"aggregate_type"`
	AggregateID   string          `json:"aggregate_id"`
	OccurredAt    string          `json:"occurred_at"`
	TraceID       string          `json:"trace_id"`
	Payload       json.RawMessage `json:"payload"`
}

// ErrInvalidEnvelope is wrapped by every decode and validation error.
var ErrInvalidEnvelope = errors.New("invalid event envelope")

// ErrUnknownEventType is wrapped (with ErrInvalidEnvelope) when event_type
// names no event of the spec.
var ErrUnknownEventType = errors.New("unknown event_type")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidEnvelope, fmt.Sprintf(format, args...))
}

var (
	eventIDPattern = regexp.MustCompile(`^evt_[0-9A-HJKMNP-TV-Z]{26}$`)
	traceIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)
)

// NewID returns prefix + "_" + a fresh ULID (26 Crockford base-32 characters,
// time-ordered by millisecond, 80 random bits from crypto/rand).
func NewID(prefix string, now time.Time) string {
	return prefix + "_" + ulid.MustNew(ulid.Timestamp(now), rand.Reader).String()
}

// NewEventID returns an event id of our producers: "evt_" + a ULID.
func NewEventID(now time.Time) string { return NewID("evt", now) }

// IsEventID reports whether id has our producers' shape, "evt_" + a ULID.
// Consumers accept any non-empty id (foreign producers); only our encoder
// insists on this one.
func IsEventID(id string) bool {
	if !eventIDPattern.MatchString(id) {
		return false
	}
	_, err := ulid.ParseStrict(id[len("evt_"):])
	return err == nil
}

// Encode returns env as JSON, strictly: what Validate requires (the event
// type's strict schema: every field, event_id "evt_" + a ULID, trace_id 32
// lower-case hex digits (W3C), a payload valid for the type with no unknown
// fields). occurred_at is written in UTC with milliseconds.
func Encode(env Envelope) ([]byte, error) {
	b, err := json.Marshal(wireEnvelope{
		EventID: env.EventID, EventType: env.EventType, EventVersion: env.EventVersion,
		AggregateType: env.AggregateType, AggregateID: env.AggregateID,
		OccurredAt: env.OccurredAt.UTC().Format(occurredAtLayout), TraceID: env.TraceID,
		Payload: env.Payload,
	})
	if err != nil {
		return nil, invalid("encode: %v", err)
	}
	if env.OccurredAt.IsZero() {
		return nil, invalid("field occurred_at: required")
	}
	if err := Validate(b); err != nil {
		return nil, err
	}
	return b, nil
}

// Decode decodes an envelope leniently against the envelope's schema:
// unknown fields (of the envelope and of the payload) are ignored, and
// foreign producers get what the spec allows beyond our own (consumerWaives):
// any non-empty event_id, no trace_id, any RFC 3339 occurred_at. It does not
// check event_type or the payload: DecodeEvent does. Errors wrap
// ErrInvalidEnvelope and name the field.
func Decode(body []byte) (Envelope, error) {
	env, _, err := decode(body, schemas.Lenient)
	return env, err
}

// decode is Decode in mode, returning the body decoded for a further check.
func decode(body []byte, mode schemas.Mode) (Envelope, any, error) {
	v, err := schemas.Decode(body)
	if err != nil {
		return Envelope{}, nil, invalid("body is not a JSON object: %v", err)
	}
	cat, err := schemas.Default()
	if err != nil {
		return Envelope{}, nil, invalid("schemas: %v", err)
	}
	m, ok := cat.Part("disputes", "envelope.json")
	if !ok {
		return Envelope{}, nil, invalid("schemas: no disputes envelope")
	}
	if err := check(m, v, mode); err != nil {
		return Envelope{}, nil, err
	}
	var w wireEnvelope
	if err := json.Unmarshal(body, &w); err != nil {
		return Envelope{}, nil, invalid("%v", err)
	}
	env := Envelope{
		EventID: w.EventID, EventType: w.EventType, EventVersion: w.EventVersion, AggregateType: w.AggregateType,
		AggregateID: w.AggregateID, TraceID: w.TraceID, Payload: bytes.TrimSpace(w.Payload),
	}
	if env.EventID == "" {
		return Envelope{}, nil, invalid("field event_id: must not be empty") // the waived pattern said so
	}
	if len(env.EventID) > MaxIDLength || len(env.TraceID) > MaxIDLength {
		return Envelope{}, nil, invalid("event_id and trace_id are at most %d bytes", MaxIDLength)
	}
	t, err := time.Parse(time.RFC3339Nano, w.OccurredAt)
	if err != nil {
		return Envelope{}, nil, invalid("field occurred_at: not an RFC 3339 time")
	}
	env.OccurredAt = t.UTC()
	return env, v, nil
}

// check validates v against m in mode; lenient, the consumer's waivers
// apply.
func check(m schemas.Message, v any, mode schemas.Mode) error {
	if err := m.CheckValueWaiving(v, mode, consumerWaives); err != nil {
		return invalid("%v", err)
	}
	return nil
}

// consumerWaives reports whether the consumer takes a body the contract
// (our producers' shape) refuses: the spec shows our ids but requires none of
// their shapes of a foreign producer (decision 0030), so event_id is any
// non-empty string, trace_id optional and any string, occurred_at any RFC 3339
// time (its format stays checked), aggregate_type any non-empty string.
func consumerWaives(p schemas.FieldError) bool {
	switch p.Field {
	case "event_id":
		return p.Keyword == "pattern"
	case "trace_id":
		return p.Keyword == "required" || p.Keyword == "pattern" || p.Keyword == "not"
	case "occurred_at":
		return p.Keyword == "pattern"
	case "aggregate_type":
		return p.Keyword == "const"
	}
	return false
}

// DecodeEvent decodes body (Decode) and its payload for its event_type,
// checked against that type's lenient schema (with Decode's waivers).
// Exactly one of the returned event's fields is set. An unknown event_type
// also wraps ErrUnknownEventType.
func DecodeEvent(body []byte) (Envelope, Event, error) {
	return decodeEventBody(body, schemas.Lenient)
}

func decodeEventBody(body []byte, mode schemas.Mode) (Envelope, Event, error) {
	env, v, err := decode(body, mode)
	if err != nil {
		return Envelope{}, Event{}, err
	}
	ev, err := decodeEvent(env, v, mode)
	if err != nil {
		return env, Event{}, err
	}
	return env, ev, nil
}

// Validate is the strict check `eventpipe publish` runs for domain-events
// and Encode runs on every envelope of ours: the event type's strict schema,
// whole, no waiver.
func Validate(body []byte) error {
	_, _, err := decodeEventBody(body, schemas.Strict)
	return err
}

// Message returns env encoded (strictly) as a message: UUID = event_id, the
// event_id metadata a copy of it, x-trace-id the envelope's trace_id.
func Message(env Envelope) (*message.Message, error) {
	body, err := Encode(env)
	if err != nil {
		return nil, err
	}
	msg := message.NewMessage(env.EventID, body)
	msg.Metadata.Set(EventIDKey, env.EventID)
	msg.Metadata.Set(metadata.TraceIDKey, env.TraceID)
	return msg, nil
}

// traceIDOf is the route's Route.TraceID: the envelope's trace_id (§2: "an
// asynchronous effect appears in the same trace"), or "" when the body has
// none or does not decode.
func traceIDOf(msg *message.Message) string {
	var w struct {
		TraceID string `json:"trace_id"`
	}
	if json.Unmarshal(msg.Payload, &w) != nil || len(w.TraceID) > MaxIDLength {
		return ""
	}
	return w.TraceID
}
