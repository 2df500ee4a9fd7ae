package rabbitmq

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventpipe/eventpipe/app/metadata"
)

// Attempt numbering on RabbitMQ.
//
// The StackUp contract (§3) carries the number of earlier attempts in the
// x-attempt header, from 0. RabbitMQ counts deliveries only on quorum queues
// (x-delivery-count, since 3.10 on every redelivery); a classic queue only
// flags a redelivery. So eventpipe counts itself: a nacked message is not
// requeued but published again to its own queue with x-attempt one higher
// (and x-first-failure-at), and the original is acked once the copy is
// confirmed. The copy goes to the back of the queue, as an SQS or Postgres
// redelivery would. If the copy cannot be published the original is
// requeued as before, and that attempt is not counted.
//
// A delivery's attempt number is its x-attempt header plus the redeliveries
// the broker made of it without a nack — after a consumer crashed or lost its
// connection: x-delivery-count on a quorum queue, 1 on a classic queue that
// flags the delivery as redelivered (it cannot say how many).

// headerDeliveryCount is the header in which quorum queues count deliveries.
const headerDeliveryCount = "x-delivery-count"

// attemptOf returns the number of earlier attempts of a delivery.
func attemptOf(d amqp.Delivery) int {
	n := headerInt(d.Headers[metadata.AttemptKey])
	switch count := headerInt(d.Headers[headerDeliveryCount]); {
	case count > 0:
		n += count
	case d.Redelivered:
		n++
	}
	return n
}

// headerInt reads a non-negative integer header of any AMQP numeric type, or
// a decimal string; anything else is 0.
func headerInt(v any) int {
	var n int64
	switch v := v.(type) {
	case int8:
		n = int64(v)
	case int16:
		n = int64(v)
	case int32:
		n = int64(v)
	case int64:
		n = v
	case int:
		n = int64(v)
	case uint8:
		n = int64(v)
	case uint16:
		n = int64(v)
	case uint32:
		n = int64(v)
	case string:
		parsed, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0
		}
		n = parsed
	default:
		return 0
	}
	if n < 0 || n > 1<<30 {
		return 0
	}
	return int(n)
}

// setAttempt writes the delivery's attempt number and first failure time into
// msg's metadata, replacing whatever the publisher put there.
func setAttempt(msg *message.Message, d amqp.Delivery) {
	msg.Metadata.Set(metadata.AttemptKey, strconv.Itoa(attemptOf(d)))
	if headerInt(d.Headers[metadata.AttemptKey]) == 0 {
		// Not a counted redelivery: a failure time can only be the publisher's.
		delete(msg.Metadata, metadata.FirstFailureKey)
	}
}

// redeliverCounted publishes a copy of the nacked delivery d to its own queue
// with the attempt count raised, and waits for the broker's confirm. The
// caller acks d only if it succeeds.
func (p *PubSub) redeliverCounted(ctx context.Context, queue string, d amqp.Delivery, msg *message.Message) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.PublishTimeout)
	defer cancel()
	ch, err := p.acquire(ctx)
	if err != nil {
		return err
	}
	defer func() { p.pool <- ch }()

	headers := make(amqp.Table, len(d.Headers)+2)
	for k, v := range d.Headers {
		headers[k] = v
	}
	delete(headers, headerDeliveryCount)
	headers[metadata.AttemptKey] = int32(attemptOf(d) + 1)
	first := msg.Metadata.Get(metadata.FirstFailureKey)
	if _, err := time.Parse(time.RFC3339Nano, first); err != nil {
		first = time.Now().UTC().Format(time.RFC3339Nano)
	}
	headers[metadata.FirstFailureKey] = first

	pub := amqp.Publishing{
		Headers:         headers,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    d.DeliveryMode,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		Expiration:      d.Expiration,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		UserId:          d.UserId,
		AppId:           d.AppId,
		Body:            d.Body,
	}
	// The default exchange routes by queue name: the copy reaches this queue
	// only, not every queue bound to the exchange it first came through.
	confirm, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false, pub)
	if err != nil {
		return fmt.Errorf("republish %s: %w", msg.UUID, err)
	}
	if p.cfg.DisableConfirms {
		return nil
	}
	acked, err := confirm.WaitContext(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("republish %s: waiting for the confirm: %w", msg.UUID, err)
	case !acked:
		return fmt.Errorf("republish %s: %w", msg.UUID, ErrNotConfirmed)
	}
	return nil
}
