package rabbitmq

// Provisioning: a broker-neutral topology.Topology compiled to RabbitMQ's own
// objects, applied idempotently over AMQP, and compared with the live broker.
//
// # Mapping
//
//	topology                    RabbitMQ
//	exchange {name, type}       durable exchange of that type (topic, direct, fanout)
//	queue                       durable queue
//	queue.type classic|quorum   classic: no x-queue-type argument (as DurableQueues
//	                            declares, and as queues made by other tools are);
//	                            quorum: x-queue-type=quorum
//	                            (rabbitmq.queue_type may make every queue of one
//	                            type: app.DeployedTopology, decision 0015)
//	queue.max_receives          quorum: x-delivery-limit = max_receives. Classic
//	                            queues have no delivery limit in RabbitMQ 3.10: the
//	                            limit is left to the guarantees middleware (the
//	                            x-attempt count), see NativeGaps
//	queue.dead_letter           x-dead-letter-exchange = dead_letter.exchange ("" =
//	                            the default exchange), x-dead-letter-routing-key =
//	                            DeadLetterRoutingKey(); the DLQ is declared with its
//	                            queue and bound to the DLX with that routing key
//	queue.retention             x-message-ttl in ms (DLQ: dead_letter.retention).
//	                            Unlike SQS, an expired message of a queue with a DLX
//	                            is dead-lettered (reason "expired"), not deleted
//	queue.fifo                  x-single-active-consumer=true: one consumer at a
//	                            time, so the queue is consumed in order. Stricter
//	                            than SQS FIFO (one order per queue, not per group)
//	binding                     queue binding with routing key = pattern
//
// A quorum queue dead-letters at most once in RabbitMQ 3.10 (the default
// x-dead-letter-strategy): a dead letter in flight when the DLQ's leader is
// unreachable is lost. At-least-once dead-lettering needs
// x-dead-letter-strategy=at-least-once with x-overflow=reject-publish; the
// model has no field for it yet, and Apply declares neither.
//
// Not expressible as a queue argument (they are consumer-side or missing from
// RabbitMQ): visibility timeout (the handler timeout in middleware; RabbitMQ's
// consumer_timeout is node-wide in 3.10), receive wait (RabbitMQ pushes),
// delivery delay (needs the delayed-message plugin), SQS encryption (TLS and
// disk encryption are the operator's), batch size (the subscriber's prefetch),
// content-based dedup (consumer-side dedupe). NativeGaps lists them per queue.

import (
	"fmt"
	"slices"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventpipe/eventpipe/app/topology"
)

// compiled is a topology as RabbitMQ objects, in the order Apply declares them.
type compiled struct {
	exchanges []topology.Exchange
	queues    []compiledQueue
	bindings  []compiledBinding
}

type compiledQueue struct {
	name string
	typ  string // classic or quorum
	args amqp.Table
	// fifo: the topology orders the queue's messages (per group); the
	// subscriber then never reorders them (attempts.go).
	fifo bool
	// deadLetter is the queue's declared dead-lettering; nil without one.
	deadLetter *topology.DeadLetter
}

type compiledBinding struct {
	exchange, queue, key string
}

func (b compiledBinding) object() string {
	return fmt.Sprintf("binding %s -> %s (%s)", b.exchange, b.queue, b.key)
}

// compile validates t and turns it into RabbitMQ objects: dead-letter queues
// and their bindings first.
func compile(t topology.Topology) (compiled, error) {
	if err := t.Validate(); err != nil {
		return compiled{}, err
	}
	var c compiled
	c.exchanges = slices.Clone(t.Exchanges)

	dlqs := map[string]bool{}
	var dlqBindings []compiledBinding
	for i, q := range t.Queues {
		d := q.DeadLetter
		if d == nil {
			continue
		}
		dlqs[d.Queue] = true
		if d.Exchange == "" {
			// The default exchange routes by queue name only.
			if key := d.DeadLetterRoutingKey(); key != d.Queue {
				return compiled{}, fmt.Errorf("queues[%d].dead_letter.routing_key: %q with the default exchange would route dead letters to a queue named %q, not to %q: set dead_letter.exchange, or drop the routing key", i, key, key, d.Queue)
			}
			continue
		}
		b := compiledBinding{exchange: d.Exchange, queue: d.Queue, key: d.DeadLetterRoutingKey()}
		if !slices.Contains(dlqBindings, b) {
			dlqBindings = append(dlqBindings, b)
		}
	}
	all := t.AllQueues()
	// Stable partition: dead-letter queues first.
	for _, first := range []bool{true, false} {
		for _, q := range all {
			if dlqs[q.Name] == first {
				c.queues = append(c.queues, compiledQueue{name: q.Name, typ: queueType(q), args: queueArgs(q), fifo: q.FIFO, deadLetter: q.DeadLetter})
			}
		}
	}
	c.bindings = dlqBindings
	for _, b := range t.Bindings {
		cb := compiledBinding{exchange: b.Exchange, queue: b.Queue, key: b.Pattern}
		if !slices.Contains(c.bindings, cb) {
			c.bindings = append(c.bindings, cb)
		}
	}
	return c, nil
}

