package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventpipe/eventpipe/app/broker"
)

var _ broker.BatchReceiver = (*PubSub)(nil)

// batchFill is how long Next waits for the rest of a batch once its first
// message is in: the broker sends a prefetch's worth back to back.
const batchFill = 20 * time.Millisecond

// ReceiveBatches reads the queue of topic through a consumer of its own, on
// a channel of its own with a prefetch of size and manual acks. Ack is one
// basic.ack with multiple set, for everything Next returned; Close closes
// the channel, which gives back what is not acked (flagged redelivered; on a
// quorum queue with x-delivery-count+1). Unlike Subscribe it never
// republishes: a redelivery is not counted as an attempt here, the caller
// settles every message itself.
func (p *PubSub) ReceiveBatches(ctx context.Context, topic string, size int) (broker.BatchReader, error) {
	if size <= 0 {
		return nil, errors.New("rabbitmq: batch size must be positive")
	}
	queue := p.topology.Queue(topic)
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		return nil, fmt.Errorf("rabbitmq: read %s in batches: %w", topic, ErrClosed)
	}
	ch, err := p.subConn.channel()
	p.mu.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: read %s in batches: %w", topic, err)
	}
	if err := ch.Qos(min(size, math.MaxUint16), 0, false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("rabbitmq: read %s in batches: qos: %w", topic, err)
	}
	deliveries, err := ch.ConsumeWithContext(ctx, queue, "", false, false, false, false, nil)
	if err != nil {
		_ = ch.Close()
		var amqpErr *amqp.Error
		if errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound {
			return nil, fmt.Errorf("rabbitmq: read %s in batches: %w: %s", topic, broker.ErrQueueNotFound, amqpErr.Reason)
		}
		return nil, fmt.Errorf("rabbitmq: read %s in batches: consume: %w", topic, err)
	}
	return &batchReader{p: p, topic: topic, typ: typeOfQueue(p.topology, topic), ch: ch, deliveries: deliveries, size: size}, nil
}

type batchReader struct {
	p          *PubSub
	topic      string
	typ        QueueType
	ch         *amqp.Channel
	deliveries <-chan amqp.Delivery
	size       int
	// last is the delivery tag of the latest message Next returned; acked
	// the latest Ack covered.
	last, acked uint64
}

// Next takes up to limit deliveries; the others of the prefetch stay in the
// channel, after the last tag an Ack covers (tags rise in delivery order).
func (b *batchReader) Next(ctx context.Context, limit int, wait time.Duration) ([]*message.Message, error) {
	var out []*message.Message
	t := time.NewTimer(wait)
	defer t.Stop()
	for len(out) < min(limit, b.size) {
		select {
		case d, ok := <-b.deliveries:
			if !ok {
				if len(out) > 0 {
					return out, nil
				}
				return nil, fmt.Errorf("rabbitmq: read %s in batches: the channel closed", b.topic)
			}
			msg, err := b.p.marshaler.Unmarshal(d)
			if err != nil {
				// Not a message of ours to judge: give it back with the rest.
				return out, fmt.Errorf("rabbitmq: read %s in batches: %w", b.topic, err)
			}
			setAttempt(msg, &d, b.typ)
			b.last = d.DeliveryTag
			out = append(out, msg)
			t.Reset(batchFill)
		case <-t.C:
			return out, nil
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
	return out, nil
}

func (b *batchReader) Ack() error {
	if b.last == b.acked {
		return nil
	}
	if err := b.ch.Ack(b.last, true); err != nil {
		return fmt.Errorf("rabbitmq: ack a batch of %s: %w", b.topic, err)
	}
	b.acked = b.last
	return nil
}

func (b *batchReader) Close() error {
	if err := b.ch.Close(); err != nil && !errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("rabbitmq: close the batches of %s: %w", b.topic, err)
	}
	return nil
}
