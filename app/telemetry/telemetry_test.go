package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

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
