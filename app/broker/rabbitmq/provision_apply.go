package rabbitmq

// # Apply
//
// Apply speaks AMQP only, so it works against any broker the service can reach:
// it declares exchanges, then dead-letter queues and their DLX bindings (so
// that no queue dead-letters into nothing while Apply runs), then the work
// queues and their bindings. Declaring what exists with the same arguments is a
// no-op in RabbitMQ, which makes Apply idempotent. A live queue or exchange
// declared with other arguments makes RabbitMQ answer 406 PRECONDITION_FAILED
// (and close the channel; Apply opens another and goes on). Apply never deletes
// or recreates anything: it returns a Differs change built from the 406, naming
// the argument RabbitMQ reported (RabbitMQ names the first one only; Plan names
// all) with the declared and live values, and the fix, which includes the
// number of messages the queue holds.

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/topology"
)

var _ broker.Provisioner = (*PubSub)(nil)

// Apply declares t's exchanges, queues (dead-letter queues included) and
// bindings, creating what is missing. It never deletes or recreates anything:
// an exchange or queue that exists with other arguments is returned as a
// Differs change with its fix, and the rest is still applied. The error is
// for a broker that cannot be reached or refuses otherwise.
func (p *PubSub) Apply(ctx context.Context, t topology.Topology) (topology.Plan, error) {
	c, err := compile(t)
	if err != nil {
		return nil, err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return nil, fmt.Errorf("apply topology: %w", ErrClosed)
	}
	d := &declarer{conn: p.subConn}
	defer d.close()

	var unresolved topology.Plan
	for _, e := range c.exchanges {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		object := "exchange " + e.Name
		err := d.do(func(ch *amqp.Channel) error {
			return ch.ExchangeDeclare(e.Name, e.Type, true, false, false, false, nil)
		})
		if change, ok := preconditionFailed(err, object); ok {
			change.Fix = fmt.Sprintf("RabbitMQ cannot change an exchange in place: delete exchange %s (its bindings go with it) and apply again, which re-creates it and the declared bindings", e.Name)
			unresolved = append(unresolved, change)
		} else if err != nil {
			return nil, fmt.Errorf("declare exchange %s: %w", e.Name, err)
		}
	}
	for _, q := range c.queues {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		object := "queue " + q.name
		err := d.do(func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclare(q.name, true, false, false, false, q.args)
			return err
		})
		if change, ok := preconditionFailed(err, object); ok {
			depth := -1
			if perr := d.do(func(ch *amqp.Channel) error {
				live, err := ch.QueueDeclarePassive(q.name, true, false, false, false, nil)
				depth = live.Messages
				return err
			}); perr != nil {
				depth = -1
			}
			change.Fix = queueFix(q.name, depth)
			unresolved = append(unresolved, change)
		} else if err != nil {
			return nil, fmt.Errorf("declare queue %s: %w", q.name, err)
		}
	}
	for _, b := range c.bindings {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := d.do(func(ch *amqp.Channel) error {
			return ch.QueueBind(b.queue, b.key, b.exchange, false, nil)
		}); err != nil {
			return nil, fmt.Errorf("declare %s: %w", b.object(), err)
		}
	}
	unresolved.Sort()
	return unresolved, nil
}

// queueFix is the operator's way out of a queue whose arguments cannot change
// in place. depth < 0: unknown.
func queueFix(queue string, depth int) string {
	holds := "check how many messages it holds"
	switch {
	case depth == 0:
		holds = "it holds no messages"
	case depth > 0:
		holds = fmt.Sprintf("it holds %d message(s) that deleting would lose", depth)
	}
	return fmt.Sprintf("RabbitMQ cannot change a queue's arguments in place; %s: stop its publishers, drain it (or shovel its messages to another queue), delete queue %s, then apply again — or change the declaration to match the live queue", holds, queue)
}

// declarer runs declarations on one channel, reopening it after the broker
// closes it (a 406 closes the channel it came on).
type declarer struct {
	conn *connection
	ch   *amqp.Channel
}

func (d *declarer) do(f func(*amqp.Channel) error) error {
	if d.ch == nil || d.ch.IsClosed() {
		ch, err := d.conn.channel()
		if err != nil {
			return err
		}
		d.ch = ch
	}
	return f(d.ch)
}

func (d *declarer) close() {
	if d.ch != nil && !d.ch.IsClosed() {
		_ = d.ch.Close()
	}
}

// RabbitMQ 3.x: "PRECONDITION_FAILED - inequivalent arg 'x-delivery-limit'
// for queue 'q' in vhost 'v': received '4' but current is '3'".
var inequivalentArg = regexp.MustCompile(`inequivalent arg '([^']*)' for (?:queue|exchange) '.*' in vhost '.*': received (.*) but current is (.*)$`)

// RabbitMQ's spelling of one value in a 406: none, 'v', or
// the value 'v' of type 't'.
var quotedValue = regexp.MustCompile(`^(?:the value )?'(.*?)'(?: of type '[^']*')?$`)

// preconditionFailed turns a 406 into a Differs change on object.
func preconditionFailed(err error, object string) (topology.Change, bool) {
	var amqpErr *amqp.Error
	if !errors.As(err, &amqpErr) || amqpErr.Code != amqp.PreconditionFailed {
		return topology.Change{}, false
	}
	change := topology.Change{Kind: topology.Differs, Object: object, Attribute: "arguments", Have: amqpErr.Reason}
	if m := inequivalentArg.FindStringSubmatch(amqpErr.Reason); m != nil {
		change.Attribute, change.Want, change.Have = m[1], reportedValue(m[2]), reportedValue(m[3])
	}
	return change, true
}

func reportedValue(s string) string {
	if s == "none" {
		return ""
	}
	if m := quotedValue.FindStringSubmatch(s); m != nil {
		if m[1] == "" {
			return `""`
		}
		return m[1]
	}
	return s
}
