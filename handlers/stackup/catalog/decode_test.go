package catalog_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/envelope"
)

// twoPass is the consumer's decode before Catalog.Decode: the envelope
// checked by its schema, then the re-encoded envelope by its type's.
func twoPass(c catalog.Catalog, data []byte) (envelope.Envelope, catalog.Payload, error) {
	env, err := envelope.Decode(data)
	if err != nil {
		return envelope.Envelope{}, nil, err
	}
	p, err := c.DecodePayload(env)
	return env, p, err
}

// requireSameDecode fails unless Catalog.Decode and the two passes agree on
// data: the envelope, the payload, the error's text and class.
func requireSameDecode(t *testing.T, c catalog.Catalog, data []byte) {
	t.Helper()
	wantEnv, wantP, wantErr := twoPass(c, data)
	env, p, err := c.Decode(data, nil)
	if wantErr != nil {
		require.Error(t, err, "Decode accepted what the two passes refuse: %v", wantErr)
		require.Equal(t, wantErr.Error(), err.Error())
		require.Equal(t, failure.Of(wantErr), failure.Of(err))
		return
	}
	require.NoError(t, err)
	require.Equal(t, wantEnv, env)
	require.Equal(t, wantP, p)
}

// decodeCases are bodies where one check of the body as sent could differ
// from the two passes: the envelope's objections against the type's, a
// field encoding/json takes case-insensitively, null or absent context ids
// the re-encoding drops or adds, duplicate keys, a version without a schema.
var decodeCases = map[string][]byte{
	"bad publishedAt": []byte(`{"messageId":"m","messageType":"analyze.resume","version":"v1","traceId":"t","publishedAt":"yesterday","publisher":"p","payload":{"resumeId":42,"filePath":"a.pdf","analyzedDocumentId":1}}`),
	"bad payload":     wrap(catalog.AnalyzeResume, `{"resumeId":0,"filePath":"/a.pdf"}`, ""),
	"both bad":        []byte(`{"messageId":"","messageType":"analyze.resume","version":"v1","traceId":"t","publishedAt":"2026-04-27T15:00:00Z","publisher":"p","payload":{"resumeId":-1}}`),
	"folded type":     []byte(`{"messageId":"m","messageType":"analyze.resume","MessageType":"generate.tts","version":"v1","traceId":"t","publishedAt":"2026-04-27T15:00:00Z","publisher":"p","payload":{"resumeId":42,"filePath":"a.pdf","analyzedDocumentId":1}}`),
	"folded payload":  []byte(`{"messageId":"m","messageType":"analyze.resume","version":"v1","traceId":"t","publishedAt":"2026-04-27T15:00:00Z","publisher":"p","payload":{"resumeId":42,"filePath":"a.pdf","analyzedDocumentId":1},"PAYLOAD":{"resumeId":-1}}`),
	"folded context":  wrap(catalog.RealtimeSessionNotify, `{"eventType":"x","data":{}}`, `{"sessionId":99,"SessionId":null}`),
	"null context id": wrap(catalog.RealtimeSessionNotify, `{"eventType":"x","data":{}}`, `{"sessionId":null,"userId":1}`),
	"no context":      []byte(`{"messageId":"m","messageType":"realtime.user.notify","version":"v1","traceId":"t","publishedAt":"2026-04-27T15:00:00Z","publisher":"p","payload":{"eventType":"x","data":{}}}`),
	"null context":    []byte(`{"messageId":"m","messageType":"analyze.resume","version":"v1","traceId":"t","publishedAt":"2026-04-27T15:00:00Z","publisher":"p","payload":{"resumeId":42,"filePath":"a.pdf","analyzedDocumentId":1},"context":null}`),
	"duplicate context": wrap(catalog.RealtimeUserNotify, `{"eventType":"x","data":{}}`,
		`{"userId":7},"context":{"sessionId":1}`),
	"unknown fields": []byte(`{"messageId":"m","messageType":"analyze.resume","version":"v1","traceId":"t","publishedAt":"2026-04-27T15:00:00Z","publisher":"p","x":1,"payload":{"resumeId":42,"filePath":"a.pdf","analyzedDocumentId":1,"y":2},"context":{"z":3}}`),
	"id overflow":    wrap(catalog.AnalyzeResume, `{"resumeId":42,"filePath":"a.pdf","analyzedDocumentId":1}`, `{"userId":1e30}`),
	"unknown type":   wrap("analyze.nothing", `{}`, ""),
	"v2":             []byte(`{"messageId":"m","messageType":"analyze.resume","version":"v2","traceId":"t","publishedAt":"2026-04-27T15:00:00Z","publisher":"p","payload":{}}`),
	"not JSON":       []byte(`{"messageId":`),
	"not an object":  []byte(`[1]`),
	"trailing data":  append(wrap(catalog.AnalyzeResume, `{"resumeId":42,"filePath":"a.pdf","analyzedDocumentId":1}`, ""), []byte(` {}`)...),
}

func TestDecodeIsTheTwoPasses(t *testing.T) {
	t.Parallel()
	c := catalog.Default()
	for _, ex := range specExamples {
		body := wrap(ex.messageType, ex.payload, ex.context)
		t.Run("§5 "+ex.messageType, func(t *testing.T) {
			t.Parallel()
			requireSameDecode(t, c, body)
		})
		// Decode checks the envelope only through the type's schema: one
		// that stopped including it would let this body through.
		t.Run("§5 "+ex.messageType+" bad envelope", func(t *testing.T) {
			t.Parallel()
			requireSameDecode(t, c, bytes.Replace(body, []byte(`"2026-04-27T15:00:00Z"`), []byte(`"yesterday"`), 1))
		})
	}
	for name, body := range decodeCases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			requireSameDecode(t, c, body)
		})
	}
}

// FuzzDecode: Catalog.Decode is the two passes it replaces, on any body.
func FuzzDecode(f *testing.F) {
	for _, ex := range specExamples {
		f.Add(wrap(ex.messageType, ex.payload, ex.context))
	}
	for _, body := range decodeCases {
		f.Add(body)
	}
	c := catalog.Default()
	f.Fuzz(func(t *testing.T, data []byte) {
		requireSameDecode(t, c, data)
	})
}
