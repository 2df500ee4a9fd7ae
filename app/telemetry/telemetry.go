// Package telemetry builds eventpipe's OpenTelemetry tracer provider from a
// Config: no exporter (the default, a no-op provider that costs nothing),
// stdout, or OTLP over HTTP — or, when Config leaves the exporter at none and
// OTEL_TRACES_EXPORTER is set, what the standard OTEL_* variables say
// (decision 0027): the SDK's autoexport picks the exporter and protocol,
// its resource detector reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
// (always, over Config.ServiceName), and its sampler OTEL_TRACES_SAMPLER
// (unless Config.SampleRatio is set). Nothing here parses them itself.
//
// It never touches OpenTelemetry's globals (otel.SetTracerProvider,
// otel.SetTextMapPropagator): the composition root passes the provider to
// what traces (middleware.Tracing, middleware.TracingPublisher), so two
// services in one process, or tests running in parallel, cannot see each
// other's spans. Propagation is always W3C Trace Context and is done by
// package middleware.
package telemetry

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/eventpipe/eventpipe/app/msgctx"
)

// The exporters Config.Exporter accepts.
const (
	// ExporterNone records nothing: Setup returns a no-op provider, and the
	// tracing middleware steps aside. The default.
	ExporterNone = "none"
	// ExporterStdout writes every finished span as one JSON line to the
	// writer given to Setup; for local development.
	ExporterStdout = "stdout"
	// ExporterOTLP sends spans over OTLP/HTTP (protobuf) to Config.Endpoint,
	// e.g. an OpenTelemetry Collector, Jaeger or Tempo.
	ExporterOTLP = "otlp"
)

// Config selects where spans go. The zero value is valid and records
// nothing.
type Config struct {
	// Exporter is where finished spans go: "none", "stdout" or "otlp".
	// Default "none".
	Exporter string
	// Endpoint is the OTLP/HTTP endpoint, used only by the otlp exporter and
	// required by it. A bare host:port (localhost:4318) is spoken to in plain
	// HTTP, as to a collector beside the service; a URL
	// (https://collector.example:4318) picks its scheme and may carry a path
	// (default path /v1/traces). The exporter's OTEL_EXPORTER_OTLP_*
	// environment variables fill in what Endpoint does not say (headers,
	// certificates, timeouts).
	Endpoint string
	// ServiceName is the service.name resource attribute every span carries.
	// Default "eventpipe".
	ServiceName string
	// SampleRatio is the fraction of new traces recorded, 0 < ratio <= 1;
	// a trace continued from a traceparent follows its sampled flag instead.
	// Default 1 (0 means the default; to record nothing, use exporter none).
	SampleRatio float64
}

func (c *Config) setDefaults() {
	if c.Exporter == "" {
		c.Exporter = ExporterNone
	}
	if c.ServiceName == "" {
		c.ServiceName = "eventpipe"
	}
	if c.SampleRatio == 0 {
		c.SampleRatio = 1
	}
}

// Validate reports every problem with the configuration, joined. Unset fields
// count as their defaults.
func (c Config) Validate() error {
	c.setDefaults()
	var errs []error
	switch c.Exporter {
	case ExporterNone, ExporterStdout:
	case ExporterOTLP:
		if c.Endpoint == "" {
			errs = append(errs, errors.New("telemetry: the otlp exporter needs an endpoint (e.g. localhost:4318)"))
		} else if _, err := otlpEndpoint(c.Endpoint); err != nil {
			errs = append(errs, err)
		}
	default:
		errs = append(errs, fmt.Errorf("telemetry: unknown exporter %q (want %s, %s or %s)",
			c.Exporter, ExporterNone, ExporterStdout, ExporterOTLP))
	}
	if math.IsNaN(c.SampleRatio) || c.SampleRatio <= 0 || c.SampleRatio > 1 {
		errs = append(errs, fmt.Errorf("telemetry: sample ratio %v is not in (0, 1]", c.SampleRatio))
	}
	return errors.Join(errs...)
}

// otlpEndpoint turns Endpoint into the exporter's options: a URL as it is, a
// bare host:port as plain HTTP.
func otlpEndpoint(endpoint string) ([]otlptracehttp.Option, error) {
	if strings.Contains(endpoint, "://") {
		u, err := url.Parse(endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("telemetry: endpoint %q is neither host:port nor an http(s) URL", endpoint)
		}
		return []otlptracehttp.Option{otlptracehttp.WithEndpointURL(endpoint)}, nil
	}
	if strings.ContainsAny(endpoint, "/?# ") {
		return nil, fmt.Errorf("telemetry: endpoint %q is neither host:port nor an http(s) URL", endpoint)
	}
	return []otlptracehttp.Option{otlptracehttp.WithEndpoint(endpoint), otlptracehttp.WithInsecure()}, nil
}

