package middleware_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/middleware"
)

func TestMessagingSystemOfEachBrokerKind(t *testing.T) {
	t.Parallel()
	for kind, want := range map[string]string{
		"rabbitmq": "rabbitmq", "sqs": "aws_sqs", "postgres": "postgresql", "memory": "eventpipe.memory",
	} {
		got := middleware.MessagingSystem(kind)
		assert.Equal(t, semconv.MessagingSystemKey, got.Key, kind)
		assert.Equal(t, want, got.Value.AsString(), kind)
	}
}

// The root's broker kind is on the producer span and, through the chain,
// on the consumer span.
func TestMessagingSystemOnProducerAndConsumerSpans(t *testing.T) {
	t.Parallel()
	rec, tp := recordingProvider(t)
	pub := middleware.TracingPublisher(&capturePublisher{}, tp, middleware.MessagingSystem("sqs"))
	require.NoError(t, pub.Publish("q", message.NewMessage(watermill.NewUUID(), []byte(`{}`))))

	chain := middleware.Chain(middleware.Deps{Tracer: tp, MessagingSystem: "rabbitmq",
		Logger: slog.New(slog.DiscardHandler), Metrics: middleware.NewMetrics(prometheus.NewRegistry())}, route.Route{Name: "r", Queue: "q"})
	h := func(*message.Message) ([]*message.Message, error) { return nil, nil }
	for i := len(chain) - 1; i >= 0; i-- {
		h = chain[i](h)
	}
	msg := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
	msg.SetContext(context.Background())
	_, err := h(msg)
	require.NoError(t, err)

	spans := endedSpans(t, rec, 2)
	assert.Equal(t, "aws_sqs", attrOf(spanNamed(t, spans, "q publish"), semconv.MessagingSystemKey))
	var consumer string
	for _, s := range spans {
		if s.Name() != "q publish" {
			consumer = attrOf(s, semconv.MessagingSystemKey)
		}
	}
	assert.Equal(t, "rabbitmq", consumer)

	// Without a kind, no attribute (as before).
	rec2, tp2 := recordingProvider(t)
	require.NoError(t, middleware.TracingPublisher(&capturePublisher{}, tp2).Publish("q", message.NewMessage(watermill.NewUUID(), nil)))
	assert.Empty(t, attrOf(endedSpans(t, rec2, 1)[0], semconv.MessagingSystemKey))
}
