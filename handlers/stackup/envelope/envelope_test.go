package envelope_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/rabbitmq"
	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/handlers/stackup/envelope"
)

// smoke is §9's message, byte for byte.
const smoke = `{"messageId":"smoke-1","messageType":"analyze.resume","version":"v1","traceId":"local-test","publishedAt":"2026-04-27T15:00:00Z","publisher":"manual","payload":{"resumeId":1,"filePath":"resumes/raw/1/test.pdf","analyzedDocumentId":1},"context":{"userId":1}}`

func TestPropertyKeysMatchTheRabbitMQAdapter(t *testing.T) {
	t.Parallel()
	// The adapter moves these metadata keys into AMQP properties (§3).
	assert.Equal(t, rabbitmq.MetadataContentType, envelope.ContentTypeKey)
	assert.Equal(t, rabbitmq.MetadataContentEncoding, envelope.ContentEncodingKey)
	assert.Equal(t, rabbitmq.MetadataCorrelationID, envelope.CorrelationIDKey)
}

func TestDecode(t *testing.T) {
	t.Parallel()
	e, err := envelope.Decode([]byte(smoke))
	require.NoError(t, err)
	assert.Equal(t, "smoke-1", e.MessageID, "a messageId need not be a UUID")
	assert.Equal(t, int64(1), *e.Context.UserID)
	assert.Nil(t, e.Context.SessionID)

	cases := map[string]struct {
		body   string
		reason string
	}{
		"not json":         {`{`, "body: not JSON"},
		"null":             {`null`, "body: want object, got null"},
		"array":            {`[]`, "body: want object, got array"},
		"empty messageId":  {strings.Replace(smoke, `"smoke-1"`, `""`, 1), "field messageId: must not be empty or blank"},
		"blank messageId":  {strings.Replace(smoke, `"smoke-1"`, `"  "`, 1), "field messageId: must not be empty or blank"},
		"no version":       {strings.Replace(smoke, `"version":"v1",`, "", 1), "field version: required"},
		"no traceId":       {strings.Replace(smoke, `"traceId":"local-test",`, "", 1), "field traceId: required"},
		"bad publishedAt":  {strings.Replace(smoke, `2026-04-27T15:00:00Z`, `27/04/2026`, 1), "field publishedAt: not a valid date-time"},
		"payload a string": {strings.Replace(smoke, `"payload":{`, `"payload":"x","p":{`, 1), "field payload: want object, got string"},
		"no payload":       {`{"messageId":"a","messageType":"b","version":"v1","traceId":"t","publishedAt":"2026-04-27T15:00:00Z","publisher":"p"}`, "field payload: required"},
		"wrong type":       {strings.Replace(smoke, `"userId":1`, `"userId":"one"`, 1), "field context.userId: want null or integer, got string"},
		"long messageId":   {strings.Replace(smoke, `"smoke-1"`, `"`+strings.Repeat("x", 201)+`"`, 1), "field messageId: longer than 200 characters"},
	}
	for name, c := range cases {
		_, err := envelope.Decode([]byte(c.body))
		require.Error(t, err, name)
		assert.Equal(t, failure.Permanent, failure.Of(err), name)
		assert.Contains(t, err.Error(), c.reason, name)
	}
}

func TestLenientAndStrict(t *testing.T) {
	t.Parallel()
	extra := strings.Replace(smoke, `"publisher":"manual",`, `"publisher":"manual","githubAccessTokenEncrypted":"s3cret",`, 1)
	extra = strings.Replace(extra, `"context":{"userId":1}`, `"context":{"userId":1,"tenant":"x"}`, 1)
	e, err := envelope.Decode([]byte(extra))
	require.NoError(t, err, "unknown fields are ignored on consume (§7)")
	out, err := json.Marshal(e)
	require.NoError(t, err)
	assert.NotContains(t, string(out), "s3cret", "and not kept: re-encoding cannot forward them")
	assert.NotContains(t, string(out), "tenant")

	_, err = envelope.DecodeStrict([]byte(extra))
	require.Error(t, err, "our publishers may not add unknown fields")
	_, err = envelope.DecodeStrict([]byte(smoke + ` {}`))
	require.ErrorContains(t, err, "not JSON")
	_, err = envelope.DecodeStrict([]byte(smoke))
	require.NoError(t, err)
}

func TestRoutingKey(t *testing.T) {
	t.Parallel()
	e, err := envelope.Decode([]byte(smoke))
	require.NoError(t, err)
	msg := message.NewMessage("x", []byte(smoke))
	require.NoError(t, e.CheckRoutingKey(msg), "no routing key (published to the queue): its own messageType")
	msg.Metadata.Set(metadata.RoutingKeyKey, "analyze.resume")
	require.NoError(t, e.CheckRoutingKey(msg))
	msg.Metadata.Set(metadata.RoutingKeyKey, "analyze.web")
	err = e.CheckRoutingKey(msg)
	require.ErrorContains(t, err, `differs from the routing key "analyze.web"`)
	assert.Equal(t, failure.Permanent, failure.Of(err))
}

func TestMarshal(t *testing.T) {
	t.Parallel()
	e, err := envelope.Decode([]byte(smoke))
	require.NoError(t, err)
	msg, err := envelope.Marshal(context.Background(), e, "request-id")
	require.NoError(t, err)
	assert.Equal(t, "smoke-1", msg.UUID, "message_id = messageId")
	assert.Equal(t, "application/json", msg.Metadata.Get(envelope.ContentTypeKey))
	assert.Equal(t, "utf-8", msg.Metadata.Get(envelope.ContentEncodingKey))
	assert.Equal(t, "request-id", msg.Metadata.Get(envelope.CorrelationIDKey))
	assert.Equal(t, "local-test", msg.Metadata.Get(metadata.TraceIDKey))
	back, err := envelope.DecodeStrict(msg.Payload)
	require.NoError(t, err)
	assert.Equal(t, e, back)

	e.TraceID = ""
	_, err = envelope.Marshal(context.Background(), e, "")
	require.ErrorContains(t, err, "field traceId: must not be empty or blank")
}

func TestTraceIDOf(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "local-test", envelope.TraceIDOf(message.NewMessage("x", []byte(smoke))))
	assert.Empty(t, envelope.TraceIDOf(message.NewMessage("x", []byte(`not json`))))
	assert.Empty(t, envelope.TraceIDOf(message.NewMessage("x", []byte(`{"traceId":"`+strings.Repeat("a", 300)+`"}`))))
}

func TestNewID(t *testing.T) {
	t.Parallel()
	id := envelope.NewID()
	assert.Len(t, id, 36)
	assert.Equal(t, byte('4'), id[14], "UUID v4")
}

// FuzzDecode: no input panics; what decodes is valid, strict implies
// lenient, and a decoded envelope survives Marshal and a strict decode.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(smoke))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"messageId":"a","messageType":"b","version":"v1","traceId":"t","publishedAt":"9999-12-31T23:59:59Z","publisher":"p","payload":{},"context":{"userId":9223372036854775807}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := envelope.Decode(data)
		_, strictErr := envelope.DecodeStrict(data)
		if err != nil {
			require.Error(t, strictErr, "strict accepted what lenient refused: %v", err)
			require.Equal(t, failure.Permanent, failure.Of(err), "decode error not permanent: %v", err)
			return
		}
		require.NoError(t, e.Validate())
		msg, err := envelope.Marshal(context.Background(), e, "")
		require.NoError(t, err)
		back, err := envelope.DecodeStrict(msg.Payload)
		require.NoError(t, err)
		require.Equal(t, e.MessageID, back.MessageID)
	})
}
