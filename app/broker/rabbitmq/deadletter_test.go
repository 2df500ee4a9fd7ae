package rabbitmq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/rabbitmq"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/topology"
)

// deadLetterTopology is the StackUp shape: work queues on a topic exchange,
// dead-lettered to a direct exchange with a routing key of their own.
func deadLetterTopology() topology.Topology {
	return topology.Topology{
		Name:      "dl",
		Exchanges: []topology.Exchange{{Name: "jobs", Type: topology.Topic}, {Name: "jobs.dlx", Type: topology.Direct}},
		Queues: []topology.Queue{{
			Name:       "work",
			DeadLetter: &topology.DeadLetter{Queue: "dlq.work", Exchange: "jobs.dlx", RoutingKey: "dlq.work"},
		}},
		Bindings: []topology.Binding{{Exchange: "jobs", Queue: "work", Pattern: "job.*"}},
	}
}

// deadLetterOf builds the copy the guarantees middleware publishes for msg
// (middleware.Policy.deadLetter): same id and body, its metadata without the
// attempt, the history, and msg's context.
func deadLetterOf(msg *message.Message, reason string) *message.Message {
	dl := message.NewMessage(msg.UUID, msg.Payload)
	for k, v := range msg.Metadata {
		if k != metadata.AttemptKey {
			dl.Metadata.Set(k, v)
		}
	}
	now := time.Now().UTC()
	metadata.SetDeadLetter(dl, metadata.DeadLetter{Reason: reason, Class: "permanent", Attempts: 1,
		FirstFailureAt: now, LastFailureAt: now, SourceQueue: "work", DeadLetteredAt: now})
	dl.SetContext(msg.Context())
	return dl
}

