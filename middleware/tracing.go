package middleware

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/msgctx"
)

// TracerName is the instrumentation scope of the spans this package starts.
const TracerName = "github.com/eventpipe/eventpipe/middleware"

// Attributes eventpipe adds to the messaging semantic conventions.
const (
	// HandlerAttr names the router handler that processed a message: the
	// conventions have no key for it, and one queue may feed several handlers.
	HandlerAttr = attribute.Key("eventpipe.handler")
	// CorrelationIDAttr carries a message's x-trace-id when it differs from
	// the span's trace id (a traceparent and an x-trace-id that disagree), so
	// the trace can still be found from a log line's trace_id.
	CorrelationIDAttr = attribute.Key("eventpipe.trace_id")
)

// MessagingSystem is the messaging.system attribute of the broker kind the
// root runs on (config.Kind*): the semantic conventions' "rabbitmq" and
// "aws_sqs", and for the two the conventions do not list, "postgresql" (the
// database the PostgreSQL broker's queues live in, as db.system.name
// spells it) and "eventpipe.memory" (the in-process broker). The root passes
// it to Tracing and TracingPublisher (Deps.MessagingSystem for the chain).
func MessagingSystem(kind string) attribute.KeyValue {
	switch kind {
	case "rabbitmq":
		return semconv.MessagingSystemRabbitMQ
	case "sqs":
		return semconv.MessagingSystemAWSSQS
	case "postgres":
		return semconv.MessagingSystemKey.String("postgresql")
	case "memory":
		return semconv.MessagingSystemKey.String("eventpipe.memory")
	}
	return semconv.MessagingSystemKey.String(kind)
}

// traceContext is the one propagator: W3C only, fixed, so that every
// eventpipe speaks the same wire format whatever the process's global
// propagator (which this package never reads) is set to.
var traceContext = propagation.TraceContext{}

// isNoop reports whether tp records nothing and propagates nothing, so the
// tracing wrappers can step aside entirely: zero allocations, and no
// traceparent with zero ids (or a stale upstream one) ever injected.
func isNoop(tp trace.TracerProvider) bool {
	switch tp.(type) {
	case nil, noop.TracerProvider, *noop.TracerProvider:
		return true
	}
	return false
}

// Tracing returns router middleware that gives every delivery a consumer
// span named "<queue> process", the child of the producer span whose W3C
// trace context (traceparent, tracestate) the message carries in its
// metadata.
//
// The span goes into the message's context, so whatever the handler publishes
// through a TracingPublisher (with msgctx.NewMessage) continues the trace;
// every message the handler returns gets a traceparent too, so the trace
// continues even through an untraced publisher.
//
// A message without a traceparent whose x-trace-id (metadata.TraceIDKey) is a
// valid W3C trace id starts a trace with that id, so a log line's trace_id
// finds the trace. That takes a provider whose ID generator gives a new trace
// the trace id in its context (msgctx.TraceID), as app/telemetry's does: the
// span is then a genuine root. A made-up remote parent (that trace id with a
// random parent span id) would need no such provider, but that parent is
// never exported, so backends would show every such trace with a missing
// root, and its sampled flag would override the sampling ratio.
//
// A failed handler's span records the error and the status Error. One span
// covers a delivery, in-process retries included, when Tracing runs outside
// the retry policy.
//
// attrs are added to every span: the root's MessagingSystem.
//
// With a no-op provider (noop.TracerProvider, or nil) the handler is returned
// unwrapped.
func Tracing(tp trace.TracerProvider, attrs ...attribute.KeyValue) message.HandlerMiddleware {
	if isNoop(tp) {
		return func(h message.HandlerFunc) message.HandlerFunc { return h }
	}
	tracer := tp.Tracer(TracerName)
	extra := trace.WithAttributes(attrs...)
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			ctx := msg.Context()
			queue := message.SubscribeTopicFromCtx(ctx)
			handler := message.HandlerNameFromCtx(ctx)
			if queue == "" {
				queue = handler
			}

			ctx = traceContext.Extract(ctx, propagation.MapCarrier(msg.Metadata))
			if !trace.SpanContextFromContext(ctx).IsValid() {
				ctx = seedTraceID(ctx, msg.Metadata)
			}
			ctx, span := tracer.Start(ctx, queue+" process",
				trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(
					semconv.MessagingOperationTypeProcess,
					semconv.MessagingOperationName("process"),
					semconv.MessagingDestinationName(queue),
					semconv.MessagingMessageID(msg.UUID),
					semconv.MessagingMessageBodySize(len(msg.Payload)),
					HandlerAttr.String(handler),
				), extra)
			defer span.End()
			if span.IsRecording() {
				if id := correlationID(ctx, msg.Metadata); id != "" && id != span.SpanContext().TraceID().String() {
					span.SetAttributes(CorrelationIDAttr.String(id))
				}
			}

			msg.SetContext(ctx)
			produced, err := h(msg)

			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
				span.SetAttributes(semconv.ErrorTypeKey.String(failure.Of(err).String()))
			}
			sc := span.SpanContext()
			for _, p := range produced {
				continueTrace(p, sc)
			}
			return produced, err
		}
	}
}

