package realproc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/llm"
	"github.com/eventpipe/eventpipe/app/s3store"
	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker/llmgen"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker/realproc"
	"github.com/eventpipe/eventpipe/handlers/stackup/envelope"
	"github.com/eventpipe/eventpipe/handlers/stackup/internalapi"
)

const dim = 4

// openAI is a local OpenAI-compatible server: chat completions (structured
// and streamed), embeddings, audio/speech and audio/transcriptions.
type openAI struct {
	srv *httptest.Server
	mu  sync.Mutex
	// chat answers a structured request by its schema name.
	chat       map[string]string
	stream     []string
	speech     []byte
	transcript string
	fail       int // HTTP status for every call when not 0
	calls      map[string]int
	lastForm   map[string]string
	lastInput  []string
	// prompts holds the last user message of each chat request, by its
	// schema name ("stream" for a streamed one).
	prompts map[string]string
}

func newOpenAI(t *testing.T) *openAI {
	o := &openAI{chat: map[string]string{}, calls: map[string]int{}, prompts: map[string]string{}}
	o.srv = httptest.NewServer(http.HandlerFunc(o.serve))
	t.Cleanup(o.srv.Close)
	return o
}

func (o *openAI) serve(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls[r.URL.Path]++
	if o.fail != 0 {
		w.WriteHeader(o.fail)
		_, _ = io.WriteString(w, `{"error":{"message":"down","type":"server_error"}}`)
		return
	}
	switch r.URL.Path {
	case "/v1/chat/completions":
		var req struct {
			Stream   bool `json:"stream"`
			Messages []struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"messages"`
			ResponseFormat struct {
				JSONSchema struct {
					Name string `json:"name"`
				} `json:"json_schema"`
			} `json:"response_format"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		name := req.ResponseFormat.JSONSchema.Name
		if req.Stream {
			name = "stream"
		}
		if n := len(req.Messages); n > 0 {
			o.prompts[name] = req.Messages[n-1].Content
		}
		if req.Stream {
			w.Header().Set("Content-Type", "text/event-stream")
			for _, s := range o.stream {
				b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"delta": map[string]any{"content": s}}}})
				fmt.Fprintf(w, "data: %s\n\n", b)
			}
			fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
			return
		}
		content := o.chat[req.ResponseFormat.JSONSchema.Name]
		b, _ := json.Marshal(map[string]any{"id": "c1", "model": "fake", "choices": []any{map[string]any{"finish_reason": "stop",
			"message": map[string]any{"content": content}}}})
		_, _ = w.Write(b)
	case "/v1/embeddings":
		var req struct {
			Input []string `json:"input"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		o.lastInput = req.Input
		var data []any
		for i := range req.Input {
			data = append(data, map[string]any{"index": i, "embedding": []float32{float32(i), 1, 0, 0}})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"data": data})
	case "/v1/audio/speech":
		w.Header().Set("Content-Type", "audio/mpeg")
		_, _ = w.Write(o.speech)
	case "/v1/audio/transcriptions":
		_ = r.ParseMultipartForm(32 << 20)
		o.lastForm = map[string]string{}
		for k, v := range r.MultipartForm.Value {
			o.lastForm[k] = v[0]
		}
		if fh := r.MultipartForm.File["file"]; len(fh) > 0 {
			o.lastForm["filename"] = fh[0].Filename
		}
		_, _ = io.WriteString(w, o.transcript)
	default:
		http.NotFound(w, r)
	}
}

func (o *openAI) client(t *testing.T) *llm.Client {
	c, err := llm.New(llm.Config{BaseURL: o.srv.URL + "/v1", AllowNoKey: true, Timeout: 5 * time.Second})
	require.NoError(t, err)
	return c
}

// emulatorBucket is a bucket of the test's own on the S3 emulator.
func emulatorBucket(t *testing.T) (*s3store.Bucket, *s3.Client) {
	t.Helper()
	c := s3.New(s3.Options{Region: testenv.SQSRegion, BaseEndpoint: aws.String(testenv.SQSEndpoint(t)), UsePathStyle: true,
		Credentials:                credentials.NewStaticCredentialsProvider("test", "test", ""),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired})
	name := "ept-" + strings.ToLower(watermill.NewShortUUID())
	_, err := c.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(name)})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx := context.Background()
		out, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(name)})
		if err == nil {
			for _, o := range out.Contents {
				_, _ = c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(name), Key: o.Key})
			}
		}
		_, _ = c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(name)})
	})
	return &s3store.Bucket{Client: c, Name: name, MaxBytes: 1 << 20, Timeout: 10 * time.Second}, c
}

// core is Core's real internal API (memory store) on a local server.
func core(t *testing.T) (*internalapi.Client, *internalapi.API, *internalapi.Memory) {
	t.Helper()
	sealer, err := internalapi.NewSealer(bytes.Repeat([]byte{7}, internalapi.KeyLen))
	require.NoError(t, err)
	store := internalapi.NewMemory()
	api, err := internalapi.New(internalapi.Config{Store: store, Sealer: sealer, Dimension: dim})
	require.NoError(t, err)
	const key = "realproc-test-internal-key"
	h, err := internalapi.Handler(api, key, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &internalapi.Client{BaseURL: srv.URL, APIKey: key}, api, store
}

type rig struct {
	ai      *openAI
	bucket  *s3store.Bucket
	s3      *s3.Client
	core    *internalapi.Client
	coreAPI *internalapi.API
	coreDB  *internalapi.Memory
	p       *realproc.Processors
	events  *events
}

type event struct {
	MessageType, EventType string
	Data                   map[string]any
}

type events struct {
	mu   sync.Mutex
	list []event
}

func (e *events) notify(_ context.Context, mt, ev string, data any) {
	b, _ := json.Marshal(data)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, event{mt, ev, m})
}

func (e *events) all() []event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]event(nil), e.list...)
}

func newRig(t *testing.T, mod func(*realproc.Config)) *rig {
	t.Helper()
	r := &rig{ai: newOpenAI(t), events: &events{}}
	r.bucket, r.s3 = emulatorBucket(t)
	r.core, r.coreAPI, r.coreDB = core(t)
	model := r.ai.client(t)
	cfg := realproc.Config{Objects: r.bucket, Model: model, Core: r.core, Generator: llmgen.Generator{Client: model},
		AllowPrivateNetworks: true, EmbeddingDimensions: dim, FetchTimeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)}
	if mod != nil {
		mod(&cfg)
	}
	p, err := realproc.New(cfg)
	require.NoError(t, err)
	r.p = p
	return r
}

func (r *rig) job(userID int64) aiworker.Job {
	return aiworker.NewJob(envelope.Envelope{MessageID: "m-" + watermill.NewShortUUID(), Context: envelope.Context{UserID: &userID}}, r.events.notify)
}

func (r *rig) object(t *testing.T, key string) string {
	t.Helper()
	b, err := r.bucket.Get(context.Background(), key)
	require.NoError(t, err, key)
	return string(b)
}

// pdfWith builds a one-page PDF whose content stream is content (text
// operators, or none: a page without a text layer).
func pdfWith(content string) []byte {
	objs := []string{
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
		"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
		fmt.Sprintf("<< /Length %d >>\nstream\n%s\nendstream", len(content), content),
		"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
	}
	var b bytes.Buffer
	b.WriteString("%PDF-1.4\n")
	offsets := make([]int, len(objs))
	for i, o := range objs {
		offsets[i] = b.Len()
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", i+1, o)
	}
	xref := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(objs)+1)
	for _, off := range offsets {
		fmt.Fprintf(&b, "%010d 00000 n \n", off)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(objs)+1, xref)
	return b.Bytes()
}

func textPDF(lines ...string) []byte {
	var c strings.Builder
	c.WriteString("BT /F1 12 Tf 72 720 Td 14 TL\n")
	for _, l := range lines {
		fmt.Fprintf(&c, "(%s) Tj T*\n", l)
	}
	c.WriteString("ET")
	return pdfWith(c.String())
}
