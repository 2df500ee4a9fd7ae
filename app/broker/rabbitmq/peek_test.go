package rabbitmq_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/rabbitmq"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// TestPeekEffects pins what decision 0029 measured of a peek through the
// management API, read back with a plain basic.get: the messages stay where
// they were, in order, with their body and typed headers (a dead letter's
// x-death table, Spring's x-exception-message), flagged redelivered; a quorum
// queue raises x-delivery-count by one per peek. The peeked metadata shows
// the headers as a consumer of this adapter would see them.
func TestPeekEffects(t *testing.T) {
	t.Parallel()
	amqpURL, _ := newVhost(t)
	for _, qt := range queueTypes {
		t.Run(string(qt), func(t *testing.T) {
			t.Parallel()
			ps := newPubSub(t, amqpURL, func(c *rabbitmq.Config) { c.QueueType = qt })
			queue := brokertest.Topic(t)
			require.NoError(t, ps.SubscribeInitialize(queue))
			death := []any{amqp.Table{"count": int64(3), "queue": "ai.analyze.resume", "reason": "rejected"}}
			for _, id := range []string{"dead-1", "dead-2"} {
				publishRaw(t, amqpURL, queue, amqp.Publishing{
					MessageId: id, ContentType: "application/json", Body: []byte(`{"id":"` + id + `"}`),
					Headers: amqp.Table{"x-death": death, "x-exception-message": "boom", metadata.AttemptKey: int32(0)},
				})
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for range 2 {
				got, err := ps.Peek(ctx, queue, 10)
				require.NoError(t, err)
				require.Len(t, got.Messages, 2)
				assert.True(t, got.Complete)
				assert.Contains(t, got.Effects, "redelivered")
				assert.Equal(t, "dead-1", got.Messages[0].UUID)
				assert.Equal(t, `{"id":"dead-1"}`, string(got.Messages[0].Payload))
				assert.Equal(t, "boom", got.Messages[0].Metadata.Get("x-exception-message"))
				assert.JSONEq(t, `[{"count":3,"queue":"ai.analyze.resume","reason":"rejected"}]`, got.Messages[0].Metadata.Get("x-death"))
				assert.Equal(t, "application/json", got.Messages[0].Metadata.Get(rabbitmq.MetadataContentType))
			}

			conn, err := amqp.Dial(amqpURL)
			require.NoError(t, err)
			defer conn.Close()
			ch, err := conn.Channel()
			require.NoError(t, err)
			for _, id := range []string{"dead-1", "dead-2"} {
				d, ok, err := ch.Get(queue, true)
				require.NoError(t, err)
				require.True(t, ok, "the peeked message is still in the queue")
				assert.Equal(t, id, d.MessageId, "in its place")
				assert.Equal(t, `{"id":"`+id+`"}`, string(d.Body))
				assert.True(t, d.Redelivered, "the measured effect: flagged redelivered")
				assert.Equal(t, "boom", d.Headers["x-exception-message"])
				assert.Equal(t, death, d.Headers["x-death"], "typed headers kept")
				if qt == rabbitmq.QueueQuorum {
					assert.EqualValues(t, 2, d.Headers["x-delivery-count"], "one delivery counted per peek")
				}
			}
		})
	}
}

// A quorum queue with a single active consumer (a FIFO queue's DLQ) refuses
// the management get (405 RESOURCE_LOCKED): the peek reads it through a
// short-lived consumer and returns every message in its place, in order,
// flagged redelivered with x-delivery-count+1 per peek. While another
// consumer is the active one, the peek sees nothing and says so.
func TestPeekQuorumSingleActiveConsumer(t *testing.T) {
	t.Parallel()
	amqpURL, _ := newVhost(t)
	ps := newPubSub(t, amqpURL, func(c *rabbitmq.Config) { c.QueueType = rabbitmq.QueueQuorum })
	queue := brokertest.Topic(t) + "-dlq.fifo"
	conn, err := amqp.Dial(amqpURL)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum", "x-single-active-consumer": true})
	require.NoError(t, err)
	ids := []string{"dead-1", "dead-2", "dead-3"}
	for _, id := range ids {
		publishRaw(t, amqpURL, queue, amqp.Publishing{MessageId: id, Body: []byte(`{"id":"` + id + `"}`),
			Headers: amqp.Table{"x-exception-message": "boom"}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	for range 2 {
		got, err := ps.Peek(ctx, queue, 10)
		require.NoError(t, err)
		require.Len(t, got.Messages, 3, "%+v", got)
		assert.True(t, got.Complete)
		assert.Contains(t, got.Effects, "single active consumer")
		for i, id := range ids {
			assert.Equal(t, id, got.Messages[i].UUID, "in order")
			assert.Equal(t, `{"id":"`+id+`"}`, string(got.Messages[i].Payload))
			assert.Equal(t, "boom", got.Messages[i].Metadata.Get("x-exception-message"))
		}
	}
	got, err := ps.Peek(ctx, queue, 2)
	require.NoError(t, err)
	require.Len(t, got.Messages, 2)
	assert.Equal(t, []string{"dead-1", "dead-2"}, []string{got.Messages[0].UUID, got.Messages[1].UUID})
	assert.False(t, got.Complete, "one stayed behind")

	// Read back with a consumer (basic.get is refused here too).
	require.NoError(t, ch.Qos(3, 0, false))
	deliveries, err := ch.Consume(queue, "check", false, false, false, false, nil)
	require.NoError(t, err)
	for _, id := range ids {
		select {
		case d := <-deliveries:
			assert.Equal(t, id, d.MessageId, "still in its place")
			assert.True(t, d.Redelivered)
			// The max-2 peek read the whole queue too: on a quorum queue
			// a partial read would have moved the returned head behind
			// dead-3.
			assert.EqualValues(t, 3, d.Headers["x-delivery-count"], "one delivery counted per peek")
		case <-time.After(10 * time.Second):
			t.Fatalf("%s is no longer in the queue", id)
		}
	}

	// This consumer is now the active one (its prefetch full): a peek of
	// the next message gets nothing, and says so.
	publishRaw(t, amqpURL, queue, amqp.Publishing{MessageId: "dead-4", Body: []byte(`{}`)})
	got, err = ps.Peek(ctx, queue, 10)
	require.NoError(t, err)
	assert.Empty(t, got.Messages)
	assert.False(t, got.Complete)
	assert.Contains(t, got.Effects, "another consumer is the queue's single active one")
}
