package rabbitmq

import (
	"fmt"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// InstanceFanout is a Topology for broadcast topics, where every service
// instance must receive every message (the realtime fan-out between serve
// instances, decision 0012): publishing to such a topic goes to a durable
// fanout exchange of the same name; subscribing consumes from this
// instance's own queue, "<topic>.<Instance>", bound to that exchange.
//
// The instance queue is transient: not durable, auto-deleted when its last
// consumer goes, and expiring (x-expires) if an instance dies before it ever
// consumed. It is not exclusive, because the adapter declares on both its
// publish and its consume connection. Other topics go to Fallback.
type InstanceFanout struct {
	// Topics are the broadcast topics.
	Topics []string
	// Instance names this process's queue: unique per running instance
	// (a host name plus a random suffix). Required.
	Instance string
	// Expires removes an instance queue unused for this long. Default 1 min.
	Expires time.Duration
	// Fallback handles every other topic; nil means DurableQueues{}.
	Fallback Topology
}

var (
	_ Topology   = InstanceFanout{}
	_ QueueTyper = InstanceFanout{}
)

func (f InstanceFanout) broadcast(topic string) bool { return slices.Contains(f.Topics, topic) }

func (f InstanceFanout) fallback() Topology {
	if f.Fallback == nil {
		return DurableQueues{}
	}
	return f.Fallback
}

// Declare declares the fanout exchange and this instance's queue bound to
// it, or the fallback's objects.
func (f InstanceFanout) Declare(ch *amqp.Channel, topic string) error {
	if !f.broadcast(topic) {
		return f.fallback().Declare(ch, topic)
	}
	if f.Instance == "" {
		return fmt.Errorf("fanout %s: no instance name", topic)
	}
	expires := f.Expires
	if expires == 0 {
		expires = time.Minute
	}
	if err := ch.ExchangeDeclare(topic, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %s: %w", topic, err)
	}
	q := f.Queue(topic)
	args := amqp.Table{"x-expires": expires.Milliseconds()}
	if _, err := ch.QueueDeclare(q, false, true, false, false, args); err != nil {
		return fmt.Errorf("declare queue %s: %w", q, err)
	}
	if err := ch.QueueBind(q, "", topic, false, nil); err != nil {
		return fmt.Errorf("bind queue %s to %s: %w", q, topic, err)
	}
	return nil
}

// Route publishes a broadcast topic to its fanout exchange.
func (f InstanceFanout) Route(topic string) (exchange, routingKey string) {
	if !f.broadcast(topic) {
		return f.fallback().Route(topic)
	}
	return topic, ""
}

// Queue is this instance's queue for a broadcast topic.
func (f InstanceFanout) Queue(topic string) string {
	if !f.broadcast(topic) {
		return f.fallback().Queue(topic)
	}
	return topic + "." + f.Instance
}

// QueueType is classic for an instance queue (transient, so never quorum),
// the fallback's type for other topics.
func (f InstanceFanout) QueueType(topic string) QueueType {
	if f.broadcast(topic) {
		return QueueClassic
	}
	return typeOfQueue(f.fallback(), topic)
}

// Ordered is the fallback's for other topics; instance queues keep no order
// of their own.
func (f InstanceFanout) Ordered(topic string) bool {
	return !f.broadcast(topic) && ordered(f.fallback(), topic)
}

// forget passes on to the fallback, which may remember its declarations.
func (f InstanceFanout) forget() {
	if fb, ok := f.fallback().(forgetter); ok {
		fb.forget()
	}
}
