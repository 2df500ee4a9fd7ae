package middleware_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/msgctx"
	"github.com/eventpipe/eventpipe/app/telemetry"
	"github.com/eventpipe/eventpipe/middleware"
)

// recordingProvider is a provider as app/telemetry builds it (its ID
// generator included, which x-trace-id seeding needs), recording every span
// in memory.
func recordingProvider(t *testing.T) (*tracetest.SpanRecorder, trace.TracerProvider) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSpanProcessor(rec),
		sdktrace.WithIDGenerator(telemetry.IDGenerator()),
	)
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return rec, tp
}

// pipeline is a traced service in miniature: a router consuming `in` with
// Correlation and Tracing, whose handler may publish to `out` through a
// TracingPublisher, over one in-memory pub/sub (which, as configured, does
// not pass contexts from publisher to subscriber: the trace has to travel in
// the metadata, as on every real broker).
type pipeline struct {
	in, out string
	raw     *gochannel.GoChannel
	pub     message.Publisher // raw, traced
	results <-chan *message.Message
}

const handlerName = "tracing-test-handler"

func startPipeline(t *testing.T, tp trace.TracerProvider, handle func(msg *message.Message, pub message.Publisher, out string) error) pipeline {
	t.Helper()
	raw := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 16}, watermill.NopLogger{})
	p := pipeline{
		in:  "in-" + watermill.NewShortUUID(),
		out: "out-" + watermill.NewShortUUID(),
		raw: raw,
		pub: middleware.TracingPublisher(raw, tp),
	}
	ctx, cancel := context.WithCancel(context.Background())
	results, err := raw.Subscribe(ctx, p.out)
	require.NoError(t, err)
	p.results = results

	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddMiddleware(middleware.Correlation, middleware.Tracing(tp))
	router.AddConsumerHandler(handlerName, p.in, raw, func(msg *message.Message) error {
		return handle(msg, p.pub, p.out)
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		assert.NoError(t, router.Run(ctx))
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = raw.Close()
	})
	select {
	case <-router.Running():
	case <-time.After(5 * time.Second):
		require.FailNow(t, "router did not start")
	}
	return p
}

func (p pipeline) receive(t *testing.T) *message.Message {
	t.Helper()
	select {
	case msg := <-p.results:
		msg.Ack()
		return msg
	case <-time.After(5 * time.Second):
		require.FailNow(t, "no follow-up message")
		return nil
	}
}

// endedSpans waits until the recorder holds n ended spans and returns them,
// in the order they ended.
func endedSpans(t *testing.T, rec *tracetest.SpanRecorder, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	require.Eventually(t, func() bool { return len(rec.Ended()) >= n }, 5*time.Second, 5*time.Millisecond)
	spans := rec.Ended()
	require.Len(t, spans, n)
	return spans
}

func spanNamed(t *testing.T, spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range spans {
		if s.Name() == name {
			return s
		}
	}
	require.Failf(t, "span not found", "no span %q", name)
	return nil
}

func attrOf(s sdktrace.ReadOnlySpan, key attribute.Key) string {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value.String()
		}
	}
	return ""
}

// publishFollowUp is the handler of the end-to-end tests: it publishes what a
// real handler would, a message built from the context it was given.
func publishFollowUp(msg *message.Message, pub message.Publisher, out string) error {
	return pub.Publish(out, msgctx.NewMessage(msg.Context(), []byte("follow-up")))
}

