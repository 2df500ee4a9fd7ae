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
	"fmt"

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
