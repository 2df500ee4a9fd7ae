package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventpipe/eventpipe/app/metadata"
)

// Attempt numbering on RabbitMQ.
//
// The StackUp contract (§3) carries the number of earlier attempts in the
// x-attempt header, from 0. A peer that retries by publishing again (the
// contract's AI server and Core count their retries there) sends its count
// with it, as an AMQP number or as a decimal string; eventpipe honours it: a
// message no eventpipe republished starts at the peer's x-attempt, and the
// broker's and eventpipe's counts add to it. So a message a peer already tried
// twice is not given the route's full attempt budget again. Anything else in
// the header (a word, a negative number, a fraction) counts as 0. eventpipe's
// own publishers always write 0 (Marshal).
//
// Quorum queues count deliveries themselves (x-delivery-count, which the
// broker sets on every redelivery and overwrites when a publisher set it), so
// a nack there is a native requeue: the count and x-delivery-limit, with the
// queue's dead-letter exchange, work as RabbitMQ documents them.
//
// Classic queues count nothing; they only flag a redelivery. So eventpipe
// counts itself, in x-eventpipe-attempt, a header only this adapter sets and
// only on a copy it republishes to the message's own queue (through the
// default exchange, so no other bound queue gets it), with x-attempt set to
// the same number for the contract's readers and x-first-failure-at:
//
//   - A nack republishes the message with its count one higher; the original
//     is acked once the copy is confirmed, and the copy is handled only once
//     the broker has processed that ack (source.ackBarrier), so a consumer
//     dying in between cannot leave both. The copy goes to the back of the
//     queue, as an SQS or Postgres redelivery would. If the copy cannot be
//     published the original is requeued as before.
//   - A delivery flagged redelivered was delivered before and never settled:
//     its consumer crashed or lost its connection. It is republished with
//     that attempt counted, the original acked after the confirm, and it is
//     not handed to the handler: the copy is, when it comes back. (Handing
//     over the delivery in hand instead would leave the confirmed copy in the
//     queue as a second, later delivery of the same attempt.) So a message
//     that kills its consumer every time still reaches its attempt limit. If
//     the copy cannot be published the delivery is handed over as it is, its
//     attempt counted for this delivery only: a broker that refuses
//     publishes must not stop consumption, nor make a redelivery spin.
//   - Except on an ordered queue (a topology's FIFO queue, Orderer): there
//     the copy would go behind the later messages of its group (seen in make
//     chaos: 47 booking events out of order after consumer kills), so a
//     flagged redelivery is handed over in place, in its position, and its
//     crash is counted outside the queue, in the AttemptLedger (a PostgreSQL
//     table, app/attemptledger): the ledger's count of the message's crash
//     redeliveries replaces the 1 of a flagged redelivery. The row goes once
//     the delivery is settled — acked (handled, or dead-lettered by the
//     middleware) or nacked into a counted copy, which carries the count
//     from then on. So a message that kills its consumer every time reaches
//     its attempt limit there too, in its place. Without a ledger (no
//     database), or when the ledger fails, or for a message without
//     message_id (its id is new on every delivery), the attempt is counted
//     for this delivery only, and such a message loops forever: declare the
//     queue quorum (rabbitmq.queue_type: quorum; x-delivery-count counts
//     crashes natively), or give the process a database.
//     An ordered queue is consumed with prefetch 1, so that only the message
//     in hand comes back flagged after a crash (rabbitmq.go, consumeOnce).
//
// A delivery's attempt number is eventpipe's count (x-eventpipe-attempt; on a
// message no eventpipe republished, the publisher's x-attempt) plus the count
// of the redeliveries
// since: x-delivery-count on a quorum queue, the attempt ledger's on an
// ordered classic queue, 1 on another classic queue's flagged redelivery. On a classic queue x-delivery-count is a
// publisher's header like any other and counts nothing.
//
// A message published without message_id (rabbitmqadmin, StackUp §9's smoke
// message) is given a fresh UUID on delivery, and every copy eventpipe
// republishes carries the UUID of the delivery it copies as message_id: from
// its first republish on, the message keeps its id. On a quorum queue such a
// message's nack is therefore a counted copy too, not a native requeue (its
// x-delivery-count restarts on the copy; eventpipe's count carries the
// total). Only a native redelivery before the first republish — its first
// consumer crashed — gets a new id: the old one died with that consumer.
//
// Deliveries still unsettled at shutdown, prefetched but never handled, are
// returned by closing the channel, so they come back flagged redelivered and
// count one attempt, on both queue types alike: the broker cannot tell them
// from a crash.

