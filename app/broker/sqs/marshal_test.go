package sqs_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/sqs"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// validName restates SQS's rules for attribute names, independently of the
// adapter's own check.
func validName(n string) bool {
	if n == "" || len(n) > 256 || strings.HasPrefix(n, ".") || strings.HasSuffix(n, ".") || strings.Contains(n, "..") {
		return false
	}
	l := strings.ToLower(n)
	if strings.HasPrefix(l, "aws.") || strings.HasPrefix(l, "amazon.") {
		return false
	}
	return strings.Trim(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") == ""
}

func TestMarshalerRoundTrip(t *testing.T) {
	t.Parallel()
	keys := []string{
		"requestId", "x-trace-id", "event.type", // valid SQS names: sent as they are
		"spaces in name", "메시지", "AWS.reserved", "amazon.too", ".lead", "trail.", "a..b", "tab\there",
		"_eventpipe.k.looks-encoded", // a key that looks encoded must survive too
	}
	msg := message.NewMessage(watermill.NewUUID(), []byte(`{"a":1}`))
	for _, k := range keys {
		msg.Metadata.Set(k, "v:"+k)
	}
	msg.Metadata.Set("empty", "")
	msg.Metadata.Set(sqs.ReceiveCountKey, "4")
	msg.Metadata.Set(metadata.AttemptKey, "3")

	m, err := sqs.Marshaler{}.Marshal(msg)
	require.NoError(t, err)
	assert.Equal(t, `{"a":1}`, aws.ToString(m.Body))
	assert.Len(t, m.MessageAttributes, sqs.MaxMessageAttributes, "8 keys, the UUID, and the rest packed; empty values, the receive count and the attempt are not sent")
	for name, v := range m.MessageAttributes {
		assert.True(t, validName(name), "attribute name %q is not valid on SQS", name)
		assert.Equal(t, "String", aws.ToString(v.DataType))
		assert.NotEmpty(t, aws.ToString(v.StringValue))
	}
	for _, k := range []string{"requestId", "event.type"} {
		assert.Contains(t, m.MessageAttributes, k, "a valid name is not encoded")
	}

	m.MessageId = aws.String("sqs-id")
	got, err := sqs.Marshaler{}.Unmarshal(m)
	require.NoError(t, err)
	assert.Equal(t, msg.UUID, got.UUID)
	assert.Equal(t, string(msg.Payload), string(got.Payload))
	for _, k := range keys {
		assert.Equal(t, "v:"+k, got.Metadata.Get(k), k)
	}
	assert.Equal(t, "", got.Metadata.Get("empty"))
	assert.Len(t, got.Metadata, len(keys))
}

func TestUnmarshalForeign(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		in       types.Message
		wantUUID string
		wantMeta message.Metadata
	}{
		"no attributes": {
			in:       types.Message{MessageId: aws.String("mid"), Body: aws.String("b")},
			wantUUID: "mid",
			wantMeta: message.Metadata{},
		},
		"custom data types and a value-less attribute": {
			in: types.Message{MessageId: aws.String("mid"), Body: aws.String("b"), MessageAttributes: map[string]types.MessageAttributeValue{
				"n":       {DataType: aws.String("Number.int"), StringValue: aws.String("7")},
				"j":       {DataType: aws.String("String.json"), StringValue: aws.String("{}")},
				"broken":  {DataType: aws.String("String")},
				"unknown": {DataType: aws.String("Weird"), StringValue: aws.String("x")},
				"notype":  {StringValue: aws.String("x")},
			}},
			wantUUID: "mid",
			wantMeta: message.Metadata{"n": "7", "j": "{}"},
		},
		"UUID attribute of the wrong type": {
			in: types.Message{MessageId: aws.String("mid"), Body: aws.String("b"), MessageAttributes: map[string]types.MessageAttributeValue{
				"_watermill_message_uuid": {DataType: aws.String("Binary"), BinaryValue: []byte{1}},
			}},
			wantUUID: "mid",
			wantMeta: message.Metadata{},
		},
		"bad encoded name kept as is": {
			in: types.Message{MessageId: aws.String("mid"), Body: aws.String("b"), MessageAttributes: map[string]types.MessageAttributeValue{
				"_eventpipe.k.!!": {DataType: aws.String("String"), StringValue: aws.String("x")},
			}},
			wantUUID: "mid",
			wantMeta: message.Metadata{"_eventpipe.k.!!": "x"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := sqs.Marshaler{}.Unmarshal(&tc.in)
			require.NoError(t, err)
			assert.Equal(t, tc.wantUUID, got.UUID)
			assert.Equal(t, tc.wantMeta, got.Metadata)
			assert.Equal(t, "b", string(got.Payload))
		})
	}
}

// Metadata beyond ten attributes travels packed and comes back whole; the
// spec's own keys and the trace id stay real attributes.
func TestMarshalPacksMetadataBeyondTenAttributes(t *testing.T) {
	t.Parallel()
	msg := message.NewMessage("m-1", []byte(`{}`))
	msg.Metadata.Set("requestId", "r-1")
	msg.Metadata.Set("eventType", "interview.completed")
	msg.Metadata.Set("x-trace-id", "t-1")
	for i := range 12 {
		msg.Metadata.Set(fmt.Sprintf("x-extra-%02d", i), fmt.Sprintf("v%d", i))
	}
	m, err := sqs.Marshaler{}.Marshal(msg)
	require.NoError(t, err)
	assert.Len(t, m.MessageAttributes, sqs.MaxMessageAttributes)
	for _, k := range []string{"requestId", "eventType", "x-trace-id", sqs.OverflowAttribute} {
		assert.Contains(t, m.MessageAttributes, k)
	}
	got, err := sqs.Marshaler{}.Unmarshal(m)
	require.NoError(t, err)
	assert.Equal(t, msg.Metadata, got.Metadata)

	few := message.NewMessage("m-2", []byte(`{}`))
	few.Metadata.Set("requestId", "r-2")
	m, err = sqs.Marshaler{}.Marshal(few)
	require.NoError(t, err)
	assert.NotContains(t, m.MessageAttributes, sqs.OverflowAttribute, "packed only when needed")
}
