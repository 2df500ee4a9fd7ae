package publish_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/eventpipe/eventpipe/app/broker/memory"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/msgctx"
	"github.com/eventpipe/eventpipe/app/publish"
	"github.com/eventpipe/eventpipe/app/schemas"
	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/config"
	"github.com/eventpipe/eventpipe/handlers/booking"
	"github.com/eventpipe/eventpipe/handlers/disputes"
	"github.com/eventpipe/eventpipe/handlers/joinlink"
)

// allSpecs is a configuration enabling every spec.
func allSpecs() config.Config {
	cfg := config.Defaults()
	cfg.Demo.Enabled = true
	cfg.StackUp.Enabled = true
	cfg.Interviews.Enabled = true
	cfg.Disputes.Enabled = true
	cfg.Booking.Enabled = true
	cfg.JoinLink.Enabled = true
	return cfg
}

type body struct {
	spec, topic string
	body        []byte
}

// validBodies is a valid body of every spec, as its producers write it.
func validBodies(t *testing.T) []body {
	t.Helper()
	at := time.Date(2026, 11, 12, 9, 14, 3, 512e6, time.UTC)
	env, err := disputes.NewEnvelope(disputes.Event{TransactionFlagged: &disputes.TransactionFlagged{TxnID: "txn_02", RiskScore: 85.5, Reason: "velocity"}},
		"txn_02", "4bf92f3577b34da6a3ce929d0e0e4736", at)
	require.NoError(t, err)
	dispute, err := disputes.Encode(env)
	require.NoError(t, err)
	ev := booking.Event{BookingSessionID: "bks_7f3a", Type: booking.TypeStepCompleted, OccurredAt: at, StepID: "pick-slot", Data: json.RawMessage(`{"slot":"10:00"}`)}
	ev.EventID, err = booking.DeriveEventID(ev)
	require.NoError(t, err)
	session, err := booking.Encode(ev)
	require.NoError(t, err)
	link, err := joinlink.Encode(joinlink.NewMessage(joinlink.Data{ProgramSessionID: 42, Role: "attendee", BatchSize: 50, ActorUserID: 7}, at))
	require.NoError(t, err)
	return []body{
		{"demo", "demo.greetings", []byte(`{"name":"Ada"}`)},
		{"stackup", "stackup.core-to-ai/analyze.resume", []byte(smoke)},
		{"interviews", "report-generate", []byte(`{"interviewId":"6650a1b2c3d4e5f607182930","organizationId":"6650a1b2c3d4e5f607182931"}`)},
		{"disputes", disputes.DomainEventsQueue, dispute},
		{"booking", booking.Queue, session},
		{"joinlink", joinlink.Queue, link},
	}
}

func TestValidBodyOfEverySpecPasses(t *testing.T) {
	t.Parallel()
	contract, err := publish.Load(allSpecs())
	require.NoError(t, err)
	for _, b := range validBodies(t) {
		msg, err := contract.Message(context.Background(), b.topic, b.body)
		require.NoError(t, err, b.spec)
		assert.NotEmpty(t, msg.UUID, b.spec)
		assert.NotEmpty(t, msg.Metadata.Get(metadata.TraceIDKey), b.spec)
		assert.Equal(t, b.body, []byte(msg.Payload), b.spec)
	}
}

// Strict on publish: a field no schema names is refused with the schema's
// error and its path, before the route's Go check runs.
func TestUnknownFieldIsRefusedWithTheSchemasError(t *testing.T) {
	t.Parallel()
	cat, err := schemas.Load()
	require.NoError(t, err)
	contract, err := publish.Load(allSpecs())
	require.NoError(t, err)
	for _, b := range validBodies(t) {
		if b.spec == "demo" {
			continue // no schema: its Go check refuses unknown fields (the cli tests)
		}
		unknown := append([]byte(`{"unexpectedField":1,`), b.body[1:]...)
		_, err := contract.Message(context.Background(), b.topic, unknown)
		var refused *publish.RefusedError
		require.ErrorAs(t, err, &refused, b.spec)
		var invalid *schemas.ValidationError
		require.ErrorAs(t, err, &invalid, "%s: the schema's objection: %v", b.spec, err)
		assert.Equal(t, schemas.Strict, invalid.Mode)
		assert.Contains(t, err.Error(), "additional properties 'unexpectedField' not allowed", b.spec)
		assert.Contains(t, err.Error(), "nothing sent", b.spec)
	}

	// A nested field: the schema's error names its path (the lenient view,
	// a consumer's, would ignore it).
	nested := strings.Replace(smoke, `"analyzedDocumentId":1`, `"analyzedDocumentId":1,"priority":"high"`, 1)
	require.NoError(t, cat.ValidateQueue("ai.analyze.resume", []byte(nested), schemas.Lenient))
	_, err = contract.Message(context.Background(), "stackup.core-to-ai/analyze.resume", []byte(nested))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "at '/payload': additional properties 'priority' not allowed")
}

