package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/eventpipe/eventpipe/app/msgctx"
	"github.com/eventpipe/eventpipe/app/telemetry"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     telemetry.Config
		wantErr []string // substrings, one per expected problem
	}{
		{name: "zero value records nothing", cfg: telemetry.Config{}},
		{name: "stdout", cfg: telemetry.Config{Exporter: "stdout", SampleRatio: 0.25}},
		{name: "otlp host:port", cfg: telemetry.Config{Exporter: "otlp", Endpoint: "localhost:4318"}},
		{name: "otlp URL", cfg: telemetry.Config{Exporter: "otlp", Endpoint: "https://collector.example:4318/custom/v1/traces"}},
		{name: "otlp without endpoint", cfg: telemetry.Config{Exporter: "otlp"}, wantErr: []string{"needs an endpoint"}},
		{name: "otlp bad scheme", cfg: telemetry.Config{Exporter: "otlp", Endpoint: "grpc://collector:4317"}, wantErr: []string{"neither host:port"}},
		{name: "otlp path without scheme", cfg: telemetry.Config{Exporter: "otlp", Endpoint: "collector:4318/v1/traces"}, wantErr: []string{"neither host:port"}},
		{name: "unknown exporter", cfg: telemetry.Config{Exporter: "jaeger"}, wantErr: []string{`unknown exporter "jaeger"`}},
		{name: "ratio above 1", cfg: telemetry.Config{SampleRatio: 1.5}, wantErr: []string{"sample ratio 1.5"}},
		{name: "negative ratio", cfg: telemetry.Config{SampleRatio: -0.1}, wantErr: []string{"sample ratio -0.1"}},
		{name: "NaN ratio", cfg: telemetry.Config{SampleRatio: math.NaN()}, wantErr: []string{"sample ratio NaN"}},
		{
			name:    "every problem at once",
			cfg:     telemetry.Config{Exporter: "otlp", SampleRatio: 2},
			wantErr: []string{"needs an endpoint", "sample ratio 2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.Validate()
			if len(tt.wantErr) == 0 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, want := range tt.wantErr {
				assert.Contains(t, err.Error(), want)
			}
			_, _, setupErr := telemetry.Setup(context.Background(), tt.cfg, io.Discard)
			assert.Error(t, setupErr, "Setup validates too")
		})
	}
}

func TestSetupNoneIsNoop(t *testing.T) {
	t.Parallel()
	for _, exporter := range []string{"", "none"} {
		tp, shutdown, err := telemetry.Setup(context.Background(), telemetry.Config{Exporter: exporter}, nil)
		require.NoError(t, err)
		assert.IsType(t, noop.TracerProvider{}, tp, "the tracing middleware steps aside for exactly this type")
		assert.NoError(t, shutdown(context.Background()))
	}
}

func TestSetupStdout(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	tp, shutdown, err := telemetry.Setup(context.Background(), telemetry.Config{Exporter: "stdout", ServiceName: "orders"}, &out)
	require.NoError(t, err)

	ctx := msgctx.WithTraceID(context.Background(), "0af7651916cd43dd8448eb211c80319c")
	_, span := tp.Tracer("test").Start(ctx, "work")
	span.End()
	require.NoError(t, shutdown(context.Background()), "shutdown flushes the batch")

	var got struct {
		Name        string
		SpanContext struct{ TraceID string }
		Resource    []struct {
			Key   string
			Value struct{ Value any }
		}
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &got), out.String())
	assert.Equal(t, "work", got.Name)
	assert.Equal(t, "0af7651916cd43dd8448eb211c80319c", got.SpanContext.TraceID, "the provider seeds new traces")
	service := ""
	for _, kv := range got.Resource {
		if kv.Key == "service.name" {
			service, _ = kv.Value.Value.(string)
		}
	}
	assert.Equal(t, "orders", service)
}

func TestSetupStdoutNeedsWriter(t *testing.T) {
	t.Parallel()
	_, _, err := telemetry.Setup(context.Background(), telemetry.Config{Exporter: "stdout"}, nil)
	require.ErrorContains(t, err, "needs a writer")
}

// TestSetupOTLP exports to an in-process HTTP server standing in for a
// collector: a bare host:port is spoken to in plain HTTP at /v1/traces.
func TestSetupOTLP(t *testing.T) {
	t.Parallel()
	var requests atomic.Int32
	var path, contentType atomic.Value
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		path.Store(r.URL.Path)
		contentType.Store(r.Header.Get("Content-Type"))
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(collector.Close)

	endpoint := strings.TrimPrefix(collector.URL, "http://")
	tp, shutdown, err := telemetry.Setup(context.Background(), telemetry.Config{Exporter: "otlp", Endpoint: endpoint}, nil)
	require.NoError(t, err)
	_, span := tp.Tracer("test").Start(context.Background(), "work")
	span.End()
	require.NoError(t, shutdown(context.Background()))

	assert.Equal(t, int32(1), requests.Load())
	assert.Equal(t, "/v1/traces", path.Load())
	assert.Equal(t, "application/x-protobuf", contentType.Load())
}