// continueTrace makes a message the handler returned part of the handler's
// trace. A message built from the handler's context (msgctx.NewMessage)
// already is; one built from scratch gets the handler span as its context, so
// a TracingPublisher parents its producer span on it. Either way the message
// gets a traceparent unless it has one, so an untraced publisher still
// carries the trace; a TracingPublisher replaces that traceparent with its
// producer span's, because it only restates the message's context.
func continueTrace(p *message.Message, handlerSpan trace.SpanContext) {
	ctx := p.Context()
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, handlerSpan)
		p.SetContext(ctx)
	}
	if p.Metadata.Get(metadata.TraceparentKey) != "" {
		return
	}
	inject(ctx, p)
}

// TracingPublisher returns pub wrapped so that every published message gets a
// producer span named "<topic> publish" and carries its W3C trace context in
// its metadata (metadata.TraceparentKey, metadata.TracestateKey).
//
// There is one span per message, not per Publish call: each message carries
// its own context, so the messages of one call may belong to different
// traces, and each consumer span must point at the span of the very message
// it processes. The spans of one call share its duration and its outcome.
//
// A span's parent is the span in the message's context. Without one, it is
// the traceparent the message already carries; without that, a new trace
// starts, seeded with the message's trace id (msgctx.TraceID of its context,
// else its x-trace-id metadata) when the provider's ID generator honours it.
//
// A traceparent the caller set explicitly is left as it is: the producer span
// is still recorded, as its child. A traceparent that points at the span of
// the message's own context (what Tracing adds to returned messages) is
// replaced by the producer span's, its child, which loses nothing. An
// unparsable one carries nothing and is replaced.
//
// attrs are added to every span: the root's MessagingSystem.
//
// With a no-op provider (noop.TracerProvider, or nil) pub is returned as it
// is.
func TracingPublisher(pub message.Publisher, tp trace.TracerProvider, attrs ...attribute.KeyValue) message.Publisher {
	if isNoop(tp) {
		return pub
	}
	return &tracingPublisher{Publisher: pub, tracer: tp.Tracer(TracerName), extra: trace.WithAttributes(attrs...)}
}

type tracingPublisher struct {
	message.Publisher
	tracer trace.Tracer
	extra  trace.SpanStartEventOption
}

// Publish starts one producer span per message, injects its trace context
// and publishes all messages in one call to the wrapped publisher, so its
// batching is kept.
func (p *tracingPublisher) Publish(topic string, msgs ...*message.Message) error {
	spans := make([]trace.Span, len(msgs))
	for i, msg := range msgs {
		spans[i] = p.start(topic, msg)
	}
	err := p.Publisher.Publish(topic, msgs...)
	for _, span := range spans {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
	return err
}

func (p *tracingPublisher) start(topic string, msg *message.Message) trace.Span {
	if msg.Metadata == nil {
		msg.Metadata = make(message.Metadata)
	}
	ctx := msg.Context()
	own := trace.SpanContextFromContext(ctx)
	explicit := false
	if tp := msg.Metadata.Get(metadata.TraceparentKey); tp != "" {
		carried := trace.SpanContextFromContext(traceContext.Extract(context.Background(), propagation.MapCarrier(msg.Metadata)))
		explicit = carried.IsValid() && (carried.TraceID() != own.TraceID() || carried.SpanID() != own.SpanID())
		if explicit && !own.IsValid() {
			ctx = trace.ContextWithRemoteSpanContext(ctx, carried)
		}
	}
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = seedTraceID(ctx, msg.Metadata)
	}
	ctx, span := p.tracer.Start(ctx, topic+" publish",
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			semconv.MessagingOperationTypeSend,
			semconv.MessagingOperationName("publish"),
			semconv.MessagingDestinationName(topic),
			semconv.MessagingMessageID(msg.UUID),
			semconv.MessagingMessageBodySize(len(msg.Payload)),
		), p.extra)
	if !explicit {
		inject(ctx, msg)
	}
	return span
}

