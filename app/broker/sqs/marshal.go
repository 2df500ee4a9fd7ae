package sqs

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill"
	wsqs "github.com/ThreeDotsLabs/watermill-aws/sqs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// ReceiveCountKey is the metadata key under which a received message carries
// SQS's ApproximateReceiveCount: 1 on the first delivery. It describes one
// delivery from one queue, so Marshaler does not send it on. The attempt
// number derived from it, metadata.AttemptKey (ApproximateReceiveCount − 1), is
// not sent on either.
const ReceiveCountKey = "sqs_approximate_receive_count"

// MaxMessageAttributes is SQS's limit on message attributes per message. The
// message UUID takes one of them.
const MaxMessageAttributes = 10

// maxMessageBytes is SQS's limit on one message and on one SendMessageBatch
// request: body plus every attribute's name, data type and value.
const maxMessageBytes = 1 << 20

// encodedNamePrefix marks an attribute name that carries a metadata key SQS
// would refuse as a name (spaces, non-ASCII, "AWS." prefix, ...), base64url
// encoded. Keys that are valid names travel as they are, so foreign consumers
// and SNS filter policies see requestId, eventType, x-trace-id unchanged.
const encodedNamePrefix = "_eventpipe.k."

// Marshaler is the default Marshaler and Unmarshaler. The body is the payload,
// as is: the specs' consumers read raw JSON bodies. Metadata travels as String
// message attributes and the UUID as watermill-aws's _watermill_message_uuid
// attribute, so messages interoperate with plain watermill-aws publishers and
// subscribers.
//
// SQS refuses an empty attribute value, so a key with an empty value is not
// sent; it reads back as "" all the same. The empty key is not sent either: no
// valid SQS name can carry it. A key SQS would refuse as a name, or one that
// is watermill-aws's UUID attribute name, is sent as an encoded name and
// decoded on receipt. A message without the UUID attribute (a foreign
// publisher) gets its SQS MessageId as UUID.
type Marshaler struct{}

var (
	_ wsqs.Marshaler   = Marshaler{}
	_ wsqs.Unmarshaler = Marshaler{}
)

// OverflowAttribute carries, as one JSON object, the metadata that does not
// fit SQS's ten message attributes beside the others (see Marshal).
const OverflowAttribute = "eventpipe-metadata"

// Marshal returns msg as an SQS message. Metadata beyond SQS's ten message
// attributes (the UUID takes one) is not refused: the keys a foreign SQS
// consumer is likeliest to read stay attributes — the spec's own keys before
// eventpipe's x-* ones, x-trace-id first among those, each group in name
// order — and the rest travel in OverflowAttribute as one JSON object, which
// Unmarshal merges back. The same metadata thus fits every broker.
func (Marshaler) Marshal(msg *message.Message) (*types.Message, error) {
	var keys []string
	for k, v := range msg.Metadata {
		if v == "" || k == "" || k == ReceiveCountKey || k == metadata.AttemptKey {
			continue
		}
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if ra, rb := attributeRank(a), attributeRank(b); ra != rb {
			return ra - rb
		}
		return strings.Compare(a, b)
	})
	direct := keys
	var overflow map[string]string
	if len(keys)+1 > MaxMessageAttributes {
		direct = keys[:MaxMessageAttributes-2] // the UUID and the overflow take two
		overflow = make(map[string]string, len(keys)-len(direct))
		for _, k := range keys[len(direct):] {
			overflow[k] = msg.Metadata[k]
		}
	}
	attrs := make(map[string]types.MessageAttributeValue, len(direct)+2)
	for _, k := range direct {
		attrs[attributeName(k)] = types.MessageAttributeValue{
			DataType:    aws.String(wsqs.AWSStringDataType),
			StringValue: aws.String(msg.Metadata[k]),
		}
	}
	if overflow != nil {
		packed, err := json.Marshal(overflow)
		if err != nil {
			return nil, fmt.Errorf("message %s: pack metadata: %w", msg.UUID, err)
		}
		attrs[OverflowAttribute] = types.MessageAttributeValue{
			DataType:    aws.String(wsqs.AWSStringDataType),
			StringValue: aws.String(string(packed)),
		}
	}
	if msg.UUID != "" {
		attrs[wsqs.UUIDAttribute] = types.MessageAttributeValue{
			DataType:    aws.String(wsqs.AWSStringDataType),
			StringValue: aws.String(msg.UUID),
		}
	}
	return &types.Message{
		Body:              aws.String(string(msg.Payload)),
		MessageAttributes: attrs,
	}, nil
}

