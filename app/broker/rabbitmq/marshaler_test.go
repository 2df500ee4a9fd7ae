package rabbitmq_test

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/rabbitmq"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// x-death as RabbitMQ writes it when it dead-letters a message.
var xDeath = []any{amqp.Table{
	"count":        int64(1),
	"exchange":     "",
	"queue":        "orders",
	"reason":       "rejected",
	"routing-keys": []any{"orders"},
	"time":         time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
}}

// The reason this marshaler exists: Watermill's default refuses every
// non-string header, and its subscriber nacks with requeue what it cannot
// unmarshal, so such a message would be redelivered forever.
func TestDefaultMarshalerRejectsNonStringHeaders(t *testing.T) {
	t.Parallel()
	for name, v := range map[string]any{
		"x-death":          xDeath,
		"x-delivery-count": int64(2),
		"flag":             true,
		"bytes":            []byte("b"),
	} {
		_, err := wamqp.DefaultMarshaler{}.Unmarshal(amqp.Delivery{Headers: amqp.Table{name: v}})
		assert.Error(t, err, name)
	}
}

func TestHeaderString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   any
		want string
	}{
		{"string", "plain", "plain"},
		{"void", nil, ""},
		{"bool", true, "true"},
		{"int8", int8(-8), "-8"},
		{"uint8", uint8(200), "200"},
		{"int16", int16(-16), "-16"},
		{"uint16", uint16(65535), "65535"},
		{"int32", int32(-32), "-32"},
		{"uint32", uint32(4294967295), "4294967295"},
		{"int64 x-delivery-count", int64(3), "3"},
		{"int", 7, "7"},
		{"float32 reads back exactly", float32(0.1), "0.1"},
		{"float64", 1.5e300, "1.5e+300"},
		{"NaN", math.NaN(), "NaN"},
		{"infinity", math.Inf(-1), "-Inf"},
		{"decimal", amqp.Decimal{Scale: 2, Value: 12345}, "123.45"},
		{"small negative decimal", amqp.Decimal{Scale: 3, Value: -5}, "-0.005"},
		{"decimal without scale", amqp.Decimal{Value: 42}, "42"},
		{"timestamp in UTC", time.Date(2026, 4, 27, 15, 0, 0, 0, time.FixedZone("KST", 9*3600)), "2026-04-27T06:00:00Z"},
		{"text bytes", []byte("trace-1"), "trace-1"},
		{"binary bytes as base64", []byte{0xff, 0x00, 0xfe}, "/wD+"},
		{"empty table", amqp.Table{}, "{}"},
		{"empty array", []any{}, "[]"},
		{"x-death", xDeath, `[{"count":1,"exchange":"","queue":"orders","reason":"rejected","routing-keys":["orders"],"time":"2026-11-30T12:00:00Z"}]`},
		{"nested table, keys sorted, html unescaped", amqp.Table{
			"z": amqp.Table{"deep": []any{int32(1), nil, false, "<&>"}},
			"a": amqp.Decimal{Scale: 1, Value: 5},
		}, `{"a":0.5,"z":{"deep":[1,null,false,"<&>"]}}`},
		{"non-finite floats inside JSON", []any{math.NaN(), math.Inf(1), float32(2.5)}, `["NaN","+Inf",2.5]`},
		{"bytes inside JSON", []any{[]byte("txt"), []byte{0xff}}, `["txt","/w=="]`},
		{"unknown type", struct{ A int }{1}, "{1}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tc.want, rabbitmq.HeaderString(tc.in))
		})
	}
}

