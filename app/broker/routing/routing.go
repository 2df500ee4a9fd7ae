// Package routing routes a message published to "<exchange>/<routing-key>"
// by a topology's bindings, on brokers without exchanges (memory, SQS,
// Postgres), with the same rules RabbitMQ applies (topology.Topology.Route).
package routing

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/topology"
)

// Routing on brokers without exchanges. SQS (like memory and Postgres) has no exchanges or routing keys; a topology's
// exchanges and bindings (the StackUp contract's topic exchanges, wildcard
// keys included) are routed by the publisher itself from the same
// topology.Topology that RabbitMQ is provisioned from, with
// topology.Topology.Route: the same rules, the same answer on both brokers.
//
// SNS topics with filter policies were the other option and were not taken:
// SNS filter policies have no AMQP '*' / '#' word semantics (a prefix match is
// not "exactly one word"), every route would need a topic, subscriptions, a
// queue policy and RawMessageDelivery to provision and to diff, and a second
// service would stand in the delivery path. Routing in the publisher keeps
// one source of truth and needs only the queues that Apply already creates.

// UnroutableError is returned when no queue is bound to the exchange for the
// routing key. Nothing was sent. RabbitMQ drops such a message silently
// (unless published mandatory); the pipeline refuses it instead, because a
// message routed nowhere is a message lost.
type UnroutableError struct {
	Exchange, RoutingKey string
}

// Refused implements broker.Refusal: no queue is bound for the key, so the
// same publish fails the same way.
func (e *UnroutableError) Refused() bool { return true }

func (e *UnroutableError) Error() string {
	return fmt.Sprintf("routing: no queue is bound to exchange %q for routing key %q: nothing sent", e.Exchange, e.RoutingKey)
}

// RouteError reports a routed publish that reached some queues and not
// others. Publishing again sends to every queue again: consumers deduplicate
// by message id, as for any redelivery.
type RouteError struct {
	Exchange, RoutingKey string
	// Sent lists the queues that accepted every message.
	Sent []string
	// Failed maps each other queue to its error (e.g. an SQS *PublishError).
	Failed map[string]error
}

func (e *RouteError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "routing: route %s/%s: %d queue(s) failed", e.Exchange, e.RoutingKey, len(e.Failed))
	for _, q := range sortedKeysErr(e.Failed) {
		fmt.Fprintf(&b, "; %s: %v", q, e.Failed[q])
	}
	if len(e.Sent) > 0 {
		fmt.Fprintf(&b, " (sent to %s)", strings.Join(e.Sent, ", "))
	}
	return b.String()
}

// Unwrap returns each queue's error.
func (e *RouteError) Unwrap() []error {
	errs := make([]error, 0, len(e.Failed))
	for _, q := range sortedKeysErr(e.Failed) {
		errs = append(errs, e.Failed[q])
	}
	return errs
}

func sortedKeysErr(m map[string]error) []string { return slices.Sorted(maps.Keys(m)) }

// Publisher is a message.Publisher that routes by the topology's
// bindings. A topic "<exchange>/<routing-key>" goes to every queue
// topology.Topology.Route names for them (each once, in declaration order),
// with metadata.ExchangeKey and metadata.RoutingKeyKey set on the copies it
// sends (the caller's messages are not changed). A topic without '/' (or with
// the default exchange, "/<queue>") is a queue name and goes to that queue as
// it is, as with the default exchange on RabbitMQ. Exchange names must not
// contain '/'; routing keys may.
type Publisher struct {
	pub message.Publisher
	t   topology.Topology
	// native: the broker routes "<exchange>/<routing-key>" itself (RabbitMQ);
	// the Publisher only checks the route and sets the metadata.
	native bool
}

var _ message.Publisher = (*Publisher)(nil)

// New returns a Publisher that publishes to pub (a broker) by t's bindings.
// t must be valid.
func New(pub message.Publisher, t topology.Topology) (*Publisher, error) {
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("routing: routing topology %s: %w", t.Name, err)
	}
	for _, e := range t.Exchanges {
		if strings.Contains(e.Name, "/") {
			return nil, fmt.Errorf("routing: routing topology %s: exchange %q: '/' separates exchange and routing key in a topic", t.Name, e.Name)
		}
	}
	return &Publisher{pub: pub, t: t}, nil
}

// NewNative returns a Publisher for a broker that routes by exchange and
// routing key itself (RabbitMQ, whose adapter publishes "<exchange>/<key>" to
// the exchange): it refuses what New refuses — an undeclared exchange, a key
// no queue is bound for, which RabbitMQ would drop silently — sets the same
// metadata, and hands the topic on unchanged.
func NewNative(pub message.Publisher, t topology.Topology) (*Publisher, error) {
	p, err := New(pub, t)
	if err != nil {
		return nil, err
	}
	p.native = true
	return p, nil
}

// Publish sends msgs to the queues topic routes to. An undeclared exchange is
// an error and so is a routing key that reaches no queue (*UnroutableError);
// in both cases nothing is sent. When some queues fail the others are still
// sent to and the error is a *RouteError.
func (r *Publisher) Publish(topic string, msgs ...*message.Message) error {
	exchange, key, routed := strings.Cut(topic, "/")
	if !routed || exchange == "" {
		if routed {
			topic = key
		}
		return r.pub.Publish(topic, msgs...)
	}
	if !r.declared(exchange) {
		return fmt.Errorf("routing: topic %q: exchange %q is not declared in topology %s", topic, exchange, r.t.Name)
	}
	queues := r.t.Route(exchange, key)
	if len(queues) == 0 {
		return &UnroutableError{Exchange: exchange, RoutingKey: key}
	}
	if len(msgs) == 0 {
		return nil
	}

	copies := make([]*message.Message, len(msgs))
	for i, m := range msgs {
		c := m.Copy()
		c.SetContext(m.Context())
		c.Metadata.Set(metadata.ExchangeKey, exchange)
		c.Metadata.Set(metadata.RoutingKeyKey, key)
		copies[i] = c
	}
	if r.native {
		return r.pub.Publish(topic, copies...)
	}
	rerr := &RouteError{Exchange: exchange, RoutingKey: key, Failed: map[string]error{}}
	for _, q := range queues {
		if err := r.pub.Publish(q, copies...); err != nil {
			rerr.Failed[q] = err
			continue
		}
		rerr.Sent = append(rerr.Sent, q)
	}
	if len(rerr.Failed) == 0 {
		return nil
	}
	return rerr
}

func (r *Publisher) declared(exchange string) bool {
	for _, e := range r.t.Exchanges {
		if e.Name == exchange {
			return true
		}
	}
	return false
}

// Close does nothing: the publisher it routes through belongs to the caller
// (a *PubSub usually also serves subscriptions) and is closed by it.
func (r *Publisher) Close() error { return nil }
