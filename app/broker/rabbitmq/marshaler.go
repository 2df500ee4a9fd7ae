package rabbitmq

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventpipe/eventpipe/app/metadata"
)

// Metadata keys carried in AMQP message properties rather than in headers.
// The StackUp contract puts content type, encoding and correlation id in the
// properties, where foreign consumers and the management UI look for them.
const (
	// MetadataContentType is the AMQP content_type property, e.g.
	// "application/json".
	MetadataContentType = "content_type"
	// MetadataContentEncoding is the AMQP content_encoding property, e.g.
	// "utf-8".
	MetadataContentEncoding = "content_encoding"
	// MetadataCorrelationID is the AMQP correlation_id property: for a
	// callback, the id of the request it answers.
	MetadataCorrelationID = "correlation_id"
)

// Marshaler maps Watermill messages to AMQP and back. It wraps Watermill's
// DefaultMarshaler (persistent delivery, UUID in the _watermill_message_uuid
// header) and differs where the default would lose or block messages:
//
//   - Every header value becomes a string, whatever its AMQP type. The default
//     refuses any non-string header, and watermill-amqp's subscriber nacks
//     with requeue what it cannot unmarshal: one message carrying an x-death
//     table (which RabbitMQ adds on every dead-lettering) was redelivered
//     about 3,400 times a second and never reached a handler. See
//     HeaderString for the conversions.
//   - A message without the Watermill UUID header (a foreign publisher,
//     rabbitmqadmin) takes its UUID from the AMQP message_id property, else a
//     fresh one. The subscriber's counted copies carry that UUID as their
//     message_id (attempts.go), so it holds across retries; it is still not
//     an idempotency key, the envelope's own id is.
//   - Publishing writes x-attempt 0 and drops x-first-failure-at and
//     x-eventpipe-attempt: attempts are counted by the consuming adapter
//     (attempts.go), never by a publisher.
//   - Publishing sets message_id to the message UUID, and moves the
//     MetadataContentType, MetadataContentEncoding and MetadataCorrelationID
//     metadata into their AMQP properties; consuming moves them back. The
//     UUID travels only as message_id, not also in watermill's
//     _watermill_message_uuid header, which a peer would have to know of.
//   - The routing facts are the broker's: publishing drops the
//     metadata.ExchangeKey and metadata.RoutingKeyKey metadata (the routing
//     publisher's), and consuming sets them from the delivery's own exchange
//     and routing key — what a foreign publisher's message carries too, with
//     no header of ours. A header of those names from a peer is not trusted.
//     A delivery through the default exchange has no routing key in that
//     sense (its routing key is a queue name), so it gets neither. A copy
//     eventpipe republished (attempts.go) carries its original's in
//     headers, which are then taken.
//
// The zero value is ready to use.
type Marshaler struct{}

var _ wamqp.Marshaler = Marshaler{}

// propertyFields lists the metadata keys that travel as AMQP properties.
var propertyFields = []struct {
	key   string
	field func(*amqp.Publishing) *string
}{
	{MetadataContentType, func(p *amqp.Publishing) *string { return &p.ContentType }},
	{MetadataContentEncoding, func(p *amqp.Publishing) *string { return &p.ContentEncoding }},
	{MetadataCorrelationID, func(p *amqp.Publishing) *string { return &p.CorrelationId }},
}

// Marshal turns msg into a persistent AMQP publishing.
func (Marshaler) Marshal(msg *message.Message) (amqp.Publishing, error) {
	pub, err := wamqp.DefaultMarshaler{}.Marshal(msg)
	if err != nil {
		return amqp.Publishing{}, err
	}
	pub.MessageId = msg.UUID
	delete(pub.Headers, wamqp.DefaultMessageUUIDHeaderKey)
	// The broker's delivery tells the consumer where the message came
	// through (Unmarshal).
	delete(pub.Headers, metadata.ExchangeKey)
	delete(pub.Headers, metadata.RoutingKeyKey)
	// The attempt count and failure time are the broker's to tell (see
	// attempts.go); a new message starts at attempt 0 (StackUp §3).
	delete(pub.Headers, metadata.FirstFailureKey)
	delete(pub.Headers, headerOwnAttempt)
	pub.Headers[metadata.AttemptKey] = int32(0)
	for _, p := range propertyFields {
		if v, ok := msg.Metadata[p.key]; ok {
			*p.field(&pub) = v
			delete(pub.Headers, p.key)
		}
	}
	return pub, nil
}

// Unmarshal turns a delivery into a Watermill message. It never returns an
// error: a delivery that cannot be read would be nacked and redelivered
// forever.
//
// It reads what wamqp.DefaultMarshaler reads (the UUID header, every other
// header as metadata) straight into the message, every header rendered by
// HeaderString: the default takes string headers only, and a table of them
// first would cost a map and a boxed string per header on every delivery.
func (m Marshaler) Unmarshal(d amqp.Delivery) (*message.Message, error) {
	return m.unmarshal(&d), nil
}

