// Package broker holds what every broker adapter shares: the PubSub contract
// (Watermill's own Publisher and Subscriber, unwrapped), the small optional
// capabilities an adapter implements where it can, and the one payload limit.
//
// Adapters live in the sub-packages memory, rabbitmq, sqs and postgres. Each has
// a Config with defaults and Validate, and a New that returns a *PubSub. The
// composition root (package app) picks one from configuration; handlers and
// middleware never import an adapter.
package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/topology"
)

// PubSub is a broker connection that can both publish and subscribe. A topic is
// a queue name: subscribers of one topic compete for its messages on every
// broker that has queues (RabbitMQ, SQS, Postgres).
type PubSub interface {
	message.Publisher
	message.Subscriber
}

// Pinger is implemented by adapters that can tell whether their broker is
// reachable right now. /readyz uses it.
type Pinger interface {
	Ping(ctx context.Context) error
}

// NackDelayer is implemented by adapters whose nack can delay the redelivery
// by the duration in a message's metadata.NackDelayKey, without holding the
// message in the consumer.
type NackDelayer interface {
	// NacksWithDelay reports whether nacks honour metadata.NackDelayKey.
	NacksWithDelay() bool
}

// Refusal is implemented by a Publish error that is the broker's (or the
// routing's) refusal of the message itself: sending the same message again
// cannot succeed (too large, routed to no queue). Callers that retry
// unavailability for ever (the outbox relay) park such a message instead.
type Refusal interface {
	error
	Refused() bool
}

// Refused implements Refusal: a payload over the limit never fits.
func (e *PayloadTooLargeError) Refused() bool { return true }

// PartialPublishError is implemented by a Publish error when the adapter
// knows that only some messages of the call were not sent: FailedUUIDs names
// them, and every other message of the call was confirmed. Callers that track
// messages one by one (the outbox relay) treat any other Publish error as
// "none confirmed".
type PartialPublishError interface {
	error
	FailedUUIDs() []string
}

// MaxPayloadBytes is the largest message body eventpipe accepts on any broker:
// SQS's limit (1 MiB), applied everywhere so that the same code behaves the same
// on every broker. Larger payloads need a claim check.
const MaxPayloadBytes = 1 << 20

// PayloadTooLargeError is returned by Publish for a message whose body exceeds
// MaxPayloadBytes. Nothing of the batch is sent.
type PayloadTooLargeError struct {
	MessageUUID string
	Size        int
}

func (e *PayloadTooLargeError) Error() string {
	return fmt.Sprintf("message %s: payload of %d bytes exceeds the %d-byte limit", e.MessageUUID, e.Size, MaxPayloadBytes)
}

// CheckPayloads returns a *PayloadTooLargeError for the first message over
// MaxPayloadBytes. Every adapter calls it before sending anything.
//
// Dead letters (metadata.DeadLetterKey set) are exempt: they move what
// arrived, and an oversized message from a foreign publisher is dead-lettered
// for being so. A broker with a hard limit of its own (SQS) still refuses
// them.
func CheckPayloads(msgs []*message.Message) error {
	for _, m := range msgs {
		if len(m.Payload) > MaxPayloadBytes && m.Metadata.Get(metadata.DeadLetterKey) == "" {
			return &PayloadTooLargeError{MessageUUID: m.UUID, Size: len(m.Payload)}
		}
	}
	return nil
}

// Provisioner is implemented by adapters that can create a topology natively
// (RabbitMQ exchanges, queues and bindings; SQS queues with redrive
// policies). `eventpipe topology plan|apply` use it.
type Provisioner interface {
	// Plan compares the declared topology with the live broker and changes
	// nothing.
	Plan(ctx context.Context, t topology.Topology) (topology.Plan, error)
	// Apply creates what is missing and changes what the broker allows to
	// change in place, idempotently. It never deletes or recreates a queue:
	// what it cannot change is returned, with the operator's fix.
	Apply(ctx context.Context, t topology.Topology) (unresolved topology.Plan, err error)
}

// QueueStatter is implemented by adapters that can count the messages of a
// queue: the drain-to-zero gate of a deploy (nothing ready, in flight or
// delayed) and a failed-message console (a queue's and its dead-letter
// queue's depth, what is in flight, the oldest message's age) both use it.
// The memory broker does not implement it: its messages live in the process
// and do not survive a deploy.
type QueueStatter interface {
	// QueueStats counts the messages of queue, a queue name as Subscribe
	// takes it (on every broker with queues, a topic is a queue). A queue
	// that does not exist is an error wrapping ErrQueueNotFound, never zero
	// counts: a misspelt name must not pass a drain gate.
	QueueStats(ctx context.Context, queue string) (QueueStats, error)
}

// DeadLetterSourcer is implemented by adapters whose broker dead-letters on
// its own, by a policy on the source queue (SQS's RedrivePolicy), and can say
// which queues do so into a dead-letter queue. Such a dead letter carries no
// history of eventpipe's (metadata.DeadLetterOf), so `eventpipe dlq redrive`
// asks the broker where it came from.
type DeadLetterSourcer interface {
	// DeadLetterSources returns the queues (as Subscribe takes them) whose
	// broker-side dead-lettering targets dlq, sorted; none is not an error.
	DeadLetterSources(ctx context.Context, dlq string) ([]string, error)
}