func TestTracingEndToEnd(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// send publishes the first message to p.in.
		send func(t *testing.T, p pipeline) (xTraceID string)
		// producerSpan: the first message was published through a
		// TracingPublisher, so its producer span is the trace's root;
		// otherwise the consumer span is, with the x-trace-id as trace id.
		producerSpan bool
	}{
		{
			name: "new trace from a traced publisher, seeded with the correlation id",
			send: func(t *testing.T, p pipeline) string {
				id := msgctx.NewTraceID()
				msg := msgctx.NewMessage(msgctx.WithTraceID(context.Background(), id), []byte("first"))
				require.NoError(t, p.pub.Publish(p.in, msg))
				return id
			},
			producerSpan: true,
		},
		{
			name: "x-trace-id without traceparent from an untraced publisher",
			send: func(t *testing.T, p pipeline) string {
				id := msgctx.NewTraceID()
				msg := message.NewMessage(watermill.NewUUID(), []byte("first"))
				msg.Metadata.Set(metadata.TraceIDKey, id)
				require.NoError(t, p.raw.Publish(p.in, msg))
				return id
			},
			producerSpan: false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec, tp := recordingProvider(t)
			p := startPipeline(t, tp, publishFollowUp)

			xTraceID := tt.send(t, p)
			followUp := p.receive(t)

			want := 2
			if tt.producerSpan {
				want = 3
			}
			spans := endedSpans(t, rec, want)
			consumer := spanNamed(t, spans, p.in+" process")
			followUpSpan := spanNamed(t, spans, p.out+" publish")

			// One trace, the one the logs name.
			traceID := consumer.SpanContext().TraceID()
			assert.Equal(t, xTraceID, traceID.String())
			for _, s := range spans {
				assert.Equal(t, traceID, s.SpanContext().TraceID(), s.Name())
			}
			assert.Equal(t, xTraceID, followUp.Metadata.Get(metadata.TraceIDKey))

			if tt.producerSpan {
				producer := spanNamed(t, spans, p.in+" publish")
				assert.Equal(t, trace.SpanKindProducer, producer.SpanKind())
				assert.False(t, producer.Parent().IsValid(), "the producer span is the root")
				assert.Equal(t, producer.SpanContext().SpanID(), consumer.Parent().SpanID())
				assert.True(t, consumer.Parent().IsRemote(), "the consumer's parent came over the wire")
			} else {
				assert.False(t, consumer.Parent().IsValid(), "the consumer span is a genuine root, not a made-up parent")
			}

			assert.Equal(t, trace.SpanKindConsumer, consumer.SpanKind())
			assert.Equal(t, codes.Unset, consumer.Status().Code)
			assert.Equal(t, p.in, attrOf(consumer, "messaging.destination.name"))
			assert.Equal(t, "process", attrOf(consumer, "messaging.operation.type"))
			assert.Equal(t, handlerName, attrOf(consumer, middleware.HandlerAttr))
			assert.NotEmpty(t, attrOf(consumer, "messaging.message.id"))

			assert.Equal(t, trace.SpanKindProducer, followUpSpan.SpanKind())
			assert.Equal(t, consumer.SpanContext().SpanID(), followUpSpan.Parent().SpanID())
			assert.Equal(t, p.out, attrOf(followUpSpan, "messaging.destination.name"))
			assert.Equal(t, "send", attrOf(followUpSpan, "messaging.operation.type"))
			assert.Equal(t, followUp.UUID, attrOf(followUpSpan, "messaging.message.id"))

			// The follow-up carries its producer span, for the next consumer.
			carried := extract(followUp.Metadata)
			assert.Equal(t, followUpSpan.SpanContext().SpanID(), carried.SpanID())
			assert.Equal(t, traceID, carried.TraceID())
			assert.True(t, carried.IsSampled())
		})
	}
}

func extract(md message.Metadata) trace.SpanContext {
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(md)))
}

