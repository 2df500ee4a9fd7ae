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
// x-attempt header, from 0. The attempt number eventpipe hands to handlers
// counts only what eventpipe or the broker counted: a publisher's x-attempt is
// carried, not trusted (DESIGN, "one attempt number, same on every broker").
//
// RabbitMQ counts deliveries only on quorum queues (x-delivery-count, since
// 3.10 on every redelivery); a classic queue only flags a redelivery. So
// eventpipe counts itself: a nacked message is not requeued but published
// again to its own queue with its count one higher in x-eventpipe-attempt, a
// header only this adapter sets and only on such a copy (and in x-attempt, for
// the contract's readers, and x-first-failure-at); the original is acked once
// the copy is confirmed. The copy goes to the back of the queue, as an SQS or
// Postgres redelivery would. If the copy cannot be published the original is
// requeued as before, and that attempt is not counted.
//
// A delivery's attempt number is eventpipe's count (x-eventpipe-attempt, 0 on
// a message no eventpipe republished) plus the redeliveries the broker made
// of it without a nack — after a consumer crashed or lost its connection:
// x-delivery-count on a quorum queue, which the broker sets itself (it
// overwrites a publisher's), 1 on a classic queue that flags the delivery as
// redelivered (it cannot say how many). On a classic queue x-delivery-count
// is a publisher's header like any other and counts nothing.
//
// A publisher's x-attempt other than 0 is kept in MetadataPublisherAttempt
// (and, on eventpipe's copies, in the header of that name), so a handler can
// still log what the peer counted.

const (
	// headerDeliveryCount is the header in which quorum queues count
	// deliveries.
	headerDeliveryCount = "x-delivery-count"
	// headerOwnAttempt is eventpipe's count of the earlier attempts of a
	// copy it republished. Marshal removes it from everything else.
	headerOwnAttempt = "x-eventpipe-attempt"
)

// MetadataPublisherAttempt is the metadata key (and, on eventpipe's counted
// copies, the AMQP header) that carries a publisher's own x-attempt when it
// was not 0: the peer's count, for logs, never the attempt number.
const MetadataPublisherAttempt = "x-publisher-attempt"

// ownAttempt returns eventpipe's count carried by a copy it republished; ok
// is false for a message no eventpipe republished.
func ownAttempt(d amqp.Delivery) (n int, ok bool) {
	v, ok := d.Headers[headerOwnAttempt]
	if !ok {
		return 0, false
	}
	return headerInt(v), true
}

// attemptOf returns the number of earlier attempts of a delivery from a queue
// of type qt.
func attemptOf(d amqp.Delivery, qt QueueType) int {
	n, _ := ownAttempt(d)
	if !d.Redelivered {
		return n
	}
	if qt == QueueQuorum {
		if count := headerInt(d.Headers[headerDeliveryCount]); count > 0 {
			return n + count
		}
	}
	return n + 1
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

// setAttempt writes the delivery's attempt number, first failure time and
// publisher's count into msg's metadata, replacing whatever the publisher put
// there.
func setAttempt(msg *message.Message, d amqp.Delivery, qt QueueType) {
	msg.Metadata.Set(metadata.AttemptKey, strconv.Itoa(attemptOf(d, qt)))
	delete(msg.Metadata, headerOwnAttempt)
	if _, own := ownAttempt(d); own {
		// MetadataPublisherAttempt and the failure time are eventpipe's, as
		// the copy carries them.
		return
	}
	// Not counted by eventpipe: a failure time can only be the publisher's.
	delete(msg.Metadata, metadata.FirstFailureKey)
	if v, ok := d.Headers[metadata.AttemptKey]; ok && !isZero(v) {
		msg.Metadata.Set(MetadataPublisherAttempt, HeaderString(v))
	}
}

// isZero reports whether a header is the number 0 (of any type, or "0").
func isZero(v any) bool {
	return HeaderString(v) == "0"
}

// redeliverCounted publishes a copy of the nacked delivery d to its own queue
// with the attempt count raised, and waits for the broker's confirm. The
// caller acks d only if it succeeds.
func (p *PubSub) redeliverCounted(ctx context.Context, queue string, qt QueueType, d amqp.Delivery, msg *message.Message) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.PublishTimeout)
	defer cancel()
	ch, err := p.acquire(ctx)
	if err != nil {
		return err
	}
	defer func() { p.pool <- ch }()

	headers := make(amqp.Table, len(d.Headers)+4)
	for k, v := range d.Headers {
		headers[k] = v
	}
	if _, own := ownAttempt(d); !own {
		// The publisher's count, carried under a name of its own: the copy's
		// x-attempt is eventpipe's.
		delete(headers, MetadataPublisherAttempt)
		if v, ok := d.Headers[metadata.AttemptKey]; ok && !isZero(v) {
			headers[MetadataPublisherAttempt] = v
		}
	}
	delete(headers, headerDeliveryCount)
	attempt := int32(attemptOf(d, qt) + 1)
	headers[headerOwnAttempt] = attempt
	headers[metadata.AttemptKey] = attempt
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
