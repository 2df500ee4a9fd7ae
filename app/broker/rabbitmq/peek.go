package rabbitmq

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

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
	peekEffectsSingleActive = "RabbitMQ has no read-only read, and its management API cannot get from a quorum queue with a single active consumer: " +
		"each message read was delivered to a short-lived consumer and returned unacknowledged when its channel closed (order, body and headers kept), " +
		"with its redelivered flag set and its x-delivery-count raised by one; eventpipe's redrive resets the count of the copy it sends, but RabbitMQ 4 drops (or dead-letters) " +
		"a quorum queue's message past the queue's delivery limit (20 by default), peeks included"
)

// Waits of the consumer peek (peekByConsumer): for the first delivery of a
// queue that has messages, then between deliveries. A single active
// consumer queue hands nothing to a second consumer while another is
// active; the peek then ends empty-handed after peekFirstWait.
const (
	peekFirstWait = 3 * time.Second
	peekNextWait  = time.Second
	// peekWholeQueue is the most messages a consumer peek reads to keep
	// a quorum queue's order.
	peekWholeQueue = 1000
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
//
// A quorum queue declared with x-single-active-consumer (a FIFO queue's,
// its DLQ's too) refuses the management get (405 RESOURCE_LOCKED: basic.get
// is not supported there): it is read by a short-lived consumer instead
// (peekByConsumer), which changes the same things.
func (p *PubSub) Peek(ctx context.Context, queue string, max int) (broker.Peeked, error) {
	q, err := p.peekQueue(ctx, queue)
	if err != nil {
		return broker.Peeked{}, err
	}
	typ, depth := q.typ, q.depth
	out := broker.Peeked{}
	if max <= 0 || depth == 0 {
		out.Complete = depth == 0
		return out, nil
	}
	if typ == QueueQuorum && q.singleActive {
		return p.peekByConsumer(ctx, queue, max)
	}
	req, _ := json.Marshal(map[string]any{"count": max, "ackmode": "ack_requeue_true", "encoding": "auto"})
	body, err := p.management(ctx, http.MethodPost, "/api/queues/%s/%s/get", queue, req)
	if err != nil && strings.Contains(err.Error(), "RESOURCE_LOCKED") {
		// Declared with single-active-consumer after peekQueue looked.
		return p.peekByConsumer(ctx, queue, max)
	}
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
		setAttempt(msg, &d, typ)
		out.Messages = append(out.Messages, msg)
	}
	// The get's last message tells how many stayed behind it.
	out.Complete = len(got) == 0 || got[len(got)-1].MessageCount == 0
	if typ == QueueQuorum && len(got) > 0 {
		// A quorum queue applies the requeue through its log after the get
		// has answered: the peek ends when the messages are back, so that
		// the next peek or consumer finds them in their place.
		p.awaitReturned(ctx, queue, int64(len(got))+got[len(got)-1].MessageCount)
	}
	return out, nil
}

// peekedQueue is what a peek needs to know of a queue first.
type peekedQueue struct {
	typ QueueType
	// depth is the queue's message count; -1 when not counted yet.
	depth int64
	// singleActive is true for a queue declared with
	// x-single-active-consumer.
	singleActive bool
}

// peekQueue returns the queue's type, depth and single-active-consumer
// argument from the management API.
func (p *PubSub) peekQueue(ctx context.Context, queue string) (peekedQueue, error) {
	body, err := p.management(ctx, http.MethodGet, "/api/queues/%s/%s?columns=type,messages,arguments", queue, nil)
	if errors.Is(err, errManagementNotFound) {
		// The management API can lag behind a new queue: the broker decides.
		if _, _, derr := p.readyMessages(queue); derr != nil {
			return peekedQueue{}, derr
		}
		return peekedQueue{typ: QueueClassic}, nil
	}
	if err != nil {
		return peekedQueue{}, fmt.Errorf("rabbitmq: peek %s (the management API is how RabbitMQ shows a message without taking it): %w", queue, err)
	}
	var q struct {
		Type      string         `json:"type"`
		Messages  *int64         `json:"messages"`
		Arguments map[string]any `json:"arguments"`
	}
	if err := json.Unmarshal(body, &q); err != nil {
		return peekedQueue{}, fmt.Errorf("rabbitmq: peek %s: %w", queue, err)
	}
	out := peekedQueue{typ: QueueClassic, depth: -1} // -1: not counted yet, get what is there
	if q.Type == "quorum" {
		out.typ = QueueQuorum
	}
	out.singleActive, _ = q.Arguments["x-single-active-consumer"].(bool)
	if q.Messages != nil {
		out.depth = *q.Messages
	}
	if out.depth <= 0 || out.singleActive {
		// Statistics lag by a few seconds: the passive declare is exact
		// (and the consumer peek stops on it).
		ready, _, err := p.readyMessages(queue)
		if err != nil {
			return peekedQueue{}, err
		}
		out.depth = ready
	}
	return out, nil
}