func TestTracingRecordsFailure(t *testing.T) {
	t.Parallel()
	rec, tp := recordingProvider(t)
	// Fails the first delivery; the redelivery succeeds and gets a span of
	// its own, a sibling in the same trace.
	var deliveries atomic.Int32
	p := startPipeline(t, tp, func(msg *message.Message, pub message.Publisher, out string) error {
		if deliveries.Add(1) == 1 {
			return errors.New("database unavailable")
		}
		return publishFollowUp(msg, pub, out)
	})

	require.NoError(t, p.pub.Publish(p.in, message.NewMessage(watermill.NewUUID(), nil)))
	p.receive(t)

	spans := endedSpans(t, rec, 4)
	producer := spanNamed(t, spans, p.in+" publish")
	var failed, succeeded int
	for _, s := range spans {
		if s.Name() != p.in+" process" {
			continue
		}
		assert.Equal(t, producer.SpanContext().SpanID(), s.Parent().SpanID())
		switch s.Status().Code {
		case codes.Error:
			failed++
			assert.Equal(t, "database unavailable", s.Status().Description)
			assert.Equal(t, "transient", attrOf(s, "error.type"))
			require.Len(t, s.Events(), 1)
			assert.Equal(t, "exception", s.Events()[0].Name)
		default:
			succeeded++
		}
	}
	assert.Equal(t, 1, failed)
	assert.Equal(t, 1, succeeded)
}

func TestTracingNoopInjectsNothing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		tp   trace.TracerProvider
	}{
		{"noop provider", noop.NewTracerProvider()},
		{"nil provider", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			raw := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
			t.Cleanup(func() { _ = raw.Close() })
			assert.Same(t, raw, middleware.TracingPublisher(raw, tt.tp), "the publisher is not even wrapped")

			p := startPipeline(t, tt.tp, publishFollowUp)
			require.NoError(t, p.pub.Publish(p.in, msgctx.NewMessage(context.Background(), nil)))
			followUp := p.receive(t)
			assert.Empty(t, followUp.Metadata.Get(metadata.TraceparentKey))
			assert.Empty(t, followUp.Metadata.Get(metadata.TracestateKey))

			// Returned messages are left alone too, even when the incoming
			// message carried a trace context.
			in := message.NewMessage(watermill.NewUUID(), nil)
			in.Metadata.Set(metadata.TraceparentKey, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
			produced, err := middleware.Tracing(tt.tp)(func(*message.Message) ([]*message.Message, error) {
				return []*message.Message{message.NewMessage(watermill.NewUUID(), nil)}, nil
			})(in)
			require.NoError(t, err)
			assert.Empty(t, produced[0].Metadata)
		})
	}
}

// TestTracingTraceIDs covers which trace a delivery's span joins when
// Tracing runs on its own, without Correlation in front of it.
func TestTracingTraceIDs(t *testing.T) {
	t.Parallel()
	const (
		traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		fromParent  = "4bf92f3577b34da6a3ce929d0e0e4736"
		xTraceID    = "0af7651916cd43dd8448eb211c80319c"
	)
	tests := []struct {
		name          string
		metadata      message.Metadata
		wantTraceID   string // "" for a random one
		wantRoot      bool
		wantCorrelate string // CorrelationIDAttr, "" for none
	}{
		{name: "traceparent", metadata: message.Metadata{metadata.TraceparentKey: traceparent}, wantTraceID: fromParent},
		{name: "x-trace-id only", metadata: message.Metadata{metadata.TraceIDKey: xTraceID}, wantTraceID: xTraceID, wantRoot: true},
		{
			name:          "traceparent wins over a different x-trace-id, which is kept as an attribute",
			metadata:      message.Metadata{metadata.TraceparentKey: traceparent, metadata.TraceIDKey: xTraceID},
			wantTraceID:   fromParent,
			wantCorrelate: xTraceID,
		},
		{name: "x-trace-id that is no W3C trace id", metadata: message.Metadata{metadata.TraceIDKey: "trace-from-upstream"}, wantRoot: true, wantCorrelate: "trace-from-upstream"},
		{name: "nothing", metadata: message.Metadata{}, wantRoot: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec, tp := recordingProvider(t)
			in := message.NewMessage(watermill.NewUUID(), nil)
			in.Metadata = tt.metadata
			var inHandler trace.SpanContext
			_, err := middleware.Tracing(tp)(func(msg *message.Message) ([]*message.Message, error) {
				inHandler = trace.SpanContextFromContext(msg.Context())
				return nil, nil
			})(in)
			require.NoError(t, err)

			span := endedSpans(t, rec, 1)[0]
			assert.Equal(t, span.SpanContext(), inHandler, "the handler runs inside the span")
			if tt.wantTraceID != "" {
				assert.Equal(t, tt.wantTraceID, span.SpanContext().TraceID().String())
			}
			assert.Equal(t, tt.wantRoot, !span.Parent().IsValid())
			assert.Equal(t, tt.wantCorrelate, attrOf(span, middleware.CorrelationIDAttr))
		})
	}
}