// Unmarshal returns the message carried by m. It never fails: whatever a
// foreign publisher sent is delivered, and judging it is the codec's job.
// (watermill-aws's own unmarshaler panics on a UUID attribute without a
// string value.)
func (Marshaler) Unmarshal(m *types.Message) (*message.Message, error) {
	meta := make(message.Metadata, len(m.MessageAttributes))
	uuid, overflow := "", ""
	for name, v := range m.MessageAttributes {
		if name == wsqs.UUIDAttribute {
			// Only a string counts: a foreign publisher's odd value must not
			// become a garbled id.
			if aws.ToString(v.DataType) == wsqs.AWSStringDataType {
				uuid = aws.ToString(v.StringValue)
			}
			continue
		}
		value, ok := attributeValue(v)
		if !ok {
			continue
		}
		if name == OverflowAttribute {
			overflow = value
			continue
		}
		meta[metadataKey(name)] = value
	}
	if overflow != "" {
		var packed map[string]string
		// A foreign value that is not our JSON is kept as it is.
		if json.Unmarshal([]byte(overflow), &packed) == nil {
			for k, v := range packed {
				if _, direct := meta[k]; !direct {
					meta[k] = v
				}
			}
		} else {
			meta[OverflowAttribute] = overflow
		}
	}
	if uuid == "" {
		uuid = aws.ToString(m.MessageId)
	}
	if uuid == "" {
		// Not from SQS proper; still deliverable.
		uuid = watermill.NewUUID()
	}
	msg := message.NewMessage(uuid, []byte(aws.ToString(m.Body)))
	msg.Metadata = meta
	return msg, nil
}

func attributeValue(v types.MessageAttributeValue) (string, bool) {
	dataType := aws.ToString(v.DataType)
	// Custom types look like "String.json" or "Number.int".
	switch {
	case strings.HasPrefix(dataType, wsqs.AWSStringDataType), strings.HasPrefix(dataType, wsqs.AWSNumberDataType):
		if v.StringValue == nil {
			return "", false
		}
		return *v.StringValue, true
	case strings.HasPrefix(dataType, wsqs.AWSBinaryDataType):
		return string(v.BinaryValue), true
	}
	return "", false
}

// attributeName returns the SQS attribute name for a metadata key.
func attributeName(key string) string {
	if validAttributeName(key) && !strings.HasPrefix(key, encodedNamePrefix) && key != wsqs.UUIDAttribute {
		return key
	}
	return encodedNamePrefix + base64.RawURLEncoding.EncodeToString([]byte(key))
}

// metadataKey reverses attributeName. A name that only looks encoded is kept.
func metadataKey(name string) string {
	rest, ok := strings.CutPrefix(name, encodedNamePrefix)
	if !ok {
		return name
	}
	key, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return name
	}
	return string(key)
}

// validAttributeName applies SQS's rules for message attribute names: up to
// 256 of A-Z a-z 0-9 _ - ., no leading, trailing or doubled period, no "AWS."
// or "Amazon." prefix in any case. The emulator checks none of them.
func validAttributeName(name string) bool {
	if name == "" || len(name) > 256 || name[0] == '.' || name[len(name)-1] == '.' || strings.Contains(name, "..") {
		return false
	}
	lower := strings.ToLower(name)
	if strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon.") {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		allowed := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.'
		if !allowed {
			return false
		}
	}
	return true
}