func TestUnmarshal(t *testing.T) {
	t.Parallel()
	const ourUUID = "0b5e8c3c-7d6f-4a8e-9d2a-1f0e6c1b2a3d"
	for _, tc := range []struct {
		name     string
		in       amqp.Delivery
		wantUUID string // "" means a fresh UUID
		wantMeta map[string]string
	}{
		{
			name:     "ours: UUID from the Watermill header",
			in:       amqp.Delivery{MessageId: ourUUID, Headers: amqp.Table{wamqp.DefaultMessageUUIDHeaderKey: ourUUID, "k": "v"}},
			wantUUID: ourUUID,
			wantMeta: map[string]string{"k": "v"},
		},
		{
			name:     "foreign with message_id",
			in:       amqp.Delivery{MessageId: "smoke-1"},
			wantUUID: "smoke-1",
			wantMeta: map[string]string{},
		},
		{
			name:     "rabbitmqadmin: no properties, no headers",
			in:       amqp.Delivery{Body: []byte("{}")},
			wantMeta: map[string]string{},
		},
		{
			name:     "non-string Watermill header",
			in:       amqp.Delivery{Headers: amqp.Table{wamqp.DefaultMessageUUIDHeaderKey: []byte(ourUUID)}},
			wantUUID: ourUUID,
			wantMeta: map[string]string{},
		},
		{
			name: "typed headers and properties",
			in: amqp.Delivery{
				MessageId:       "m-1",
				ContentType:     "application/json",
				ContentEncoding: "utf-8",
				CorrelationId:   "request-1",
				Headers:         amqp.Table{"x-death": xDeath, "x-delivery-count": int64(4), "x-first-death-reason": "rejected"},
			},
			wantUUID: "m-1",
			wantMeta: map[string]string{
				"x-death":                        rabbitmq.HeaderString(xDeath),
				"x-delivery-count":               "4",
				"x-first-death-reason":           "rejected",
				rabbitmq.MetadataContentType:     "application/json",
				rabbitmq.MetadataContentEncoding: "utf-8",
				rabbitmq.MetadataCorrelationID:   "request-1",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			msg, err := rabbitmq.Marshaler{}.Unmarshal(tc.in)
			require.NoError(t, err)
			if tc.wantUUID == "" {
				_, err := uuid.Parse(msg.UUID)
				assert.NoError(t, err, "fresh UUID %q", msg.UUID)
			} else {
				assert.Equal(t, tc.wantUUID, msg.UUID)
			}
			assert.Equal(t, tc.wantMeta, map[string]string(msg.Metadata))
			assert.Equal(t, string(tc.in.Body), string(msg.Payload))
		})
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	t.Parallel()
	msg := message.NewMessage(watermill.NewUUID(), []byte(`{"a":1}`))
	msg.Metadata.Set(rabbitmq.MetadataContentType, "application/json")
	msg.Metadata.Set(rabbitmq.MetadataCorrelationID, "c-1")
	msg.Metadata.Set("x-trace-id", "t-1")

	pub, err := rabbitmq.Marshaler{}.Marshal(msg)
	require.NoError(t, err)
	assert.Equal(t, msg.UUID, pub.MessageId)
	assert.Equal(t, "application/json", pub.ContentType)
	assert.Equal(t, "c-1", pub.CorrelationId)
	assert.Equal(t, amqp.Persistent, pub.DeliveryMode)
	assert.Equal(t, amqp.Table{"x-trace-id": "t-1", "x-attempt": int32(0)}, pub.Headers,
		"headers.x-attempt is an integer, 0 on a new message (StackUp §3); the UUID travels as message_id only")

	got, err := rabbitmq.Marshaler{}.Unmarshal(amqp.Delivery{
		Headers: pub.Headers, Body: pub.Body, MessageId: pub.MessageId,
		ContentType: pub.ContentType, CorrelationId: pub.CorrelationId,
	})
	require.NoError(t, err)
	assert.Equal(t, msg.UUID, got.UUID)
	msg.Metadata.Set("x-attempt", "0")
	assert.Equal(t, msg.Metadata, got.Metadata)
	assert.Equal(t, msg.Payload, got.Payload)
}

// The routing facts are the broker's: a message's exchange and routing key
// metadata are not published as headers, and on delivery they come from the
// delivery itself — a peer's headers of those names are not believed. A
// delivery through the default exchange has none (its routing key is a queue
// name); a counted copy of eventpipe's carries its original's.
func TestRoutingFactsAreTheDeliverys(t *testing.T) {
	t.Parallel()
	msg := message.NewMessage(watermill.NewUUID(), nil)
	msg.Metadata.Set(metadata.ExchangeKey, "stackup.core-to-ai")
	msg.Metadata.Set(metadata.RoutingKeyKey, "analyze.resume")
	pub, err := rabbitmq.Marshaler{}.Marshal(msg)
	require.NoError(t, err)
	assert.NotContains(t, pub.Headers, metadata.ExchangeKey)
	assert.NotContains(t, pub.Headers, metadata.RoutingKeyKey)

	forged := amqp.Table{metadata.ExchangeKey: "x", metadata.RoutingKeyKey: "analyze.web"}
	for name, tc := range map[string]struct {
		d                 amqp.Delivery
		exchange, key     string
		hasExchange, hasK bool
	}{
		"through an exchange": {d: amqp.Delivery{Exchange: "stackup.core-to-ai", RoutingKey: "analyze.resume", Headers: forged},
			exchange: "stackup.core-to-ai", key: "analyze.resume", hasExchange: true, hasK: true},
		"through the default exchange": {d: amqp.Delivery{Exchange: "", RoutingKey: "ai.analyze.resume", Headers: forged}},
		"a counted copy": {d: amqp.Delivery{Exchange: "", RoutingKey: "ai.analyze.resume", Headers: amqp.Table{
			"x-eventpipe-attempt": int32(1), metadata.ExchangeKey: "stackup.core-to-ai", metadata.RoutingKeyKey: "analyze.resume"}},
			exchange: "stackup.core-to-ai", key: "analyze.resume", hasExchange: true, hasK: true},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := rabbitmq.Marshaler{}.Unmarshal(tc.d)
			require.NoError(t, err)
			x, okX := got.Metadata[metadata.ExchangeKey]
			k, okK := got.Metadata[metadata.RoutingKeyKey]
			assert.Equal(t, tc.hasExchange, okX)
			assert.Equal(t, tc.hasK, okK)
			assert.Equal(t, tc.exchange, x)
			assert.Equal(t, tc.key, k)
		})
	}
}

