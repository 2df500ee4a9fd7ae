package rabbitmq

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventpipe/eventpipe/app/topology"
)

// Topology maps a Watermill topic to RabbitMQ objects and declares them. It
// is the seam for a topology compiled from configuration (exchanges, routing
// keys, dead-letter queues, quorum delivery limits); without one, New uses
// DurableQueues.
type Topology interface {
	// Declare declares, idempotently, what publishing to and consuming from
	// topic need. It runs before the first publish to topic, before the
	// first publish after a reconnect or after a message came back
	// unroutable, and before every subscription to it starts or restarts
	// after a reconnect. An error from the broker closes ch.
	Declare(ch *amqp.Channel, topic string) error
	// Route returns the exchange and routing key a message for topic is
	// published with.
	Route(topic string) (exchange, routingKey string)
	// Queue returns the queue a subscription to topic consumes from.
	Queue(topic string) string
}

// QueueTyper is implemented by a Topology that knows the type of the queue a
// topic is consumed from. The subscriber counts attempts by it: on a quorum
// queue the broker counts redeliveries (x-delivery-count), on a classic queue
// eventpipe does (see attempts.go). The queues of a Topology without it are
// taken to be classic, the type whose counting works on every queue.
type QueueTyper interface {
	QueueType(topic string) QueueType
}

// Orderer is implemented by a Topology that knows which queues keep their
// messages in order (a topology's FIFO queues). The subscriber consumes such
// a queue with prefetch 1, and on a classic one hands a crash redelivery over
// in place, counted in the AttemptLedger, instead of republishing a counted
// copy to the back of the queue, which would put it behind the later messages
// of its group (see attempts.go).
type Orderer interface {
	Ordered(topic string) bool
}

// ordered reports whether t keeps topic's messages in order.
func ordered(t Topology, topic string) bool {
	o, ok := t.(Orderer)
	return ok && o.Ordered(topic)
}

// forgetter is implemented by a Topology that declares once and remembers it
// (Declared): forget makes its next Declare declare again. The PubSub calls it
// when the broker may have lost what was declared: a publish came back
// unroutable, or a connection was re-established.
type forgetter interface{ forget() }

// typeOfQueue is the type of the queue topic is consumed from.
func typeOfQueue(t Topology, topic string) QueueType {
	if qt, ok := t.(QueueTyper); ok && qt.QueueType(topic) == QueueQuorum {
		return QueueQuorum
	}
	return QueueClassic
}

// DurableQueues is the topology with nothing but queues: a topic is a durable
// queue of the same name, published to through the default exchange (which
// routes by queue name, and needs no declaring or binding).
type DurableQueues struct {
	// Type is the queue type; empty means QueueClassic.
	Type QueueType
}

var (
	_ Topology   = DurableQueues{}
	_ QueueTyper = DurableQueues{}
)

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

// QueueType is Type, or QueueClassic when Type is empty.
func (d DurableQueues) QueueType(string) QueueType {
	if d.Type == QueueQuorum {
		return QueueQuorum
	}
	return QueueClassic
}

// Declared is the topology of a spec (or several, merged): a topic is one of
// its queues, consumed and published to by name through the default exchange,
// or "<exchange>/<routing-key>", published to the exchange with that key (the
// StackUp contract's routing). The first Declare declares the whole topology —
// exchanges, queues with their arguments (dead-lettering, queue type, delivery
// limit) and bindings — exactly as `eventpipe topology apply` does, so that a
// message published to an exchange finds its queues even before their
// consumers start, and a queue is never redeclared with other arguments. A
// topic outside the topology is a plain durable queue (Fallback).
type Declared struct {
	c        compiled
	fallback Topology

	mu   sync.Mutex
	done bool
}

var (
	_ Topology         = (*Declared)(nil)
	_ QueueTyper       = (*Declared)(nil)
	_ DeadLetterRouter = (*Declared)(nil)
)

// NewDeclared returns the Topology of t; topics t does not know are handled
// by fallback (nil means DurableQueues{}).
func NewDeclared(t topology.Topology, fallback Topology) (*Declared, error) {
	c, err := compile(t)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: topology %s: %w", t.Name, err)
	}
	if fallback == nil {
		fallback = DurableQueues{}
	}
	return &Declared{c: c, fallback: fallback}, nil
}

func (d *Declared) knows(topic string) bool {
	if exchange, _, routed := strings.Cut(topic, "/"); routed {
		return exchange == "" || slices.ContainsFunc(d.c.exchanges, func(e topology.Exchange) bool { return e.Name == exchange })
	}
	return slices.ContainsFunc(d.c.queues, func(q compiledQueue) bool { return q.name == topic })
}

// Declare declares the whole topology once (again after an error), or the
// fallback's queue for a topic outside it.
func (d *Declared) Declare(ch *amqp.Channel, topic string) error {
	if !d.knows(topic) {
		return d.fallback.Declare(ch, topic)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done {
		return nil
	}
	for _, e := range d.c.exchanges {
		if err := ch.ExchangeDeclare(e.Name, e.Type, true, false, false, false, nil); err != nil {
			return fmt.Errorf("declare exchange %s: %w", e.Name, err)
		}
	}
	for _, q := range d.c.queues {
		if _, err := ch.QueueDeclare(q.name, true, false, false, false, q.args); err != nil {
			return fmt.Errorf("declare queue %s: %w (`eventpipe topology plan` shows how it differs)", q.name, err)
		}
	}
	for _, b := range d.c.bindings {
		if err := ch.QueueBind(b.queue, b.key, b.exchange, false, nil); err != nil {
			return fmt.Errorf("declare %s: %w", b.object(), err)
		}
	}
	d.done = true
	return nil
}

// forget makes the next Declare declare the whole topology again.
func (d *Declared) forget() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.done = false
	if f, ok := d.fallback.(forgetter); ok {
		f.forget()
	}
}

// Route publishes "<exchange>/<routing-key>" to the exchange, anything else
// to the queue of that name through the default exchange.
func (d *Declared) Route(topic string) (exchange, routingKey string) {
	if exchange, key, routed := strings.Cut(topic, "/"); routed {
		return exchange, key
	}
	return d.fallback.Route(topic)
}

// Queue consumes from the queue named topic.
func (d *Declared) Queue(topic string) string { return topic }

// Ordered implements Orderer: the topology's FIFO queues.
func (d *Declared) Ordered(topic string) bool {
	for _, q := range d.c.queues {
		if q.name == topic {
			return q.fifo
		}
	}
	return ordered(d.fallback, topic)
}

// QueueType is the declared type of the queue named topic, or the fallback's
// type for a topic outside the topology.
func (d *Declared) QueueType(topic string) QueueType {
	for _, q := range d.c.queues {
		if q.name == topic {
			return QueueType(q.typ)
		}
	}
	return typeOfQueue(d.fallback, topic)
}

// DeadLetterRoute implements DeadLetterRouter: the dead-letter queue,
// exchange and routing key declared for the queue named queue.
func (d *Declared) DeadLetterRoute(queue string) (dlq, exchange, routingKey string, ok bool) {
	for _, q := range d.c.queues {
		if q.name == queue && q.deadLetter != nil {
			return q.deadLetter.Queue, q.deadLetter.Exchange, q.deadLetter.DeadLetterRoutingKey(), true
		}
	}
	if r, ok := d.fallback.(DeadLetterRouter); ok {
		return r.DeadLetterRoute(queue)
	}
	return "", "", "", false
}