// inject writes the span context of ctx into msg's metadata, replacing any
// trace context there (a stale tracestate must not outlive its traceparent).
// An invalid span context is not written: a traceparent with zero ids would
// only make the consumer discard it.
func inject(ctx context.Context, msg *message.Message) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	if msg.Metadata == nil {
		msg.Metadata = make(message.Metadata)
	}
	delete(msg.Metadata, metadata.TraceparentKey)
	delete(msg.Metadata, metadata.TracestateKey)
	traceContext.Inject(ctx, propagation.MapCarrier(msg.Metadata))
}

// seedTraceID puts the message's trace id (see correlationID) into ctx as its
// TraceID when ctx has none, for a root span to take.
//
// Why an ID generator rather than a made-up remote parent (the trace id with
// a random parent span id): that parent would never be exported, so every
// backend would show the trace with a missing root span, and the parent's
// sampled flag would bypass the sampling ratio. With the generator the span
// is a genuine root, and the ratio sampler, which decides on the trace id,
// decides the same for every service that sees the same x-trace-id. The
// price: with a provider whose generator ignores it, the span gets a random
// trace id (it is still correct, only not findable by the log's trace_id).
func seedTraceID(ctx context.Context, md message.Metadata) context.Context {
	if msgctx.TraceID(ctx) != "" {
		return ctx
	}
	if id := md.Get(metadata.TraceIDKey); validTraceID(id) {
		return msgctx.WithTraceID(ctx, id)
	}
	return ctx
}

// correlationID is the message's trace id as the logs show it: the one in
// ctx (Correlation put it there) or, without Correlation, its metadata's.
func correlationID(ctx context.Context, md message.Metadata) string {
	if id := msgctx.TraceID(ctx); id != "" {
		return id
	}
	return md.Get(metadata.TraceIDKey)
}

// validTraceID reports whether id is a W3C trace id: 32 lowercase hex
// digits, not all zero.
func validTraceID(id string) bool {
	_, err := trace.TraceIDFromHex(id)
	return err == nil && isLowerHex(id)
}

// TraceIDFromTraceparent returns the trace id of a W3C traceparent header
// value ("00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>"), so that
// Correlation can give a message that arrived with a traceparent but no
// x-trace-id the same trace id in its logs as in its trace. It reports false
// for a value the W3C Trace Context rules reject (then the trace context is
// ignored on extraction too, and a new trace id is right).
func TraceIDFromTraceparent(traceparent string) (string, bool) {
	// version "-" trace-id "-" parent-id "-" flags, then, for a version
	// after 00 only, more fields that this version must ignore.
	const versionLen, traceIDLen, spanIDLen, flagsLen = 2, 32, 16, 2
	const minLen = versionLen + 1 + traceIDLen + 1 + spanIDLen + 1 + flagsLen
	s := traceparent
	if len(s) < minLen || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return "", false
	}
	version, traceID, spanID, flags := s[:2], s[3:35], s[36:52], s[53:55]
	if !isLowerHex(version) || version == "ff" || !isLowerHex(flags) {
		return "", false
	}
	if version == "00" && len(s) != minLen {
		return "", false
	}
	if len(s) > minLen && s[minLen] != '-' {
		return "", false
	}
	if !validTraceID(traceID) {
		return "", false
	}
	if _, err := trace.SpanIDFromHex(spanID); err != nil || !isLowerHex(spanID) {
		return "", false
	}
	return traceID, true
}

func isLowerHex(s string) bool {
	for i := range len(s) {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