// Setup returns the tracer provider cfg describes and the function that
// flushes and stops it; call shutdown once, at the end of the service's life,
// with a context that bounds the flush. The stdout exporter writes to w.
//
// With exporter none, the provider is a noop.TracerProvider, which the
// tracing middleware recognises and steps aside for, and shutdown does
// nothing. Otherwise the provider batches spans in the background, samples
// new traces at cfg.SampleRatio (continued ones follow their parent), and
// gives a new trace the trace id in its context (msgctx.TraceID) when
// there is one (see IDGenerator). Setup connects to nothing: an unreachable
// OTLP endpoint shows only when spans are exported.
func Setup(ctx context.Context, cfg Config, w io.Writer) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}

	var exporter sdktrace.SpanExporter
	switch cfg.Exporter {
	case ExporterNone:
		if os.Getenv("OTEL_TRACES_EXPORTER") == "" {
			return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
		}
		// The OpenTelemetry variables choose: OTEL_TRACES_EXPORTER (otlp,
		// console, none), OTEL_EXPORTER_OTLP_PROTOCOL (http/protobuf,
		// grpc), the OTLP exporters' own OTEL_EXPORTER_OTLP_* — read by
		// the SDK's autoexport, not by us.
		if exporter, err = autoexport.NewSpanExporter(ctx); err != nil {
			return nil, nil, fmt.Errorf("telemetry: OTEL_TRACES_EXPORTER: %w", err)
		}
		if autoexport.IsNoneSpanExporter(exporter) {
			return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
		}
	case ExporterStdout:
		if w == nil {
			return nil, nil, errors.New("telemetry: the stdout exporter needs a writer")
		}
		exporter, err = stdouttrace.New(stdouttrace.WithWriter(w))
	case ExporterOTLP:
		opts, _ := otlpEndpoint(cfg.Endpoint) // validated above
		exporter, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: %s exporter: %w", cfg.Exporter, err)
	}

	// The configured service name, then what the OpenTelemetry variables
	// say (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME, read by the SDK's
	// own detector), which win: the standard way to name a deployment.
	res, err := resource.New(ctx,
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(cfg.ServiceName)),
		resource.WithFromEnv(),
	)
	if err != nil {
		_ = exporter.Shutdown(ctx)
		return nil, nil, fmt.Errorf("telemetry: resource: %w", err)
	}

	opts := []sdktrace.TracerProviderOption{
		sdktrace.WithBatcher(exporter),
		sdktrace.WithResource(res),
		sdktrace.WithIDGenerator(IDGenerator()),
	}
	// OTEL_TRACES_SAMPLER (and its _ARG), read by the SDK, decides unless
	// the configuration asks for a ratio of its own.
	if os.Getenv("OTEL_TRACES_SAMPLER") == "" || cfg.SampleRatio != 1 {
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))))
	}
	provider := sdktrace.NewTracerProvider(opts...)
	return provider, provider.Shutdown, nil
}

// IDGenerator returns the span id generator of the providers Setup builds,
// for tests and for callers that build their own sdktrace.TracerProvider: a
// new trace takes the trace id in its context (msgctx.TraceID, the
// x-trace-id of eventpipe's logs) when that is a valid W3C trace id, and a
// random one otherwise; span ids are random.
//
// This is how a consumer span of a message with an x-trace-id but no
// traceparent ends up in the trace its logs name, as a genuine root span
// (middleware.Tracing says why not a made-up remote parent). The ratio
// sampler decides on the trace id, so every service that sees the same
// x-trace-id samples it alike. It only ever decides the trace id of a root
// span: a span with a parent always takes its parent's.
func IDGenerator() sdktrace.IDGenerator { return seededIDs{} }

type seededIDs struct{}

func (seededIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	var tid trace.TraceID
	if id := msgctx.TraceID(ctx); len(id) == 2*len(tid) {
		if _, err := hex.Decode(tid[:], []byte(id)); err != nil || !tid.IsValid() {
			tid = trace.TraceID{}
		}
	}
	for !tid.IsValid() {
		binary.NativeEndian.PutUint64(tid[:8], rand.Uint64())
		binary.NativeEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, newSpanID()
}

func (seededIDs) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return newSpanID() }

// newSpanID draws from math/rand/v2's global generator: span ids need to be
// unique, not secret, and it is safe for concurrent use without a lock here.
func newSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.NativeEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}