// validSQSText reports whether s is valid UTF-8 made only of the characters
// SQS accepts in a body or string attribute: #x9 #xA #xD #x20-#xD7FF
// #xE000-#xFFFD #x10000-#x10FFFF.
func validSQSText(s string) (ok bool, offset int) {
	for i, r := range s {
		switch {
		case r == utf8.RuneError:
			if _, size := utf8.DecodeRuneInString(s[i:]); size <= 1 {
				return false, i
			}
		case r == 0x9 || r == 0xA || r == 0xD:
		case r < 0x20, r >= 0xD800 && r < 0xE000, r == 0xFFFE, r == 0xFFFF:
			return false, i
		}
	}
	return true, 0
}

// InvalidMessageError is returned by Publish for a message SQS would refuse.
// It is found before anything of the call is sent, so nothing was sent. For a
// message over SQS's size limit it wraps a *broker.PayloadTooLargeError.
type InvalidMessageError struct {
	MessageUUID string
	Reason      string
	Err         error
}

// Error names the message and what SQS would object to.
func (e *InvalidMessageError) Error() string {
	return fmt.Sprintf("message %s: %s", e.MessageUUID, e.Reason)
}

// Unwrap returns the underlying error, if any.
func (e *InvalidMessageError) Unwrap() error { return e.Err }

// checkMessage applies the SQS rules the emulator does not (it accepts more
// than 10 attributes, any attribute name and empty values), so that what
// passes here passes on real SQS too. It returns the size SQS counts.
func checkMessage(uuid string, m *types.Message) (int, error) {
	invalid := func(format string, args ...any) (int, error) {
		return 0, &InvalidMessageError{MessageUUID: uuid, Reason: fmt.Sprintf(format, args...)}
	}
	body := aws.ToString(m.Body)
	if body == "" {
		return invalid("empty payload: SQS requires a body of at least one character")
	}
	if ok, at := validSQSText(body); !ok {
		return invalid("payload has a character SQS refuses (or invalid UTF-8) at byte %d", at)
	}
	if n := len(m.MessageAttributes); n > MaxMessageAttributes {
		return invalid("%d message attributes (metadata keys with non-empty values, plus the UUID): SQS allows %d", n, MaxMessageAttributes)
	}
	size := len(body)
	for name, v := range m.MessageAttributes {
		if !validAttributeName(name) {
			return invalid("attribute name %q is not valid on SQS", name)
		}
		dataType := aws.ToString(v.DataType)
		if dataType == "" {
			return invalid("attribute %q has no data type", name)
		}
		size += len(name) + len(dataType)
		if strings.HasPrefix(dataType, wsqs.AWSBinaryDataType) {
			if len(v.BinaryValue) == 0 {
				return invalid("attribute %q: empty binary value", name)
			}
			size += len(v.BinaryValue)
			continue
		}
		value := aws.ToString(v.StringValue)
		if value == "" {
			return invalid("attribute %q: empty value (SQS refuses it; leave the key out)", name)
		}
		if ok, at := validSQSText(value); !ok {
			return invalid("attribute %q has a character SQS refuses (or invalid UTF-8) at byte %d", name, at)
		}
		size += len(value)
	}
	if size > maxMessageBytes {
		return 0, &InvalidMessageError{
			MessageUUID: uuid,
			Reason: fmt.Sprintf("body and attributes are %d bytes: SQS counts both against its %d-byte limit",
				size, maxMessageBytes),
			Err: &broker.PayloadTooLargeError{MessageUUID: uuid, Size: size},
		}
	}
	return size, nil
}

// attributeRank orders metadata keys for the ten SQS attributes: the spec's
// own keys (requestId, eventType, event_id…) first, then the trace id, then
// eventpipe's other x-* keys.
func attributeRank(k string) int {
	switch {
	case !strings.HasPrefix(k, "x-"):
		return 0
	case k == metadata.TraceIDKey:
		return 1
	default:
		return 2
	}
}
