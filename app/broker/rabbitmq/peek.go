package rabbitmq

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventpipe/eventpipe/app/broker"
)

var _ broker.Peeker = (*PubSub)(nil)

// What a peek leaves changed (decision 0029), measured on RabbitMQ 3.10 and
// pinned by TestPeekEffects.
const (
	peekEffectsClassic = "RabbitMQ has no read-only read: each message read was requeued in place by the management API (order, body and headers kept) " +
		"with its redelivered flag set, which the next consumer of a classic queue counts as one delivery; eventpipe's redrive resets the count of the copy it sends"
	peekEffectsQuorum = "RabbitMQ has no read-only read: each message read was requeued in place by the management API (order, body and headers kept) " +
		"with its redelivered flag set and its x-delivery-count raised by one; eventpipe's redrive resets the count of the copy it sends, but RabbitMQ 4 drops (or dead-letters) " +
		"a quorum queue's message past the queue's delivery limit (20 by default), peeks included"
)

// Peek reads up to max messages of queue from its head through the
// management HTTP API (POST /api/queues/{vhost}/{queue}/get, ackmode
// ack_requeue_true), which RabbitMQ requeues in place: nothing is consumed,
// the order stays, the body and headers stay, and the messages are never out
// of a consumer's reach for longer than the request. AMQP itself has no
// peek: basic.get then a reject or a closed channel does the same requeue
// (redelivered flag, quorum delivery count), and a message read through a
// consumer of this adapter would be counted as a failed attempt (its nack
// republishes it with x-attempt+1 at the back of the queue). The messages
// carry the metadata a delivery would give them before this peek (the
// attempt number as the queue counted it). Peeked.Effects says what changed.
// It needs Config.ManagementURL; a queue that does not exist is an error
// wrapping broker.ErrQueueNotFound.
func (p *PubSub) Peek(ctx context.Context, queue string, max int) (broker.Peeked, error) {
	typ, depth, err := p.peekQueue(ctx, queue)
	if err != nil {
		return broker.Peeked{}, err
	}
	out := broker.Peeked{}
	if max <= 0 || depth == 0 {
		out.Complete = depth == 0
		return out, nil
	}
	req, _ := json.Marshal(map[string]any{"count": max, "ackmode": "ack_requeue_true", "encoding": "auto"})
	body, err := p.management(ctx, http.MethodPost, "/api/queues/%s/%s/get", queue, req)
	if errors.Is(err, errManagementNotFound) {
		return broker.Peeked{}, fmt.Errorf("rabbitmq: peek %s: %w", queue, broker.ErrQueueNotFound)
	}
	if err != nil {
		return broker.Peeked{}, fmt.Errorf("rabbitmq: peek %s: %w", queue, err)
	}
	var got []managementMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&got); err != nil {
		return broker.Peeked{}, fmt.Errorf("rabbitmq: peek %s: %w", queue, err)
	}
	out.Effects = peekEffectsClassic
	if typ == QueueQuorum {
		out.Effects = peekEffectsQuorum
	}
	for _, m := range got {
		d, err := m.delivery()
		if err != nil {
			return broker.Peeked{}, fmt.Errorf("rabbitmq: peek %s: %w", queue, err)
		}
		msg, err := p.marshaler.Unmarshal(d)
		if err != nil {
			return broker.Peeked{}, fmt.Errorf("rabbitmq: peek %s: %w", queue, err)
		}
		setAttempt(msg, d, typ)
		out.Messages = append(out.Messages, msg)
	}
	// The get's last message tells how many stayed behind it.
	out.Complete = len(got) == 0 || got[len(got)-1].MessageCount == 0
	return out, nil
}

// peekQueue returns the queue's type and depth from the management API.
func (p *PubSub) peekQueue(ctx context.Context, queue string) (QueueType, int64, error) {
	body, err := p.management(ctx, http.MethodGet, "/api/queues/%s/%s?columns=type,messages", queue, nil)
	if errors.Is(err, errManagementNotFound) {
		// The management API can lag behind a new queue: the broker decides.
		if _, _, derr := p.readyMessages(queue); derr != nil {
			return "", 0, derr
		}
		return QueueClassic, 0, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("rabbitmq: peek %s (the management API is how RabbitMQ shows a message without taking it): %w", queue, err)
	}
	var q struct {
		Type     string `json:"type"`
		Messages *int64 `json:"messages"`
	}
	if err := json.Unmarshal(body, &q); err != nil {
		return "", 0, fmt.Errorf("rabbitmq: peek %s: %w", queue, err)
	}
	typ := QueueClassic
	if q.Type == "quorum" {
		typ = QueueQuorum
	}
	depth := int64(-1) // not counted yet: get what is there
	if q.Messages != nil {
		depth = *q.Messages
	}
	if depth == 0 {
		// Statistics lag by a few seconds: the passive declare is exact.
		ready, _, err := p.readyMessages(queue)
		if err != nil {
			return "", 0, err
		}
		depth = ready
	}
	return typ, depth, nil
}

// managementMessage is one message of a management API get.
type managementMessage struct {
	Payload         string `json:"payload"`
	PayloadEncoding string `json:"payload_encoding"`
	Redelivered     bool   `json:"redelivered"`
	Exchange        string `json:"exchange"`
	RoutingKey      string `json:"routing_key"`
	MessageCount    int64  `json:"message_count"`
	Properties      struct {
		MessageID       string         `json:"message_id"`
		CorrelationID   string         `json:"correlation_id"`
		ContentType     string         `json:"content_type"`
		ContentEncoding string         `json:"content_encoding"`
		Headers         map[string]any `json:"headers"`
	} `json:"properties"`
}

// delivery is m as the AMQP client would have delivered it: header numbers
// as integers where they are whole, tables as tables.
func (m managementMessage) delivery() (amqp.Delivery, error) {
	body := []byte(m.Payload)
	if m.PayloadEncoding == "base64" {
		var err error
		if body, err = base64.StdEncoding.DecodeString(m.Payload); err != nil {
			return amqp.Delivery{}, fmt.Errorf("message %s: payload: %w", m.Properties.MessageID, err)
		}
	}
	headers := amqp.Table{}
	for k, v := range m.Properties.Headers {
		headers[k] = amqpValue(v)
	}
	return amqp.Delivery{
		Headers:         headers,
		ContentType:     m.Properties.ContentType,
		ContentEncoding: m.Properties.ContentEncoding,
		CorrelationId:   m.Properties.CorrelationID,
		MessageId:       m.Properties.MessageID,
		Redelivered:     m.Redelivered,
		Exchange:        m.Exchange,
		RoutingKey:      m.RoutingKey,
		Body:            body,
	}, nil
}

// amqpValue turns a JSON header value of the management API into the type
// amqp091-go would have decoded.
func amqpValue(v any) any {
	switch v := v.(type) {
	case json.Number:
		if n, err := v.Int64(); err == nil {
			return n
		}
		f, _ := v.Float64()
		return f
	case map[string]any:
		t := amqp.Table{}
		for k, x := range v {
			t[k] = amqpValue(x)
		}
		return t
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = amqpValue(x)
		}
		return out
	}
	return v
}