const (
	// headerDeliveryCount is the header in which quorum queues count
	// deliveries.
	headerDeliveryCount = "x-delivery-count"
	// headerOwnAttempt is eventpipe's count of the earlier attempts of a
	// copy it republished. Marshal removes it from everything else.
	headerOwnAttempt = "x-eventpipe-attempt"
)

// AttemptLedger counts, outside the broker, how many times a message of an
// ordered classic queue came back flagged redelivered: its consumer died
// holding it. It must outlive the consumer (a database table: kill -9 is what
// it counts). A row is keyed by queue and message_id; rows not bumped for a
// long time (a settled message whose Forget failed) are the implementation's
// to expire.
type AttemptLedger interface {
	// Bump records one more crash redelivery of messageID on queue and
	// returns how many it has recorded, this one included (1 for the
	// first). It must be durable when it returns: the handler it precedes
	// may kill the process.
	Bump(ctx context.Context, queue, messageID string) (int, error)
	// Forget drops the record of messageID on queue: its delivery was
	// settled.
	Forget(ctx context.Context, queue, messageID string) error
}

// ledgerTimeout bounds one call to the attempt ledger.
const ledgerTimeout = 10 * time.Second

// countCrash counts a flagged redelivery from an ordered classic queue in the
// attempt ledger and returns its attempt number: eventpipe's count carried by
// the delivery plus the ledger's count of crash redeliveries. ok is false
// when there is no ledger, the message has no id, or the ledger failed; the
// caller then counts the crash for this delivery only.
func (p *PubSub) countCrash(ctx context.Context, src source, d *amqp.Delivery, msg *message.Message) (attempt int, ok bool) {
	if p.cfg.AttemptLedger == nil || d.MessageId == "" {
		return 0, false
	}
	ctx, cancel := context.WithTimeout(ctx, ledgerTimeout)
	defer cancel()
	crashes, err := p.cfg.AttemptLedger.Bump(ctx, src.queue, d.MessageId)
	if err != nil {
		p.logger.Error("Counting a crash redelivery in the attempt ledger failed, handling it with the attempt counted for this delivery only", err,
			watermill.LogFields{"message_uuid": msg.UUID, "amqp_queue": src.queue})
		return 0, false
	}
	return baseAttempt(d) + crashes, true
}

// forgetCrashes drops a settled delivery's row from the attempt ledger. A
// failure leaves a row that only a later delivery of the same id (a redrive)
// could meet before it expires: logged, not fatal.
func (p *PubSub) forgetCrashes(src source, d *amqp.Delivery, msg *message.Message) {
	// Not the subscription's context: a delivery settled during shutdown
	// still has its row to drop.
	ctx, cancel := context.WithTimeout(context.Background(), ledgerTimeout)
	defer cancel()
	if err := p.cfg.AttemptLedger.Forget(ctx, src.queue, d.MessageId); err != nil {
		p.logger.Error("Forgetting a settled message in the attempt ledger failed", err,
			watermill.LogFields{"message_uuid": msg.UUID, "amqp_queue": src.queue})
	}
}

// ownAttempt returns eventpipe's count carried by a copy it republished; ok
// is false for a message no eventpipe republished.
func ownAttempt(d *amqp.Delivery) (n int, ok bool) {
	v, ok := d.Headers[headerOwnAttempt]
	if !ok {
		return 0, false
	}
	return headerInt(v), true
}

// baseAttempt is the count a delivery carries: eventpipe's on a copy it
// republished, else the publisher's x-attempt (0 for ours).
func baseAttempt(d *amqp.Delivery) int {
	if n, own := ownAttempt(d); own {
		return n
	}
	return headerInt(d.Headers[metadata.AttemptKey])
}

