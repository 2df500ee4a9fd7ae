package disputes

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/oklog/ulid/v2"

	"github.com/eventpipe/eventpipe/app/jsonfields"
	"github.com/eventpipe/eventpipe/app/metadata"
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

var envelopeFields = []string{"event_id", "event_type", "event_version", "aggregate_type", "aggregate_id", "occurred_at", "trace_id", "payload"}

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

// Encode returns env as JSON, strictly: every field is required, event_id
// must be "evt_" + a ULID, trace_id 32 lower-case hex digits (W3C), the
// event type known and its payload valid for it with no unknown fields.
// occurred_at is written in UTC with milliseconds.
func Encode(env Envelope) ([]byte, error) {
	if err := checkStrict(env); err != nil {
		return nil, err
	}
	b, err := json.Marshal(wireEnvelope{
		EventID: env.EventID, EventType: env.EventType, EventVersion: env.EventVersion,
		AggregateType: env.AggregateType, AggregateID: env.AggregateID,
		OccurredAt: env.OccurredAt.UTC().Format(occurredAtLayout), TraceID: env.TraceID,
		Payload: env.Payload,
	})
	if err != nil {
		return nil, invalid("encode: %v", err)
	}
	return b, nil
}

func checkStrict(env Envelope) error {
	if !IsEventID(env.EventID) {
		return invalid("event_id %q is not evt_ + a ULID", jsonfields.Truncate(env.EventID, 64))
	}
	if !traceIDPattern.MatchString(env.TraceID) || env.TraceID == strings.Repeat("0", 32) {
		return invalid("trace_id %q is not 32 lower-case hex digits", jsonfields.Truncate(env.TraceID, 64))
	}
	if env.OccurredAt.IsZero() {
		return invalid("occurred_at is required")
	}
	if env.AggregateType == "" || env.AggregateID == "" {
		return invalid("aggregate_type and aggregate_id are required")
	}
	if len(env.AggregateID) > MaxIDLength {
		return invalid("aggregate_id longer than %d bytes", MaxIDLength)
	}
	ev, err := decodeEvent(env.EventType, env.EventVersion, env.Payload)
	if err != nil {
		return err
	}
	if want := ev.aggregateType(); env.AggregateType != want {
		return invalid("aggregate_type %q: %s events are about a %q", jsonfields.Truncate(env.AggregateType, 64), env.EventType, want)
	}
	return strictObject(env.Payload, "payload", ev.fields()...)
}

// Decode decodes an envelope leniently: unknown fields (of the envelope and
// of the payload) are ignored. event_id, event_type, event_version,
// aggregate_type, aggregate_id, occurred_at and a payload object are
// required; trace_id is optional. It does not check event_type or the
// payload: DecodeEvent does. Errors wrap ErrInvalidEnvelope.
func Decode(body []byte) (Envelope, error) {
	fields, err := object(body, "body")
	if err != nil {
		return Envelope{}, err
	}
	var env Envelope
	if env.EventID, err = idField(fields, "event_id"); err != nil {
		return Envelope{}, err
	}
	if env.EventType, err = str(fields, "event_type", true); err != nil {
		return Envelope{}, err
	}
	raw, ok := fields["event_version"]
	if !ok {
		return Envelope{}, invalid("event_version is required")
	}
	if err := json.Unmarshal(raw, &env.EventVersion); err != nil || jsonfields.IsNull(raw) {
		return Envelope{}, invalid("event_version must be an integer")
	}
	if env.AggregateType, err = str(fields, "aggregate_type", true); err != nil {
		return Envelope{}, err
	}
	if env.AggregateID, err = idField(fields, "aggregate_id"); err != nil {
		return Envelope{}, err
	}
	if env.OccurredAt, err = timeField(fields, "occurred_at", true); err != nil {
		return Envelope{}, err
	}
	if _, ok := fields["trace_id"]; ok {
		if env.TraceID, err = str(fields, "trace_id", false); err != nil {
			return Envelope{}, err
		}
		if len(env.TraceID) > MaxIDLength {
			return Envelope{}, invalid("trace_id longer than %d bytes", MaxIDLength)
		}
	}
	p, ok := fields["payload"]
	if !ok {
		return Envelope{}, invalid("payload is required")
	}
	if _, err := object(p, "payload"); err != nil {
		return Envelope{}, err
	}
	env.Payload = bytes.TrimSpace(p)
	return env, nil
}

// DecodeEvent decodes body (Decode) and its payload for its event_type.
// Exactly one of the returned event's fields is set. An unknown event_type
// also wraps ErrUnknownEventType.
func DecodeEvent(body []byte) (Envelope, Event, error) {
	env, err := Decode(body)
	if err != nil {
		return Envelope{}, Event{}, err
	}
	ev, err := decodeEvent(env.EventType, env.EventVersion, env.Payload)
	if err != nil {
		return env, Event{}, err
	}
	return env, ev, nil
}

// Validate is the strict check `eventpipe publish` runs for domain-events:
// what Encode requires of an envelope, on a body.
func Validate(body []byte) error {
	env, err := Decode(body)
	if err != nil {
		return err
	}
	if err := strictObject(body, "body", envelopeFields...); err != nil {
		return err
	}
	fields, _ := object(body, "body")
	if s, _ := str(fields, "occurred_at", true); s != env.OccurredAt.UTC().Format(occurredAtLayout) {
		return invalid("occurred_at %q is not UTC with milliseconds (%s)", jsonfields.Truncate(s, 64), occurredAtLayout)
	}
	if _, ok := fields["trace_id"]; !ok {
		return invalid("trace_id is required")
	}
	return checkStrict(env)
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

// --- JSON helpers ---------------------------------------------------------

// object splits a JSON object into its fields; anything else is invalid.
func object(b []byte, what string) (map[string]json.RawMessage, error) {
	fields, err := jsonfields.Object(b, what)
	if err != nil {
		return nil, invalid("%s", err)
	}
	return fields, nil
}

func str(fields map[string]json.RawMessage, key string, required bool) (string, error) {
	s, err := jsonfields.String(fields, key, required)
	if err != nil {
		return "", invalid("%s", err)
	}
	return s, nil
}

func idField(fields map[string]json.RawMessage, key string) (string, error) {
	s, err := str(fields, key, true)
	if err != nil {
		return "", err
	}
	if len(s) > MaxIDLength {
		return "", invalid("%s longer than %d bytes", key, MaxIDLength)
	}
	return s, nil
}

func timeField(fields map[string]json.RawMessage, key string, required bool) (time.Time, error) {
	s, err := str(fields, key, required)
	if err != nil || s == "" {
		return time.Time{}, err
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, invalid("%s %q is not an RFC 3339 time", key, jsonfields.Truncate(s, 64))
	}
	return t.UTC(), nil
}

func numberField(fields map[string]json.RawMessage, key string) (float64, error) {
	raw, ok := fields[key]
	if !ok {
		return 0, invalid("%s is required", key)
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil || jsonfields.IsNull(raw) {
		return 0, invalid("%s must be a number", key)
	}
	return f, nil
}

// strictObject refuses keys other than allowed: our publishers are strict
// (eventpipe's rule: strict on publish, lenient on consume).
func strictObject(b []byte, what string, allowed ...string) error {
	fields, err := object(b, what)
	if err != nil {
		return err
	}
	if k, ok := jsonfields.Unknown(fields, allowed...); ok {
		return invalid("%s: unknown field %q", what, jsonfields.Truncate(k, 64))
	}
	return nil
}