// MessageMover is implemented by adapters whose broker can move a
// dead-letter queue's messages to another queue itself, unchanged (SQS's
// StartMessageMoveTask). A redrive of a whole DLQ that a broker-side policy
// filled (its messages carry no history of eventpipe's) uses it.
type MessageMover interface {
	// MoveMessages moves every message of dlq to to, at most perSecond a
	// second (0 = the broker's pace), and returns how many it moved once
	// the move has ended. progress, when set, is called with the count so
	// far while the move runs.
	MoveMessages(ctx context.Context, dlq, to string, perSecond int, progress func(moved int64)) (int64, error)
}

// BatchReceiver is implemented by adapters that can hand out a queue's
// messages several at a time and settle them together (RabbitMQ: a consumer
// with a prefetch of the batch, and one `multiple` ack). A redrive of a
// whole DLQ uses it: a batch's copies are published pipelined, then the
// batch is acked at once.
type BatchReceiver interface {
	// ReceiveBatches starts reading queue in batches of up to size.
	ReceiveBatches(ctx context.Context, queue string, size int) (BatchReader, error)
}

// BatchReader reads one queue in batches; Close gives back what was read
// and not acked.
type BatchReader interface {
	// Next returns up to max messages (at most the batch size), waiting up
	// to wait for the first; none when wait passes without one. It returns
	// no message twice while the reader is open.
	Next(ctx context.Context, max int, wait time.Duration) ([]*message.Message, error)
	// Ack removes every message Next returned so far, and only those.
	Ack() error
	// Close gives back every message Next returned and Ack did not remove,
	// and ends the reader.
	Close() error
}

// ErrQueueNotFound is wrapped by QueueStats for a queue the broker does not
// have. Callers branch on it with errors.Is.
var ErrQueueNotFound = errors.New("queue not found")

// QueueStats is what a broker tells about one queue's messages at one moment.
// Each message is counted once, in the state it is in.
type QueueStats struct {
	// Queue is the queue counted.
	Queue string
	// Ready is the number of messages a consumer could receive now: SQS's
	// visible messages, RabbitMQ's ready ones, the Postgres broker's rows
	// available and not claimed.
	Ready int64
	// InFlight is the number of messages delivered to a consumer and not
	// yet acked or nacked; they come back if the consumer fails. It means
	// something only when InFlightKnown.
	InFlight int64
	// InFlightKnown is false when the broker could not count the messages
	// in flight (RabbitMQ without its management API; Note says why). The
	// queue is then never Empty.
	InFlightKnown bool
	// Delayed is the number of messages stored but not deliverable yet: a
	// delivery delay, or a nacked message waiting out its redelivery delay
	// (SQS's delayed messages, the Postgres broker's rows available later).
	// RabbitMQ has no delayed messages.
	Delayed int64
	// OldestAge is the age of the oldest message in the queue, in any
	// state; 0 when the queue is empty or the broker does not report it
	// (SQS reports it to CloudWatch only, RabbitMQ not at all).
	OldestAge time.Duration
	// Approximate is true when the counts lag behind the queue (SQS's are
	// eventually consistent, about a minute; AWS advises seeing zero for
	// several minutes in a row before trusting it).
	Approximate bool
	// Note says, for an operator, what is unknown or approximate and why;
	// empty when every count is exact.
	Note string
}

// Total is the number of messages the queue holds as far as known: Ready,
// InFlight and Delayed.
func (s QueueStats) Total() int64 { return s.Ready + s.InFlight + s.Delayed }

// Empty reports whether the queue holds no message for certain: nothing
// ready, in flight or delayed, and the messages in flight were counted.
func (s QueueStats) Empty() bool { return s.InFlightKnown && s.Total() == 0 }

// String is one line for a log or a console: "q: 3 ready, 1 in flight, 0
// delayed, oldest 2m0s (approximate)".
func (s QueueStats) String() string {
	inFlight := "in flight unknown"
	if s.InFlightKnown {
		inFlight = fmt.Sprintf("%d in flight", s.InFlight)
	}
	out := fmt.Sprintf("%s: %d ready, %s, %d delayed", s.Queue, s.Ready, inFlight, s.Delayed)
	if s.OldestAge > 0 {
		out += fmt.Sprintf(", oldest %s", s.OldestAge.Round(time.Second))
	}
	if s.Approximate {
		out += " (approximate)"
	}
	if s.Note != "" {
		out += " — " + s.Note
	}
	return out
}

// Peeker is implemented by adapters that can read the messages of a queue
// without taking them: `eventpipe dlq peek` and the failed-message console
// show dead letters through it. What a peek leaves changed, where the broker
// cannot read without a trace (RabbitMQ's redelivered flag and a quorum
// queue's delivery count, SQS's receive count), is in Peeked.Effects; a peek
// never spends an attempt of eventpipe's (x-attempt), never hides a message
// from a consumer and never reorders the queue (decision 0029). The memory
// broker does not implement it: its queues live inside the serve process.
type Peeker interface {
	// Peek returns up to max messages of queue (a queue name as Subscribe
	// takes it), oldest first where the broker knows the order. A queue
	// that does not exist is an error wrapping ErrQueueNotFound.
	Peek(ctx context.Context, queue string, max int) (Peeked, error)
}

// Peeked is what one Peek read.
type Peeked struct {
	// Messages are the messages read, as a subscriber would see them
	// (metadata included), oldest first where the broker knows the order.
	Messages []*message.Message
	// Complete is true when Messages are every message of the queue at the
	// time of the read (fewer than max were there). SQS, which samples
	// its servers, is never complete.
	Complete bool
	// Effects says, for an operator, what reading left changed in the
	// queue; empty when nothing changed.
	Effects string
}