// TestTracingReturnedMessages covers messages a handler returns for the
// router to publish: they continue the handler's trace whether the router's
// publisher is traced or not.
func TestTracingReturnedMessages(t *testing.T) {
	t.Parallel()
	explicit := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		name      string
		traced    bool
		preset    string // a traceparent the handler set itself
		wantChild bool   // carried traceparent is the producer span's
	}{
		{name: "untraced publisher carries the consumer span", traced: false},
		{name: "traced publisher carries its producer span", traced: true, wantChild: true},
		{name: "a traceparent the handler set is kept", traced: true, preset: explicit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec, tp := recordingProvider(t)
			in := message.NewMessage(watermill.NewUUID(), nil)
			produced, err := middleware.Tracing(tp)(func(*message.Message) ([]*message.Message, error) {
				out := message.NewMessage(watermill.NewUUID(), nil) // not from the handler's context
				if tt.preset != "" {
					out.Metadata.Set(metadata.TraceparentKey, tt.preset)
				}
				return []*message.Message{out}, nil
			})(in)
			require.NoError(t, err)
			require.Len(t, produced, 1)
			consumer := endedSpans(t, rec, 1)[0]

			var sink capturePublisher
			pub := message.Publisher(&sink)
			if tt.traced {
				pub = middleware.TracingPublisher(pub, tp)
			}
			require.NoError(t, pub.Publish("next", produced...))
			sent := sink.msgs[0]
			carried := extract(sent.Metadata)

			switch {
			case tt.preset != "":
				assert.Equal(t, tt.preset, sent.Metadata.Get(metadata.TraceparentKey))
				producer := endedSpans(t, rec, 2)[1]
				assert.Equal(t, consumer.SpanContext().SpanID(), producer.Parent().SpanID(),
					"the producer span still belongs to the handler's trace")
			case tt.wantChild:
				producer := endedSpans(t, rec, 2)[1]
				assert.Equal(t, consumer.SpanContext().SpanID(), producer.Parent().SpanID())
				assert.Equal(t, producer.SpanContext().SpanID(), carried.SpanID())
			default:
				assert.Equal(t, consumer.SpanContext().SpanID(), carried.SpanID())
			}
		})
	}
}

// capturePublisher keeps what is published to it; it fails when err is set.
type capturePublisher struct {
	msgs []*message.Message
	err  error
}

func (c *capturePublisher) Publish(_ string, msgs ...*message.Message) error {
	c.msgs = append(c.msgs, msgs...)
	return c.err
}

func (c *capturePublisher) Close() error { return nil }

