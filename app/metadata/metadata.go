// Package metadata names the message metadata keys that adapters, middleware
// and handlers share, with what their values mean. The keys are the
// contract: they travel on every broker (AMQP headers, SQS message
// attributes, Postgres metadata fields), so their wire values never change.
//
// It is a leaf: it imports nothing of eventpipe's, so every handler may
// import it for a key without importing middleware or a broker adapter (the
// dependency direction in STYLE.md). What is about brokers themselves
// (PubSub, the optional capabilities, the payload limit) stays in
// app/broker.
package metadata

import (
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// AttemptKey is the metadata key every adapter sets on a delivered message:
// the number of earlier deliveries of that message, starting at 0 — from SQS's
// ApproximateReceiveCount, the Postgres broker's attempts column, RabbitMQ's
// x-delivery-count and eventpipe's own count. A publisher's value is replaced;
// only RabbitMQ starts from a foreign peer's x-attempt (StackUp §3: the
// peer's earlier attempts), which eventpipe's own publishers set to 0.
const AttemptKey = "x-attempt"

// FirstFailureKey is the metadata key an adapter sets on a redelivered message
// when it knows when the message first failed (RFC 3339 with nanoseconds, UTC):
// the Postgres broker's first_failed_at column, RabbitMQ's x-death time, SQS's
// ApproximateFirstReceiveTimestamp (the first receive, which is when the first
// failed attempt started). Absent on a first delivery. Dead-lettering copies it
// into the dead letter.
const FirstFailureKey = "x-first-failure-at"

// NackDelayKey is the metadata key the retry middleware sets (a Go duration,
// e.g. "1.5s") on a message it is about to nack, asking for the redelivery to
// wait that long. Adapters that implement broker.NackDelayer honour it
// natively (SQS visibility change, Postgres available_at); for the others the
// middleware waits in process before it nacks.
const NackDelayKey = "x-nack-delay"

// ExplicitNackDelayKey marks a NackDelayKey as an explicit choice ("true"):
// the route asked for its backoff over the broker's own redelivery timing
// (route.Policy.ExplicitBackoff), or a tool wants the message back at once.
// Brokers without a timing of their own (Postgres) honour NackDelayKey either
// way; SQS, whose queues time redeliveries by their visibility timeout, only
// with this mark, and otherwise leaves a nacked message's visibility alone.
const ExplicitNackDelayKey = "x-nack-delay-explicit"

// NackDelay returns the redelivery delay requested in msg's metadata, or 0.
func NackDelay(msg *message.Message) time.Duration {
	d, err := time.ParseDuration(msg.Metadata.Get(NackDelayKey))
	if err != nil || d < 0 {
		return 0
	}
	return d
}

// Keys that order and deduplicate messages on brokers that can (SQS FIFO
// queues: MessageGroupId and MessageDeduplicationId).
const (
	// GroupIDKey names the group a message is ordered within (the booking
	// spec's booking session id). The SQS adapter sets it on a message
	// received from a FIFO queue (its MessageGroupId), so that a dead letter
	// or a redrive keeps the group.
	GroupIDKey = "x-group-id"
	// OrderingKeyKey is the outbox's per-aggregate ordering key; on a FIFO
	// queue it is the group when GroupIDKey is absent.
	OrderingKeyKey = "x-ordering-key"
	// DeduplicationIDKey overrides the deduplication id, which is otherwise
	// the message id (the event id); see DeduplicationID.
	DeduplicationIDKey = "x-dedup-id"
)

// TraceIDKey is the metadata key that carries a message's trace id on every
// broker (an AMQP header, an SQS message attribute, a Postgres metadata field).
const TraceIDKey = "x-trace-id"

// The metadata keys of the W3C trace context. They travel like TraceIDKey:
// as AMQP headers, SQS message attributes or Postgres metadata fields, which
// is what makes propagation work on every broker without adapter code.
const (
	TraceparentKey = "traceparent"
	TracestateKey  = "tracestate"
)

// Metadata keys the routing publisher (app/broker/routing) sets on every
// routed message, so that a consumer sees which exchange and routing key it
// was published with (on RabbitMQ the broker's delivery carries them).
const (
	ExchangeKey   = "exchange"
	RoutingKeyKey = "routing_key"
)