// eventpipe's own count travels only on the copies the adapter republishes:
// a message published with that metadata (a consumed copy handed on, or a
// forgery) starts at attempt 0 like any other.
func TestMarshalDropsEventpipesCount(t *testing.T) {
	t.Parallel()
	msg := message.NewMessage(watermill.NewUUID(), nil)
	msg.Metadata.Set("x-eventpipe-attempt", "5")
	msg.Metadata.Set(metadata.AttemptKey, "5")
	pub, err := rabbitmq.Marshaler{}.Marshal(msg)
	require.NoError(t, err)
	assert.NotContains(t, pub.Headers, "x-eventpipe-attempt")
	assert.Equal(t, int32(0), pub.Headers[metadata.AttemptKey])
}

// FuzzUnmarshal feeds the marshaler header tables of every AMQP field type,
// nested at random, decoded from the fuzzer's bytes (see decodeTable). Seeds
// are in testdata/fuzz/FuzzUnmarshal. Whatever the headers, the message is
// delivered: no error, no panic, a UUID, every header kept as a string, and
// containers as valid JSON.
func FuzzUnmarshal(f *testing.F) {
	f.Fuzz(func(t *testing.T, table []byte, messageID string) {
		headers := decodeTable(table)
		msg, err := rabbitmq.Marshaler{}.Unmarshal(amqp.Delivery{Headers: headers, MessageId: messageID, Body: table})
		require.NoError(t, err)
		require.NotNil(t, msg)
		require.NotEmpty(t, msg.UUID)
		for k, v := range headers {
			if k == wamqp.DefaultMessageUUIDHeaderKey || k == metadata.ExchangeKey || k == metadata.RoutingKeyKey {
				continue // the UUID, and the broker's routing facts (setRouting)
			}
			got, ok := msg.Metadata[k]
			require.True(t, ok, "header %q lost", k)
			switch v.(type) {
			case amqp.Table, []any:
				require.True(t, json.Valid([]byte(got)), "header %q: %q is not JSON", k, got)
			}
			require.Equal(t, got, rabbitmq.HeaderString(v), "header %q renders the same twice", k)
		}
		// What we consumed can be published again.
		pub, err := rabbitmq.Marshaler{}.Marshal(msg)
		require.NoError(t, err)
		for k, v := range pub.Headers {
			if k == metadata.AttemptKey {
				require.Equal(t, int32(0), v, "a publish starts at attempt 0")
				continue
			}
			_, isString := v.(string)
			require.True(t, isString, "header %q", k)
		}
	})
}