func TestTracingPublisher(t *testing.T) {
	t.Parallel()
	explicit := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		name string
		// msgs builds the messages of one Publish call; tp is the provider.
		msgs    func(tp trace.TracerProvider) []*message.Message
		pubErr  error
		check   func(t *testing.T, msgs []*message.Message, spans []sdktrace.ReadOnlySpan)
		wantLen int
	}{
		{
			name: "one span per message, each the child of its message's context",
			msgs: func(tp trace.TracerProvider) []*message.Message {
				ctxA, a := tp.Tracer("test").Start(context.Background(), "a")
				ctxB, b := tp.Tracer("test").Start(context.Background(), "b")
				a.End()
				b.End()
				return []*message.Message{msgctx.NewMessage(ctxA, nil), msgctx.NewMessage(ctxB, nil)}
			},
			wantLen: 4,
			check: func(t *testing.T, msgs []*message.Message, spans []sdktrace.ReadOnlySpan) {
				a, b := spans[0], spans[1]
				for i, parent := range []sdktrace.ReadOnlySpan{a, b} {
					producer := spans[2+i]
					assert.Equal(t, "topic publish", producer.Name())
					assert.Equal(t, parent.SpanContext().SpanID(), producer.Parent().SpanID())
					assert.Equal(t, producer.SpanContext().SpanID(), extract(msgs[i].Metadata).SpanID())
				}
				assert.NotEqual(t, a.SpanContext().TraceID(), b.SpanContext().TraceID())
			},
		},
		{
			name: "an explicit traceparent is kept and parents the span",
			msgs: func(trace.TracerProvider) []*message.Message {
				msg := message.NewMessage(watermill.NewUUID(), nil)
				msg.Metadata.Set(metadata.TraceparentKey, explicit)
				msg.Metadata.Set(metadata.TracestateKey, "vendor=1")
				return []*message.Message{msg}
			},
			wantLen: 1,
			check: func(t *testing.T, msgs []*message.Message, spans []sdktrace.ReadOnlySpan) {
				assert.Equal(t, explicit, msgs[0].Metadata.Get(metadata.TraceparentKey))
				assert.Equal(t, "vendor=1", msgs[0].Metadata.Get(metadata.TracestateKey))
				assert.Equal(t, "00f067aa0ba902b7", spans[0].Parent().SpanID().String())
				assert.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", spans[0].SpanContext().TraceID().String())
			},
		},
		{
			name: "an unparsable traceparent is replaced, a stale tracestate dropped",
			msgs: func(trace.TracerProvider) []*message.Message {
				msg := message.NewMessage(watermill.NewUUID(), nil)
				msg.Metadata.Set(metadata.TraceparentKey, "garbage")
				msg.Metadata.Set(metadata.TracestateKey, "vendor=1")
				return []*message.Message{msg}
			},
			wantLen: 1,
			check: func(t *testing.T, msgs []*message.Message, spans []sdktrace.ReadOnlySpan) {
				assert.Equal(t, spans[0].SpanContext().SpanID(), extract(msgs[0].Metadata).SpanID())
				assert.Empty(t, msgs[0].Metadata.Get(metadata.TracestateKey))
			},
		},
		{
			name: "x-trace-id in the metadata seeds a new trace",
			msgs: func(trace.TracerProvider) []*message.Message {
				msg := message.NewMessage(watermill.NewUUID(), nil)
				msg.Metadata.Set(metadata.TraceIDKey, "0af7651916cd43dd8448eb211c80319c")
				return []*message.Message{msg}
			},
			wantLen: 1,
			check: func(t *testing.T, msgs []*message.Message, spans []sdktrace.ReadOnlySpan) {
				assert.Equal(t, "0af7651916cd43dd8448eb211c80319c", spans[0].SpanContext().TraceID().String())
				assert.Equal(t, "0af7651916cd43dd8448eb211c80319c", extract(msgs[0].Metadata).TraceID().String())
			},
		},
		{
			name: "an x-trace-id that is no W3C trace id seeds nothing",
			msgs: func(trace.TracerProvider) []*message.Message {
				msg := message.NewMessage(watermill.NewUUID(), nil)
				msg.Metadata.Set(metadata.TraceIDKey, "0AF7651916CD43DD8448EB211C80319C")
				return []*message.Message{msg}
			},
			wantLen: 1,
			check: func(t *testing.T, msgs []*message.Message, spans []sdktrace.ReadOnlySpan) {
				assert.True(t, spans[0].SpanContext().TraceID().IsValid())
				assert.NotEqual(t, "0af7651916cd43dd8448eb211c80319c", spans[0].SpanContext().TraceID().String())
			},
		},
		{
			name: "a failed publish fails every span of the call",
			msgs: func(trace.TracerProvider) []*message.Message {
				return []*message.Message{message.NewMessage(watermill.NewUUID(), nil), message.NewMessage(watermill.NewUUID(), nil)}
			},
			pubErr:  errors.New("broker gone"),
			wantLen: 2,
			check: func(t *testing.T, _ []*message.Message, spans []sdktrace.ReadOnlySpan) {
				for _, s := range spans {
					assert.Equal(t, codes.Error, s.Status().Code)
					assert.Equal(t, "broker gone", s.Status().Description)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec, tp := recordingProvider(t)
			msgs := tt.msgs(tp)
			sink := &capturePublisher{err: tt.pubErr}
			err := middleware.TracingPublisher(sink, tp).Publish("topic", msgs...)
			if tt.pubErr != nil {
				require.ErrorIs(t, err, tt.pubErr)
			} else {
				require.NoError(t, err)
			}
			require.Len(t, sink.msgs, len(msgs))
			for _, s := range rec.Ended() {
				if strings.HasSuffix(s.Name(), " publish") {
					assert.Equal(t, trace.SpanKindProducer, s.SpanKind())
				}
			}
			tt.check(t, msgs, endedSpans(t, rec, tt.wantLen))
		})
	}
}