// attemptOf returns the number of earlier attempts of a delivery from a queue
// of type qt.
func attemptOf(d *amqp.Delivery, qt QueueType) int {
	n := baseAttempt(d)
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

// headerInt reads a non-negative integer header of any AMQP numeric type (a
// float only when it is a whole number), or a decimal string (also as AMQP
// bytes); anything else is 0.
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
	case uint64:
		if v > 1<<30 {
			return 0
		}
		n = int64(v)
	case float32:
		return headerInt(float64(v))
	case float64:
		if v != math.Trunc(v) || v < 0 || v > 1<<30 {
			return 0
		}
		n = int64(v)
	case []byte:
		return headerInt(string(v))
	case string:
		parsed, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
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
func setAttempt(msg *message.Message, d *amqp.Delivery, qt QueueType) {
	msg.Metadata.Set(metadata.AttemptKey, strconv.Itoa(attemptOf(d, qt)))
	delete(msg.Metadata, headerOwnAttempt)
	if _, own := ownAttempt(d); !own {
		// Not counted by eventpipe: a failure time can only be the
		// publisher's, in a format nobody agreed on.
		delete(msg.Metadata, metadata.FirstFailureKey)
	}
}

// copyID is the message_id of a copy of d: its own, or else the id the
// adapter gave it (Marshaler.Unmarshal), so a message published without one
// keeps that id from its first republish on.
func copyID(d *amqp.Delivery, msg *message.Message) string {
	if d.MessageId != "" {
		return d.MessageId
	}
	return msg.UUID
}

// recount settles a flagged redelivery from a classic queue (see above): it
// republishes the message with its attempt counted, then acks the original.
// done is false when the copy could not be published; the caller then hands
// the delivery over as it is. err is an ack failure that must end the
// subscription.
func (p *PubSub) recount(ctx context.Context, src source, d *amqp.Delivery, msg *message.Message) (done bool, err error) {
	if err := p.republish(ctx, src, d, msg, attemptOf(d, src.typ), 0); err != nil {
		p.logger.Error("Counting a redelivery failed, handling it with the attempt counted for this delivery only", err,
			watermill.LogFields{"message_uuid": msg.UUID, "amqp_queue": src.queue})
		return false, nil
	}
	if err := errors.Join(d.Ack(false), src.ackBarrier()); err != nil {
		// The copy is in the queue; the original comes back too once the
		// channel closes: a duplicate, which consumers absorb.
		return true, fmt.Errorf("ack %s after counting its redelivery: %w", msg.UUID, err)
	}
	return true, nil
}

// republish publishes a copy of delivery d to its own queue (src's) with
// eventpipe's count set to attempt — after delay, through the queue's delay
// queue (delay.go), when delay is more than 0 — and waits for the broker's
// confirm. The caller acks d only if it succeeds.
func (p *PubSub) republish(ctx context.Context, src source, d *amqp.Delivery, msg *message.Message, attempt int, delay time.Duration) error {
	queue := src.queue
	ctx, cancel := context.WithTimeout(ctx, p.cfg.PublishTimeout)
	defer cancel()
	headers := make(amqp.Table, len(d.Headers)+4)
	for k, v := range d.Headers {
		headers[k] = v
	}
	delete(headers, headerDeliveryCount)
	// The copy comes back through the default exchange: it carries where
	// its original came through (Marshaler, setRouting).
	delete(headers, metadata.ExchangeKey)
	delete(headers, metadata.RoutingKeyKey)
	if key := msg.Metadata.Get(metadata.RoutingKeyKey); key != "" {
		headers[metadata.ExchangeKey] = msg.Metadata.Get(metadata.ExchangeKey)
		headers[metadata.RoutingKeyKey] = key
	}
	headers[headerOwnAttempt] = int32(attempt)
	headers[metadata.AttemptKey] = int32(attempt)
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
		MessageId:       copyID(d, msg),
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		UserId:          d.UserId,
		AppId:           d.AppId,
		Body:            d.Body,
	}
	// The default exchange routes by queue name: the copy reaches this queue
	// only, not every queue bound to the exchange it first came through.
	err := p.withChannel(ctx, func(pc *pubChannel) error {
		target := queue
		if delay > 0 {
			var err error
			if target, err = p.delayQueue(ctx, pc, queue, src.typ, delay); err != nil {
				return err
			}
		}
		err := p.publishOn(ctx, pc, "", target, 1, func(int) (amqp.Publishing, context.Context, error) {
			return pub, context.Background(), nil
		})
		if err != nil && target != queue {
			p.declared.Delete(target) // gone with a broker that lost its data
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("republish %s: %w", msg.UUID, err)
	}
	return nil
}
