package rabbitmq

import (
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Topology maps a Watermill topic to RabbitMQ objects and declares them. It
// is the seam for a topology compiled from configuration (exchanges, routing
// keys, dead-letter queues, quorum delivery limits); without one, New uses
// DurableQueues.
type Topology interface {
	// Declare declares, idempotently, what publishing to and consuming from
	// topic need. It runs before the first publish to topic and before every
	// subscription to it starts or restarts after a reconnect. An error
	// from the broker closes ch.
	Declare(ch *amqp.Channel, topic string) error
	// Route returns the exchange and routing key a message for topic is
	// published with.
	Route(topic string) (exchange, routingKey string)
	// Queue returns the queue a subscription to topic consumes from.
	Queue(topic string) string
}

// DurableQueues is the topology with nothing but queues: a topic is a durable
// queue of the same name, published to through the default exchange (which
// routes by queue name, and needs no declaring or binding).
type DurableQueues struct {
	// Type is the queue type; empty means QueueClassic.
	Type QueueType
}

var _ Topology = DurableQueues{}

// Declare declares the durable queue named topic.
func (d DurableQueues) Declare(ch *amqp.Channel, topic string) error {
	var args amqp.Table
	if d.Type == QueueQuorum {
		// A classic queue is declared without the argument: RabbitMQ
		// compares arguments on redeclaration, and queues declared by other
		// tools usually carry none.
		args = amqp.Table{"x-queue-type": string(QueueQuorum)}
	}
	if _, err := ch.QueueDeclare(topic, true, false, false, false, args); err != nil {
		return fmt.Errorf("declare queue %s: %w", topic, err)
	}
	return nil
}

// Route publishes through the default exchange, with the queue name as
// routing key.
func (DurableQueues) Route(topic string) (exchange, routingKey string) { return "", topic }

// Queue consumes from the queue named topic.
func (DurableQueues) Queue(topic string) string { return topic }