func TestTraceIDFromTraceparent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
		ok             bool
	}{
		{"version 00", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "4bf92f3577b34da6a3ce929d0e0e4736", true},
		{"not sampled", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "4bf92f3577b34da6a3ce929d0e0e4736", true},
		{"future version with more fields", "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds", "4bf92f3577b34da6a3ce929d0e0e4736", true},
		{"future version, no more fields", "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "4bf92f3577b34da6a3ce929d0e0e4736", true},
		{"version 00 with more fields", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", "", false},
		{"future version, junk after flags", "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", "", false},
		{"version ff", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "", false},
		{"upper case", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "", false},
		{"zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "", false},
		{"zero parent id", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "", false},
		{"not hex", "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", "", false},
		{"bad flags", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g", "", false},
		{"short", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1", "", false},
		{"wrong separator", "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "", false},
		{"empty", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := middleware.TraceIDFromTraceparent(tt.in)
			assert.Equal(t, tt.ok, ok)
			assert.Equal(t, tt.want, got)

			// The helper agrees with the propagator that extracts the
			// span, so logs and trace never disagree about a header.
			sc := extract(message.Metadata{metadata.TraceparentKey: tt.in})
			assert.Equal(t, sc.IsValid(), ok, "the propagator disagrees")
			if ok {
				assert.Equal(t, tt.want, sc.TraceID().String())
			}
		})
	}
}

// BenchmarkTracingNoop measures what tracing costs when it is off (the
// default) next to a bare handler and to tracing that records.
func BenchmarkTracingNoop(b *testing.B) {
	handler := func(*message.Message) ([]*message.Message, error) { return nil, nil }
	// No span processor: spans are recorded, then dropped, so memory stays flat.
	recording := sdktrace.NewTracerProvider()
	neverSampled := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	b.Cleanup(func() { _ = neverSampled.Shutdown(context.Background()) })

	cases := []struct {
		name string
		h    message.HandlerFunc
	}{
		{"bare", handler},
		{"noop", middleware.Tracing(noop.NewTracerProvider())(handler)},
		{"sdk-never-sampled", middleware.Tracing(neverSampled)(handler)},
		{"sdk-recording", middleware.Tracing(recording)(handler)},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			msg := message.NewMessage(watermill.NewUUID(), []byte("payload"))
			msg.Metadata.Set(metadata.TraceparentKey, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
			ctx := msg.Context()
			b.ReportAllocs()
			for b.Loop() {
				msg.SetContext(ctx)
				if _, err := c.h(msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