// What the schema cannot say, the route's Go check still refuses: a
// join-link correlationId that is not join-link-<programSessionId>.
func TestTheRoutesCheckStillRuns(t *testing.T) {
	t.Parallel()
	contract, err := publish.Load(allSpecs())
	require.NoError(t, err)
	link, err := joinlink.Encode(joinlink.NewMessage(joinlink.Data{ProgramSessionID: 42}, time.Now()))
	require.NoError(t, err)
	wrong := strings.Replace(string(link), "join-link-42", "join-link-43", 1)
	require.NotEqual(t, string(link), wrong)
	_, err = contract.Message(context.Background(), joinlink.Queue, []byte(wrong))
	var refused *publish.RefusedError
	require.ErrorAs(t, err, &refused)
	var invalid *schemas.ValidationError
	assert.False(t, errors.As(err, &invalid), "the Go check's, not the schema's: %v", err)
}

func TestIDsAndTrace(t *testing.T) {
	t.Parallel()
	contract, err := publish.Load(allSpecs())
	require.NoError(t, err)
	ctx := context.Background()

	// The body's ids, unless given.
	msg, err := contract.Message(ctx, "stackup.core-to-ai/analyze.resume", []byte(smoke))
	require.NoError(t, err)
	assert.Equal(t, "smoke-1", msg.UUID)
	assert.Equal(t, "local-test", msg.Metadata.Get(metadata.TraceIDKey))
	msg, err = contract.Message(ctx, "stackup.core-to-ai/analyze.resume", []byte(smoke),
		publish.WithID("given"), publish.WithMetadata(metadata.TraceIDKey, "given-trace"), publish.WithMetadata("x-other", "1"))
	require.NoError(t, err)
	assert.Equal(t, "given", msg.UUID)
	assert.Equal(t, "given-trace", msg.Metadata.Get(metadata.TraceIDKey))
	assert.Equal(t, "1", msg.Metadata.Get("x-other"))

	// A body without ids: the handler's trace continues, the message
	// carries the caller's context.
	hctx := msgctx.WithTraceID(ctx, "4bf92f3577b34da6a3ce929d0e0e4736")
	msg, err = contract.Message(hctx, "demo.greetings", []byte(`{"name":"Ada"}`))
	require.NoError(t, err)
	assert.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", msg.Metadata.Get(metadata.TraceIDKey))
	assert.Equal(t, hctx, msg.Context())
	// else the OpenTelemetry span's, else a new W3C trace id.
	tp := sdktrace.NewTracerProvider()
	sctx, span := tp.Tracer("test").Start(ctx, "caller")
	defer span.End()
	msg, err = contract.Message(sctx, "demo.greetings", []byte(`{"name":"Ada"}`))
	require.NoError(t, err)
	assert.Equal(t, span.SpanContext().TraceID().String(), msg.Metadata.Get(metadata.TraceIDKey))
	msg, err = contract.Message(ctx, "demo.greetings", []byte(`{"name":"Ada"}`))
	require.NoError(t, err)
	assert.Len(t, msg.Metadata.Get(metadata.TraceIDKey), 32)
	assert.Len(t, msg.UUID, 36)
}