// peekByConsumer reads up to max messages of a quorum queue through a
// consumer of its own on a channel of its own (manual acks, prefetch max),
// then closes the channel without acking: RabbitMQ returns every message
// to the queue in its place, flagged redelivered, with x-delivery-count+1
// (as the management get does). It is the peek of a single active consumer
// queue, where basic.get is refused; while another consumer is the active
// one this consumer receives nothing, and the peek says so.
func (p *PubSub) peekByConsumer(ctx context.Context, queue string, limit int) (broker.Peeked, error) {
	ready, _, err := p.readyMessages(queue)
	if err != nil {
		return broker.Peeked{}, err
	}
	out := broker.Peeked{Effects: peekEffectsSingleActive}
	if ready == 0 {
		out.Complete = true
		return out, nil
	}
	// A quorum queue gives returned messages back behind the ones it
	// returned before: a peek reading only the head of messages an earlier
	// peek returned would move that head behind the rest. It reads the whole
	// queue (up to peekWholeQueue messages) and shows the first max.
	want := int(min(max(int64(limit), min(ready, peekWholeQueue)), ready))
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		return broker.Peeked{}, fmt.Errorf("rabbitmq: peek %s: %w", queue, ErrClosed)
	}
	ch, err := p.subConn.channel()
	p.mu.RUnlock()
	if err != nil {
		return broker.Peeked{}, fmt.Errorf("rabbitmq: peek %s: %w", queue, err)
	}
	// Closing the channel unacked is what gives the messages back. A
	// quorum queue applies the return through its log after the close is
	// confirmed: the peek ends when they are back (a command run right
	// after must find them in their place).
	defer func() {
		_ = ch.Close()
		p.awaitReturned(ctx, queue, ready)
	}()
	if err := ch.Qos(min(want, math.MaxUint16), 0, false); err != nil {
		return broker.Peeked{}, fmt.Errorf("rabbitmq: peek %s: qos: %w", queue, err)
	}
	deliveries, err := ch.ConsumeWithContext(ctx, queue, "", false, false, false, false, nil)
	if err != nil {
		return broker.Peeked{}, fmt.Errorf("rabbitmq: peek %s: consume: %w", queue, err)
	}
	wait := time.NewTimer(peekFirstWait)
	defer wait.Stop()
	for len(out.Messages) < want {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return broker.Peeked{}, fmt.Errorf("rabbitmq: peek %s: the channel closed while reading", queue)
			}
			msg, err := p.marshaler.Unmarshal(d)
			if err != nil {
				return broker.Peeked{}, fmt.Errorf("rabbitmq: peek %s: %w", queue, err)
			}
			setAttempt(msg, &d, QueueQuorum)
			out.Messages = append(out.Messages, msg)
			wait.Reset(peekNextWait)
		case <-wait.C:
			if len(out.Messages) == 0 {
				out.Effects = "another consumer is the queue's single active one: RabbitMQ hands a second consumer nothing, so this peek saw none of its " +
					strconv.FormatInt(ready, 10) + " message(s)"
			}
			if len(out.Messages) > limit {
				out.Messages = out.Messages[:limit]
			}
			return out, nil
		case <-ctx.Done():
			return broker.Peeked{}, ctx.Err()
		}
	}
	out.Complete = int64(len(out.Messages)) == ready && len(out.Messages) <= limit
	if len(out.Messages) > limit {
		out.Messages = out.Messages[:limit]
	}
	return out, nil
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

// awaitReturned waits, up to peekNextWait, until queue holds at least ready
// messages again.
func (p *PubSub) awaitReturned(ctx context.Context, queue string, ready int64) {
	deadline := time.Now().Add(peekNextWait)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if n, _, err := p.readyMessages(queue); err != nil || n >= ready {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