// A dead letter of eventpipe's reaches the DLQ the way a broker reject would:
// through the source queue's declared dead-letter exchange and routing key
// (so a peer's queue bound there gets it too), with every header of the
// delivery in its AMQP type, Spring's x-exception-message,
// x-original-exchange and x-original-routingKey, eventpipe's record, and the
// delivery's properties.
func TestDeadLetterGoesThroughTheDeclaredExchange(t *testing.T) {
	t.Parallel()
	amqpURL, _ := newVhost(t)
	declared, err := rabbitmq.NewDeclared(deadLetterTopology(), nil)
	require.NoError(t, err)
	ps := newPubSub(t, amqpURL, func(c *rabbitmq.Config) { c.Topology = declared })
	require.NoError(t, ps.SubscribeInitialize("work"))

	ch := amqpChannel(t, amqpURL)
	peerDLQ := brokertest.Topic(t) + "-peer-dlq"
	_, err = ch.QueueDeclare(peerDLQ, false, true, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(peerDLQ, "dlq.work", "jobs.dlx", false, nil))

	died := time.Date(2026, 4, 27, 15, 0, 0, 0, time.UTC)
	headers := amqp.Table{
		"x-attempt":  int64(0),
		"x-trace-id": "trace-1",
		"count":      int32(7),
		"flag":       true,
		"ratio":      2.5,
		"x-death":    []any{amqp.Table{"count": int64(1), "queue": "elsewhere", "reason": "rejected", "time": died}},
	}
	require.NoError(t, ch.PublishWithContext(context.Background(), "jobs", "job.run", true, false, amqp.Publishing{
		MessageId: "peer-msg-1", CorrelationId: "req-9", ContentType: "application/json", Type: "job.run", AppId: "peer",
		Timestamp: died, DeliveryMode: amqp.Persistent, Expiration: "600000", Headers: headers, Body: []byte(`{"n":1}`),
	}))

	msgs, err := ps.Subscribe(context.Background(), "work")
	require.NoError(t, err)
	got := brokertest.Next(t, msgs, 30*time.Second)
	require.NoError(t, ps.Publish("dlq.work", deadLetterOf(got, "handler: boom")))
	got.Ack()

	for _, q := range []string{"dlq.work", peerDLQ} {
		d := getOne(t, ch, q)
		require.NoError(t, d.Ack(false))
		assert.Equal(t, "jobs.dlx", d.Exchange, "%s: through the declared dead-letter exchange", q)
		assert.Equal(t, "dlq.work", d.RoutingKey, "%s: with the declared routing key", q)
		assert.Equal(t, "peer-msg-1", d.MessageId)
		assert.Equal(t, "req-9", d.CorrelationId)
		assert.Equal(t, "application/json", d.ContentType)
		assert.Equal(t, "job.run", d.Type)
		assert.Equal(t, "peer", d.AppId)
		assert.True(t, d.Timestamp.Equal(died))
		assert.Empty(t, d.Expiration, "a dead letter does not expire on its way")
		assert.Equal(t, amqp.Persistent, d.DeliveryMode)
		assert.Equal(t, `{"n":1}`, string(d.Body))

		assert.Equal(t, int32(7), d.Headers["count"], "typed headers stay typed")
		assert.Equal(t, true, d.Headers["flag"])
		assert.InDelta(t, 2.5, d.Headers["ratio"], 0)
		assert.Equal(t, "trace-1", d.Headers["x-trace-id"])
		death, ok := d.Headers["x-death"].([]any)
		require.True(t, ok, "x-death is still an array: %T", d.Headers["x-death"])
		require.Len(t, death, 1)
		assert.Equal(t, "elsewhere", death[0].(amqp.Table)["queue"])

		assert.Equal(t, "handler: boom", d.Headers[rabbitmq.HeaderExceptionMessage])
		assert.Equal(t, "jobs", d.Headers[rabbitmq.HeaderOriginalExchange])
		assert.Equal(t, "job.run", d.Headers[rabbitmq.HeaderOriginalRoutingKey])
		assert.Contains(t, d.Headers[metadata.DeadLetterKey], `"source_queue":"work"`, "eventpipe's record, for `eventpipe dlq`")
		for _, internal := range []string{"x-eventpipe-attempt", "x-first-failure-at", metadata.ExchangeKey, metadata.RoutingKeyKey, "_watermill_message_uuid"} {
			assert.NotContains(t, d.Headers, internal)
		}
	}

	// eventpipe reads its own record back. (A dead letter made without the
	// delivery at hand — its context gone — still goes the declared way.)
	dlqMsgs, err := ps.Subscribe(context.Background(), "dlq.work")
	require.NoError(t, err)
	again := deadLetterOf(got, "again")
	again.SetContext(context.Background())
	require.NoError(t, ps.Publish("dlq.work", again))
	back := brokertest.Next(t, dlqMsgs, 30*time.Second)
	back.Ack()
	assert.Equal(t, "jobs.dlx", back.Metadata.Get(metadata.ExchangeKey))
	assert.Equal(t, "job.run", back.Metadata.Get(rabbitmq.HeaderOriginalRoutingKey))
	record, ok, err := metadata.DeadLetterOf(back)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "work", record.SourceQueue)
	assert.Equal(t, "again", record.Reason)
}

// A dead letter no queue takes (the DLQ's binding is gone) fails its publish,
// so the middleware nacks the original instead of acking it.
func TestDeadLetterWithoutABindingFails(t *testing.T) {
	t.Parallel()
	amqpURL, _ := newVhost(t)
	declared, err := rabbitmq.NewDeclared(deadLetterTopology(), nil)
	require.NoError(t, err)
	ps := newPubSub(t, amqpURL, func(c *rabbitmq.Config) { c.Topology = declared })
	require.NoError(t, ps.SubscribeInitialize("work"))
	ch := amqpChannel(t, amqpURL)
	require.NoError(t, ch.QueueUnbind("dlq.work", "dlq.work", "jobs.dlx", nil))

	require.NoError(t, ps.Publish("jobs/job.run", message.NewMessage("m-1", []byte("{}"))))
	msgs, err := ps.Subscribe(context.Background(), "work")
	require.NoError(t, err)
	got := brokertest.Next(t, msgs, 30*time.Second)
	defer got.Ack()
	err = ps.Publish("dlq.work", deadLetterOf(got, "boom"))
	var unroutable *rabbitmq.UnroutableError
	require.True(t, errors.As(err, &unroutable), "%v", err)
	assert.Equal(t, "jobs.dlx", unroutable.Exchange)
	assert.Equal(t, "dlq.work", unroutable.RoutingKey)
}
