package app

import (
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/schemas"
	"github.com/eventpipe/eventpipe/app/topology"
)

// strictOutgoing is the check of what our producers write to the outbox
// (spec.Deps.Outbox, the one choke point of handlers' and producers'
// messages): the body against the strict JSON Schema of every queue the topic
// reaches in top (strict on publish, docs/decisions/0034). A topic whose
// queues have no schema (a dead-letter queue, the demo's) passes: its
// encoder is the check. A refusal is permanent: the same code writes the
// same body on every retry.
func strictOutgoing(top topology.Topology) (func(topic string, msg *message.Message) error, error) {
	cat, err := schemas.Load()
	if err != nil {
		return nil, err
	}
	return func(topic string, msg *message.Message) error {
		for _, q := range top.TopicQueues(topic) {
			err := cat.ValidateQueue(q, msg.Payload, schemas.Strict)
			var none *schemas.NoSchemaError
			if err != nil && !errors.As(err, &none) {
				return failure.AsPermanent(fmt.Errorf("outbox write %s: message %s: %w", topic, msg.UUID, err))
			}
		}
		return nil
	}, nil
}