func TestSetupSampleRatio(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		ratio   float64
		sampled bool
	}{
		{"default records every new trace", 0, true},
		{"tiny ratio records almost none", 1e-12, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tp, shutdown, err := telemetry.Setup(context.Background(), telemetry.Config{Exporter: "stdout", SampleRatio: tt.ratio}, io.Discard)
			require.NoError(t, err)
			t.Cleanup(func() { _ = shutdown(context.Background()) })

			// A trace id in the upper half of the range: sampled at ratio 1,
			// not at a tiny one (the ratio sampler decides on its low bits).
			ctx := msgctx.WithTraceID(context.Background(), "ffffffffffffffffffffffffffffffff")
			_, span := tp.Tracer("test").Start(ctx, "root")
			assert.Equal(t, tt.sampled, span.SpanContext().IsSampled())
			span.End()

			// A continued trace follows its parent's decision, whatever the ratio.
			parent := trace.NewSpanContext(trace.SpanContextConfig{
				TraceID:    span.SpanContext().TraceID(),
				SpanID:     trace.SpanID{1},
				TraceFlags: trace.FlagsSampled,
				Remote:     true,
			})
			_, child := tp.Tracer("test").Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), "child")
			assert.True(t, child.SpanContext().IsSampled())
			child.End()
		})
	}
}

func TestIDGenerator(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		traceID string // in the context; "" for none
		seeded  bool
	}{
		{"valid trace id", "4bf92f3577b34da6a3ce929d0e0e4736", true},
		{"no trace id", "", false},
		{"not hex", "trace-from-upstream-not-hex-0000", false},
		{"all zero", "00000000000000000000000000000000", false},
		{"too short", "4bf92f3577b34da6", false},
	}
	gen := telemetry.IDGenerator()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			if tt.traceID != "" {
				ctx = msgctx.WithTraceID(ctx, tt.traceID)
			}
			tid, sid := gen.NewIDs(ctx)
			assert.True(t, tid.IsValid())
			assert.True(t, sid.IsValid())
			assert.Equal(t, tt.seeded, tid.String() == tt.traceID)

			other, _ := gen.NewIDs(ctx)
			assert.Equal(t, tt.seeded, other == tid, "only a seeded trace id repeats")
			assert.NotEqual(t, sid, gen.NewSpanID(ctx, tid), "span ids never repeat")
		})
	}
}

// collectorRequests is an OTLP/HTTP collector standing in for a real one: it
// decodes every export request.
func collectorRequests(t *testing.T) (string, func() []*coltracepb.ExportTraceServiceRequest) {
	t.Helper()
	var (
		mu   sync.Mutex
		reqs []*coltracepb.ExportTraceServiceRequest
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		assert.NoError(t, err)
		var req coltracepb.ExportTraceServiceRequest
		assert.NoError(t, proto.Unmarshal(body, &req), "path %s", r.URL.Path)
		mu.Lock()
		reqs = append(reqs, &req)
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []*coltracepb.ExportTraceServiceRequest {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(reqs)
	}
}

// resourceAttrs are the string attributes of a request's first resource.
func resourceAttrs(req *coltracepb.ExportTraceServiceRequest) map[string]string {
	out := map[string]string{}
	for _, kv := range req.GetResourceSpans()[0].GetResource().GetAttributes() {
		out[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	return out
}

// With the exporter left at none, the standard OTEL_* variables configure
// tracing, read by the SDK itself: the exporter and its endpoint, the
// service name and resource attributes, the sampler. (Not parallel: the
// process environment is what they are read from.)
func TestSetupFromOTELVariables(t *testing.T) {
	url, requests := collectorRequests(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
	t.Setenv("OTEL_SERVICE_NAME", "billing-events")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=stage,service.version=1.2.3")

	tp, shutdown, err := telemetry.Setup(context.Background(), telemetry.Config{}, nil)
	require.NoError(t, err)
	_, span := tp.Tracer("test").Start(context.Background(), "work")
	assert.True(t, span.SpanContext().IsSampled())
	span.End()
	require.NoError(t, shutdown(context.Background()))
	reqs := requests()
	require.Len(t, reqs, 1, "the span reached the collector OTEL_EXPORTER_OTLP_ENDPOINT names")
	attrs := resourceAttrs(reqs[0])
	assert.Equal(t, "billing-events", attrs["service.name"], "OTEL_SERVICE_NAME over the configured default")
	assert.Equal(t, "stage", attrs["deployment.environment.name"])
	assert.Equal(t, "1.2.3", attrs["service.version"])

	// OTEL_TRACES_SAMPLER decides when the configuration sets no ratio.
	t.Setenv("OTEL_TRACES_SAMPLER", "always_off")
	tp, shutdown, err = telemetry.Setup(context.Background(), telemetry.Config{}, nil)
	require.NoError(t, err)
	_, span = tp.Tracer("test").Start(context.Background(), "work")
	assert.False(t, span.SpanContext().IsSampled(), "always_off")
	span.End()
	require.NoError(t, shutdown(context.Background()))

	// OTEL_TRACES_EXPORTER=none: the no-op provider, as with no variable.
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	tp, _, err = telemetry.Setup(context.Background(), telemetry.Config{}, nil)
	require.NoError(t, err)
	assert.IsType(t, noop.TracerProvider{}, tp)

	// An exporter the configuration names wins over OTEL_TRACES_EXPORTER.
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_TRACES_SAMPLER", "")
	var out bytes.Buffer
	tp, shutdown, err = telemetry.Setup(context.Background(), telemetry.Config{Exporter: "stdout", SampleRatio: 1}, &out)
	require.NoError(t, err)
	_, span = tp.Tracer("test").Start(context.Background(), "configured")
	span.End()
	require.NoError(t, shutdown(context.Background()))
	assert.Contains(t, out.String(), `"configured"`)
	assert.Contains(t, out.String(), "billing-events", "the variables still name the service")
}
