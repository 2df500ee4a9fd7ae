// Package envelope is the StackUp wire format (the StackUp RabbitMQ messaging
// contract, §3): every message is one JSON envelope — messageId, messageType,
// version, traceId, publishedAt, publisher, payload, context — and carries
// the same facts again as transport properties (AMQP message_id,
// correlation_id, content_type, content_encoding, headers x-trace-id and
// x-attempt; message attributes on SQS; metadata on the other brokers).
//
// Decoding is lenient and encoding strict (eventpipe's rule: strict on
// publish, lenient on consume): Decode ignores fields it does not know (§7)
// and keeps nothing of them, so they are never logged, stored or forwarded;
// DecodeStrict and Marshal refuse unknown and missing fields, so our own
// publishers cannot put a secret (§5.2) or a typo on the wire.
package envelope

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/schemas"
)

// Metadata keys the envelope's transport properties travel under. On
// RabbitMQ the adapter's marshaler moves the first three into the AMQP
// properties of the same name (rabbitmq.MetadataContentType, …; pinned by a
// test), elsewhere they are plain metadata / message attributes. They are
// spelled here because handlers never import a broker adapter.
const (
	ContentTypeKey     = "content_type"
	ContentEncodingKey = "content_encoding"
	CorrelationIDKey   = "correlation_id"
)

// The §3 property values.
const (
	ContentType     = "application/json"
	ContentEncoding = "utf-8"
)

// Publishers named by §3.
const (
	PublisherCore = "core-server"
	PublisherAI   = "ai-server"
)

// MaxIDLength bounds messageId and traceId: long enough for any UUID or W3C
// id, short enough that an inbox key or a log line stays small.
const MaxIDLength = 200

// Context is the envelope's context object. Only the ids the catalog names
// are kept; anything else in it is dropped on decode.
type Context struct {
	// UserID is recommended on every message (authorisation, logging), and
	// required on realtime.user.notify.
	UserID *int64 `json:"userId,omitempty"`
	// SessionID is required on session-related messages (§3) and on
	// realtime.session.notify (its routing key).
	SessionID *int64 `json:"sessionId,omitempty"`
	// DocumentID is required on realtime.document.notify (§5.13).
	DocumentID *int64 `json:"documentId,omitempty"`
}

// Envelope is one StackUp message (§3). Payload is the raw payload object;
// package catalog decodes it by MessageType and Version.
type Envelope struct {
	MessageID   string          `json:"messageId"`
	MessageType string          `json:"messageType"`
	Version     string          `json:"version"`
	TraceID     string          `json:"traceId"`
	PublishedAt string          `json:"publishedAt"`
	Publisher   string          `json:"publisher"`
	Payload     json.RawMessage `json:"payload"`
	Context     Context         `json:"context"`
}

// Error is a decode or validation failure: the message is malformed, and
// retrying cannot help (§6 "메시지 파싱 실패" → DLQ at once). It is
// classified failure.Permanent.
type Error struct {
	Reason string
}

// Error implements error.
func (e *Error) Error() string { return "stackup envelope: " + e.Reason }

func invalid(format string, args ...any) error {
	return failure.AsPermanent(&Error{Reason: fmt.Sprintf(format, args...)})
}

// Decode reads an envelope leniently: the body is checked against the
// envelope's lenient schema (section 3's required fields, their types and
// forms; unknown fields of the envelope and of its context ignored), then
// decoded, keeping nothing of the unknown fields. Every error is permanent
// and names the field at fault.
func Decode(data []byte) (Envelope, error) { return decode(data, schemas.Lenient) }

// DecodeStrict reads an envelope the way our publishers must write it:
// checked against the strict schema, so unknown fields in the envelope or its
// context, or trailing data, are errors besides everything Decode checks.
// The payload is checked by package catalog.
func DecodeStrict(data []byte) (Envelope, error) { return decode(data, schemas.Strict) }