// unmarshal is Unmarshal of a delivery the caller holds: the subscription
// passes its deliveries by reference, so that the goroutine handling one
// keeps a small stack (amqp.Delivery is some 300 bytes, and every copy of it
// on a new goroutine's stack made the runtime grow that stack: 5 % of the
// CPU time of a delivery).
func (Marshaler) unmarshal(d *amqp.Delivery) *message.Message {
	msg := message.NewMessage("", d.Body)
	for k, v := range d.Headers {
		if k == wamqp.DefaultMessageUUIDHeaderKey {
			msg.UUID = HeaderString(v)
			continue
		}
		msg.Metadata[k] = HeaderString(v)
	}
	if msg.UUID == "" {
		msg.UUID = d.MessageId
	}
	if msg.UUID == "" {
		msg.UUID = watermill.NewUUID()
	}
	setRouting(msg, d)
	props := amqp.Publishing{ContentType: d.ContentType, ContentEncoding: d.ContentEncoding, CorrelationId: d.CorrelationId}
	for _, p := range propertyFields {
		if v := *p.field(&props); v != "" {
			msg.Metadata.Set(p.key, v)
		}
	}
	return msg
}

// setRouting sets msg's exchange and routing key metadata from the delivery:
// the broker's own (see Marshaler), or on a copy eventpipe republished, its
// original's, which the copy carries in headers.
func setRouting(msg *message.Message, d *amqp.Delivery) {
	if _, own := d.Headers[headerOwnAttempt]; own {
		return // the copy's headers, already in msg.Metadata
	}
	delete(msg.Metadata, metadata.ExchangeKey)
	delete(msg.Metadata, metadata.RoutingKeyKey)
	if d.Exchange == "" {
		return
	}
	msg.Metadata.Set(metadata.ExchangeKey, d.Exchange)
	msg.Metadata.Set(metadata.RoutingKeyKey, d.RoutingKey)
}

// HeaderString renders an AMQP header value as a metadata string. It accepts
// every type amqp091-go decodes and falls back to fmt for anything else:
//
//   - strings as they are; nil (AMQP void) as "";
//   - booleans as "true"/"false"; integers and decimals in decimal notation;
//     floats in the shortest form that reads back exactly ("NaN", "+Inf");
//   - timestamps in RFC 3339, UTC;
//   - byte arrays as text when they are valid UTF-8, else standard base64;
//   - tables and arrays (x-death is an array of tables) as compact JSON, keys
//     sorted, with the same rules applied inside.
func HeaderString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case amqp.Table, map[string]any, []any:
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(jsonValue(v)); err != nil {
			// Unreachable: jsonValue yields only JSON-encodable values.
			return fmt.Sprint(v)
		}
		return strings.TrimSuffix(buf.String(), "\n")
	}
	if s, ok := scalarString(v); ok {
		return s
	}
	return fmt.Sprint(v)
}

// scalarString renders the non-container AMQP types.
func scalarString(v any) (string, bool) {
	switch v := v.(type) {
	case nil:
		return "", true
	case bool:
		return strconv.FormatBool(v), true
	case int:
		return strconv.FormatInt(int64(v), 10), true
	case int8:
		return strconv.FormatInt(int64(v), 10), true
	case int16:
		return strconv.FormatInt(int64(v), 10), true
	case int32:
		return strconv.FormatInt(int64(v), 10), true
	case int64:
		return strconv.FormatInt(v, 10), true
	case uint:
		return strconv.FormatUint(uint64(v), 10), true
	case uint8:
		return strconv.FormatUint(uint64(v), 10), true
	case uint16:
		return strconv.FormatUint(uint64(v), 10), true
	case uint32:
		return strconv.FormatUint(uint64(v), 10), true
	case uint64:
		return strconv.FormatUint(v, 10), true
	case float32:
		return formatFloat(float64(v), 32), true
	case float64:
		return formatFloat(v, 64), true
	case amqp.Decimal:
		return formatDecimal(v), true
	case time.Time:
		return v.UTC().Format(time.RFC3339Nano), true
	case []byte:
		if utf8.Valid(v) {
			return string(v), true
		}
		return base64.StdEncoding.EncodeToString(v), true
	}
	return "", false
}

// jsonValue maps a header value to what encoding/json can encode with the
// same conventions as HeaderString: numbers stay JSON numbers, everything
// else that is not a container becomes a JSON string.
func jsonValue(v any) any {
	switch v := v.(type) {
	case amqp.Table:
		return jsonObject(v)
	case map[string]any:
		return jsonObject(v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = jsonValue(e)
		}
		return out
	case nil:
		return nil
	case bool:
		return v
	case float32:
		if isFinite(float64(v)) {
			return json.Number(formatFloat(float64(v), 32))
		}
	case float64:
		if isFinite(v) {
			return json.Number(formatFloat(v, 64))
		}
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, amqp.Decimal:
		s, _ := scalarString(v)
		return json.Number(s)
	}
	return HeaderString(v)
}

func jsonObject(t map[string]any) map[string]any {
	out := make(map[string]any, len(t))
	for k, e := range t {
		out[k] = jsonValue(e)
	}
	return out
}

func isFinite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

func formatFloat(f float64, bits int) string {
	return strconv.FormatFloat(f, 'g', -1, bits)
}

// formatDecimal writes Value × 10^-Scale exactly, without going through a
// float.
func formatDecimal(d amqp.Decimal) string {
	v := int64(d.Value)
	sign := ""
	if v < 0 {
		sign, v = "-", -v
	}
	digits := strconv.FormatInt(v, 10)
	scale := int(d.Scale)
	if scale == 0 {
		return sign + digits
	}
	if len(digits) <= scale {
		digits = strings.Repeat("0", scale-len(digits)+1) + digits
	}
	return sign + digits[:len(digits)-scale] + "." + digits[len(digits)-scale:]
}