func TestUnknownTopics(t *testing.T) {
	t.Parallel()
	contract, err := publish.Load(allSpecs())
	require.NoError(t, err)
	ctx := context.Background()
	var unknown *publish.UnknownTopicError

	_, err = contract.Message(ctx, "no.such.queue", []byte(`{}`))
	require.ErrorAs(t, err, &unknown)
	assert.False(t, unknown.Unbound)
	assert.Contains(t, err.Error(), "demo.greetings", "names the known queues")

	_, err = contract.Message(ctx, "stackup.core-to-ai/no.such.key", []byte(`{}`))
	require.ErrorAs(t, err, &unknown)
	assert.True(t, unknown.Unbound)

	msg, err := contract.Message(ctx, "no.such.queue", []byte(`not json`), publish.Raw(), publish.WithID("raw-1"))
	require.NoError(t, err, "Raw checks nothing")
	assert.Equal(t, "raw-1", msg.UUID)
}

func TestOpenRefusesTheMemoryBroker(t *testing.T) {
	t.Parallel()
	_, err := publish.Open(context.Background(), config.Defaults(), publish.Options{})
	require.ErrorIs(t, err, publish.ErrMemoryBroker)
}

// A refused body sends nothing, and a tracing provider gives the sent
// message a traceparent (the producer span, with the broker's
// messaging.system).
func TestPublishSendsOnlyWhatPasses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := allSpecs()
	broker, err := memory.New(memory.Config{Persistent: true}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = broker.Close() })
	contract, err := publish.Load(cfg)
	require.NoError(t, err)
	spans := tracetest.NewSpanRecorder()
	pub, err := publish.New(cfg, contract, broker, publish.Options{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))})
	require.NoError(t, err)

	_, err = pub.Publish(ctx, "demo.greetings", []byte(`{"name":"Ada","extra":1}`))
	require.Error(t, err)
	sent, err := pub.Publish(ctx, "demo.greetings", []byte(`{"name":"Ada"}`), publish.WithID("ok-1"))
	require.NoError(t, err)
	require.NoError(t, pub.Close())

	deliveries, err := broker.Subscribe(ctx, "demo.greetings")
	require.NoError(t, err)
	got := <-deliveries
	got.Ack()
	assert.Equal(t, "ok-1", got.UUID, "the refused one was never sent")
	assert.Equal(t, sent.Metadata.Get(metadata.TraceIDKey), got.Metadata.Get(metadata.TraceIDKey))
	assert.NotEmpty(t, got.Metadata.Get(metadata.TraceparentKey))
	ended := spans.Ended()
	require.Len(t, ended, 1, "one producer span, for the message sent")
	assert.Equal(t, "demo.greetings publish", ended[0].Name())
	assert.Contains(t, ended[0].Attributes(), semconv.MessagingSystemKey.String("eventpipe.memory"))
	select {
	case m := <-deliveries:
		t.Fatalf("unexpected second message %s", m.UUID)
	case <-time.After(100 * time.Millisecond):
	}
}

// Open against a real broker (PostgreSQL, a schema of its own): the message
// reaches the queue's consumer with the body's ids.
func TestOpenPublishesToTheConfiguredBroker(t *testing.T) {
	t.Parallel()
	kind := config.KindPostgres
	scope := testbrokers.Scope(t, kind)
	cfg := allSpecs()
	cfg.Broker.Kind = kind
	cfg.Postgres.DSN = testenv.PostgresDSN(t)
	cfg.Postgres.Schema = scope
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	consumer := testbrokers.New(t, kind, scope)
	deliveries, err := consumer.Subscribe(ctx, "ai.analyze.resume")
	require.NoError(t, err)

	pub, err := publish.Open(ctx, cfg, publish.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, pub.Close()) }()
	_, err = pub.Publish(ctx, "stackup.core-to-ai/analyze.resume", []byte(smoke))
	require.NoError(t, err)
	select {
	case got := <-deliveries:
		got.Ack()
		assert.Equal(t, "smoke-1", got.UUID)
		assert.Equal(t, "local-test", got.Metadata.Get(metadata.TraceIDKey))
		assert.JSONEq(t, smoke, string(got.Payload))
	case <-ctx.Done():
		t.Fatal("nothing delivered")
	}
}