func decode(data []byte, mode schemas.Mode) (Envelope, error) {
	if err := check(data, mode); err != nil {
		return Envelope{}, err
	}
	var e Envelope
	if err := json.Unmarshal(data, &e); err != nil {
		return Envelope{}, invalid("decode: %v", err)
	}
	return e, nil
}

// Schema returns the compiled schema of the envelope (the StackUp
// catalog's envelope.json), compiled once.
func Schema() (schemas.Message, error) {
	cat, err := schemas.Default()
	if err != nil {
		return schemas.Message{}, err
	}
	m, ok := cat.Part("stackup", "envelope.json")
	if !ok {
		return schemas.Message{}, errors.New("the stackup catalog has no envelope.json")
	}
	return m, nil
}

func check(data []byte, mode schemas.Mode) error {
	m, err := Schema()
	if err != nil {
		return invalid("schema: %v", err)
	}
	if err := m.Check(data, mode); err != nil {
		return invalid("%v", err)
	}
	return nil
}

// Validate checks e against the envelope's schema (section 3): messageId
// non-empty (not necessarily a UUID — the section 9 smoke message uses
// "smoke-1"), messageType, version, traceId, publishedAt (RFC 3339),
// publisher, and a payload that is a JSON object.
func (e Envelope) Validate() error {
	data, err := json.Marshal(e)
	if err != nil {
		return invalid("encode: %v", err)
	}
	return check(data, schemas.Lenient)
}

// RoutingKey returns the routing key msg was published with
// (metadata.RoutingKeyKey: on RabbitMQ the delivery's own, whoever published
// it; on the other brokers the routing publisher's), or "" when it carries
// none — a message published straight to a queue.
func RoutingKey(msg *message.Message) string {
	return msg.Metadata.Get(metadata.RoutingKeyKey)
}

// CheckRoutingKey enforces §3 "messageType: routing key와 동일": a message
// whose routing key is known must carry that key as its messageType. Without
// a routing key the message is taken by its own messageType (the consumer
// still checks that its queue handles that type).
func (e Envelope) CheckRoutingKey(msg *message.Message) error {
	if rk := RoutingKey(msg); rk != "" && rk != e.MessageType {
		return invalid("messageType %q differs from the routing key %q", e.MessageType, rk)
	}
	return nil
}

// TraceIDOf returns the envelope's traceId without validating anything
// else, or "": route.Route.TraceID for messages that arrive without an
// x-trace-id header (a foreign publisher's). It never fails.
func TraceIDOf(msg *message.Message) string {
	var probe struct {
		TraceID string `json:"traceId"`
	}
	if json.Unmarshal(msg.Payload, &probe) != nil || len(probe.TraceID) > MaxIDLength {
		return ""
	}
	return probe.TraceID
}

// NewID returns a new messageId: a UUID v4 (§3).
func NewID() string { return uuid.NewString() }

// Now formats t the way publishedAt is written: RFC 3339, UTC, milliseconds.
func Now(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// Marshal encodes e and returns the message to publish: its UUID is the
// messageId (AMQP message_id), its metadata carries content_type,
// content_encoding, x-trace-id = traceId and, for a callback, correlationID
// (the request's messageId) as correlation_id. The envelope must be valid;
// its payload is checked by package catalog, which calls Marshal. The
// message carries ctx, so publishing it continues the handler's span.
func Marshal(ctx context.Context, e Envelope, correlationID string) (*message.Message, error) {
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("marshal %s: %w", e.MessageType, err)
	}
	body, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("marshal %s: %w", e.MessageType, err)
	}
	msg := message.NewMessage(e.MessageID, body)
	msg.SetContext(ctx)
	msg.Metadata.Set(ContentTypeKey, ContentType)
	msg.Metadata.Set(ContentEncodingKey, ContentEncoding)
	msg.Metadata.Set(metadata.TraceIDKey, e.TraceID)
	if correlationID != "" {
		msg.Metadata.Set(CorrelationIDKey, correlationID)
	}
	return msg, nil
}