func queueType(q topology.Queue) string {
	if q.Type == topology.Quorum {
		return topology.Quorum
	}
	return topology.Classic
}

// queueArgs are the x-arguments q is declared with.
func queueArgs(q topology.Queue) amqp.Table {
	args := amqp.Table{}
	if q.Type == topology.Quorum {
		args["x-queue-type"] = topology.Quorum
		if q.MaxReceives > 0 {
			args["x-delivery-limit"] = int64(q.MaxReceives)
		}
	}
	if d := q.DeadLetter; d != nil {
		args["x-dead-letter-exchange"] = d.Exchange
		args["x-dead-letter-routing-key"] = d.DeadLetterRoutingKey()
	}
	if q.Retention > 0 {
		args["x-message-ttl"] = q.Retention.Milliseconds()
	}
	if q.FIFO {
		args["x-single-active-consumer"] = true
	}
	return args
}

// NativeGaps lists, per queue, what t declares that RabbitMQ does not enforce
// by itself, and who does instead. They are not drift: Plan does not report
// them. The CLI may print them next to a plan.
func NativeGaps(t topology.Topology) []string {
	var out []string
	for _, q := range t.AllQueues() {
		add := func(format string, args ...any) {
			out = append(out, fmt.Sprintf("queue %s: %s", q.Name, fmt.Sprintf(format, args...)))
		}
		if q.MaxReceives > 0 && q.Type != topology.Quorum {
			add("max_receives %d: classic queues have no delivery limit; enforced by the guarantees middleware (x-attempt), declare type: quorum to have RabbitMQ enforce it", q.MaxReceives)
		}
		if q.Type == topology.Quorum && q.DeadLetter == nil {
			add("quorum without a dead-letter exchange: RabbitMQ 4 drops a message delivered more than 20 times (its default delivery limit), `eventpipe dlq peek` included (each peek is a delivery); RabbitMQ 3.x has no default limit")
		}
		if q.VisibilityTimeout > 0 {
			add("visibility_timeout %s: enforced as the handler timeout by the middleware (RabbitMQ's consumer_timeout is node-wide)", q.VisibilityTimeout)
		}
		if q.ReceiveWait > 0 {
			add("receive_wait %s: not applicable, RabbitMQ pushes messages to consumers", q.ReceiveWait)
		}
		if q.DeliveryDelay > 0 {
			add("delivery_delay %s: not enforced (RabbitMQ needs the delayed-message plugin)", q.DeliveryDelay)
		}
		if q.Encryption != "" {
			add("encryption %s: SQS-only; on RabbitMQ use TLS and encrypted disks", q.Encryption)
		}
		if q.BatchSize > 0 && !q.FIFO {
			add("batch_size %d: the subscriber's prefetch, not a queue argument", q.BatchSize)
		}
		if q.BatchSize > 0 && q.FIFO {
			add("batch_size %d: not applied, a FIFO queue is consumed with prefetch 1 (a crash then charges only the message in hand)", q.BatchSize)
		}
		if q.ContentBasedDedup {
			add("content_based_dedup: no broker-side dedup; consumers deduplicate by message id")
		}
		if q.FIFO {
			add("fifo: single active consumer, one order for the whole queue (SQS orders per message group)")
			if q.Type != topology.Quorum && q.MaxReceives > 0 {
				add("fifo on a classic queue: a consumer's crashes are counted in the PostgreSQL attempt ledger (serve needs postgres.dsn), or not at all; type quorum counts them natively")
			}
		}
	}
	return out
}

// NativeGaps lists what RabbitMQ cannot enforce of t natively (see the
// package function); `eventpipe topology plan` prints it beside the plan.
func (p *PubSub) NativeGaps(t topology.Topology) []string { return NativeGaps(t) }
