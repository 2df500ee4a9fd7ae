package sqs

import (
	"strconv"
	"testing"
	"time"

	wsqs "github.com/ThreeDotsLabs/watermill-aws/sqs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/metadata"
)

// FuzzUnmarshal feeds Unmarshal, and the delivery metadata dispatch adds,
// whatever a foreign publisher could put in an SQS message. Properties: it
// never fails or panics; the message has an id and the body as payload; every
// attribute with a usable value is in the metadata; the delivery keys are
// SQS's alone; and what was received marshals to valid SQS attribute names
// and reads back the same. Seeds are in testdata/fuzz/FuzzUnmarshal, in the
// form decodeAttrs reads; first-receive-after-year-9999 is what the fuzzer
// found (a first failure time RFC 3339 cannot write), awkward-keys two keys
// Marshal could not send (the empty key, and the UUID attribute's name).
func FuzzUnmarshal(f *testing.F) {
	f.Fuzz(func(t *testing.T, body, messageID string, attrs []byte, receiveCount, firstReceive string) {
		in := &types.Message{Body: aws.String(body), MessageAttributes: decodeAttrs(attrs)}
		if messageID != "" {
			in.MessageId = aws.String(messageID)
		}
		msg, err := Marshaler{}.Unmarshal(in)
		require.NoError(t, err)
		require.NotNil(t, msg)
		require.NotEmpty(t, msg.UUID)
		require.Equal(t, body, string(msg.Payload))
		require.NotNil(t, msg.Metadata)
		require.LessOrEqual(t, len(msg.Metadata), len(in.MessageAttributes))
		for name, v := range in.MessageAttributes {
			if _, ok := attributeValue(v); ok && name != wsqs.UUIDAttribute {
				require.Contains(t, msg.Metadata, metadataKey(name), "attribute %q lost", name)
			}
		}

		sys := map[string]string{}
		if receiveCount != "" {
			sys[string(types.MessageSystemAttributeNameApproximateReceiveCount)] = receiveCount
		}
		if firstReceive != "" {
			sys[string(types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp)] = firstReceive
		}
		setDeliveryMetadata(msg.Metadata, sys)
		attempt, err := strconv.Atoi(msg.Metadata.Get(metadata.AttemptKey))
		require.NoError(t, err)
		require.GreaterOrEqual(t, attempt, 0)
		require.NotContains(t, msg.Metadata, metadata.NackDelayKey, "a sender's nack delay is not delivered")
		if count, ok := sys[string(types.MessageSystemAttributeNameApproximateReceiveCount)]; ok {
			require.Equal(t, count, msg.Metadata[ReceiveCountKey])
		} else {
			require.NotContains(t, msg.Metadata, ReceiveCountKey)
		}
		if first, ok := msg.Metadata[metadata.FirstFailureKey]; ok {
			require.Positive(t, attempt, "first failure on a first delivery")
			at, err := time.Parse(time.RFC3339Nano, first)
			require.NoError(t, err)
			require.Equal(t, time.UTC, at.Location())
			require.Equal(t, at.Format(time.RFC3339Nano), first)
		} else if attempt > 0 {
			ms, err := strconv.ParseInt(firstReceive, 10, 64)
			usable := err == nil && ms > 0 && time.UnixMilli(ms).UTC().Year() <= 9999
			require.False(t, usable, "valid first receive %q not used", firstReceive)
		}

		// What was received can be sent on, and reads back the same, but for
		// what Marshal leaves behind: empty values and SQS's delivery counts.
		out, err := Marshaler{}.Marshal(msg)
		require.NoError(t, err)
		for name := range out.MessageAttributes {
			require.True(t, validAttributeName(name), "attribute name %q is not valid on SQS", name)
		}
		out.MessageId = aws.String("other-id")
		back, err := Marshaler{}.Unmarshal(out)
		require.NoError(t, err)
		require.Equal(t, msg.UUID, back.UUID)
		require.Equal(t, string(msg.Payload), string(back.Payload))
		want := map[string]string{}
		for k, v := range msg.Metadata {
			if v != "" && k != "" && k != metadata.AttemptKey && k != ReceiveCountKey {
				want[k] = v
			}
		}
		require.Equal(t, want, map[string]string(back.Metadata))
	})
}

// decodeAttrs reads message attributes from fuzz bytes: repeated (name,
// data type, flags, [string value], [binary value]), each string or byte
// value a length byte and that many bytes; flags bit 0 says a string value
// follows, bit 1 a binary value. It reads what it can, so every input is a
// set of attributes.
func decodeAttrs(data []byte) map[string]types.MessageAttributeValue {
	attrs := map[string]types.MessageAttributeValue{}
	next := func() []byte {
		if len(data) == 0 {
			return nil
		}
		n := min(int(data[0]), len(data)-1)
		v := data[1 : 1+n]
		data = data[1+n:]
		return v
	}
	for len(data) > 0 {
		name := string(next())
		var v types.MessageAttributeValue
		if dt := next(); dt != nil {
			v.DataType = aws.String(string(dt))
		}
		var flags byte
		if len(data) > 0 {
			flags, data = data[0], data[1:]
		}
		if flags&1 != 0 {
			v.StringValue = aws.String(string(next()))
		}
		if flags&2 != 0 {
			v.BinaryValue = append([]byte{}, next()...)
		}
		attrs[name] = v
	}
	return attrs
}

// A metadata key named like watermill-aws's UUID attribute must not be taken
// for the UUID, nor overwrite it; the empty key is not sent (no SQS name can
// carry it).
func TestMarshalAwkwardKeys(t *testing.T) {
	t.Parallel()
	msg := message.NewMessage("the-uuid", []byte("b"))
	msg.Metadata.Set(wsqs.UUIDAttribute, "not-the-uuid")
	msg.Metadata.Set("", "empty key")
	out, err := Marshaler{}.Marshal(msg)
	require.NoError(t, err)
	for name := range out.MessageAttributes {
		require.True(t, validAttributeName(name), name)
	}
	back, err := Marshaler{}.Unmarshal(out)
	require.NoError(t, err)
	require.Equal(t, "the-uuid", back.UUID)
	require.Equal(t, message.Metadata{wsqs.UUIDAttribute: "not-the-uuid"}, back.Metadata)
}