// decodeTable reads a header table from fuzz bytes in a compact form of the
// AMQP field-table encoding: repeated (key length byte, key, field), where a
// field is an AMQP type tag and its value, strings and byte arrays with a
// one-byte length, arrays and tables with a one-byte element count. It reads
// what it can and stops at the end of the input, so every input is a table.
func decodeTable(data []byte) amqp.Table {
	r := &fuzzReader{data: data}
	t := amqp.Table{}
	for !r.empty() {
		key := r.str()
		t[key] = r.field(0)
	}
	return t
}

type fuzzReader struct{ data []byte }

func (r *fuzzReader) empty() bool { return len(r.data) == 0 }

func (r *fuzzReader) take(n int) []byte {
	if n > len(r.data) {
		n = len(r.data)
	}
	b := r.data[:n]
	r.data = r.data[n:]
	return b
}

func (r *fuzzReader) byte() byte {
	b := r.take(1)
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

func (r *fuzzReader) uint(n int) uint64 {
	var buf [8]byte
	copy(buf[8-n:], r.take(n))
	return binary.BigEndian.Uint64(buf[:])
}

func (r *fuzzReader) str() string { return string(r.take(int(r.byte()))) }

func (r *fuzzReader) field(depth int) any {
	tag := r.byte()
	if depth > 8 && (tag == 'A' || tag == 'F') {
		tag = 'V'
	}
	switch tag {
	case 't':
		return r.byte() != 0
	case 'b':
		return int8(r.byte())
	case 'B':
		return r.byte()
	case 's':
		return int16(r.uint(2))
	case 'u':
		return uint16(r.uint(2))
	case 'I':
		return int32(r.uint(4))
	case 'i':
		return uint32(r.uint(4))
	case 'l':
		return int64(r.uint(8))
	case 'f':
		return math.Float32frombits(uint32(r.uint(4)))
	case 'd':
		return math.Float64frombits(r.uint(8))
	case 'D':
		return amqp.Decimal{Scale: r.byte(), Value: int32(r.uint(4))}
	case 'S':
		return r.str()
	case 'x':
		return []byte(r.str())
	case 'T':
		return time.Unix(int64(r.uint(8)), 0)
	case 'A':
		n := int(r.byte())
		arr := make([]any, 0, n)
		for i := 0; i < n && !r.empty(); i++ {
			arr = append(arr, r.field(depth+1))
		}
		return arr
	case 'F':
		n := int(r.byte())
		t := amqp.Table{}
		for i := 0; i < n && !r.empty(); i++ {
			key := r.str()
			t[key] = r.field(depth + 1)
		}
		return t
	default: // 'V' and unknown tags: AMQP void
		return nil
	}
}

// The decoder must produce what the fuzz test claims to cover.
func TestDecodeTableCoversEveryType(t *testing.T) {
	t.Parallel()
	in := []byte("\x01aD\x02\x00\x00\x30\x39" + // decimal 123.45
		"\x01bT\x00\x00\x00\x00\x00\x00\x00\x01" + // timestamp
		"\x01cA\x02F\x01\x01kl\x00\x00\x00\x00\x00\x00\x00\x05x\x02\xff\x00" + // [{"k":5}, bytes]
		"\x01dt\x01")
	got := decodeTable(in)
	assert.Equal(t, amqp.Decimal{Scale: 2, Value: 12345}, got["a"])
	assert.Equal(t, time.Unix(1, 0), got["b"])
	assert.Equal(t, []any{amqp.Table{"k": int64(5)}, []byte{0xff, 0x00}}, got["c"])
	assert.Equal(t, true, got["d"])
	assert.True(t, utf8.ValidString(rabbitmq.HeaderString(got["c"])))
}
