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
//
// # Apply and Plan
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
//
// Plan reads the vhost's live exchanges, queues (with arguments, type and
// depth) and bindings with `rabbitmqctl list_exchanges|list_queues|
// list_bindings -p VHOST --formatter json` (ReadLive) and compares (Diff):
// missing exchanges, queues and bindings; differing types, flags and arguments;
// bindings on the declared exchanges that nobody declared (Extra). AMQP alone
// cannot do this: a passive declare reports neither arguments nor bindings, and
// an active one changes the broker. The management HTTP API could, but it is a
// plugin that is off on this project's brokers (enabling it is a node-wide
// change), whereas rabbitmqctl ships with every node; the list commands are
// scoped to the one vhost, unlike export_definitions, which would also carry
// every user's password hash. Diff takes a Live value, so a reader of the
// management API (GET /api/queues/VHOST, …) could feed it instead. The cost:
// Plan must run where rabbitmqctl can reach the node (its host or a container
// sharing its Erlang cookie), and each call boots an Erlang VM (≈1 s; the three
// run concurrently).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/topology"
)

var _ broker.Provisioner = (*PubSub)(nil)

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
				c.queues = append(c.queues, compiledQueue{name: q.Name, typ: queueType(q), args: queueArgs(q)})
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
		if q.BatchSize > 0 {
			add("batch_size %d: the subscriber's prefetch, not a queue argument", q.BatchSize)
		}
		if q.ContentBasedDedup {
			add("content_based_dedup: no broker-side dedup; consumers deduplicate by message id")
		}
		if q.FIFO {
			add("fifo: single active consumer, one order for the whole queue (SQS orders per message group)")
		}
	}
	return out
}

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

// Plan compares t with what the broker has in this PubSub's vhost, read with
// rabbitmqctl (see ReadLive), and changes nothing.
func (p *PubSub) Plan(ctx context.Context, t topology.Topology) (topology.Plan, error) {
	if _, err := compile(t); err != nil {
		return nil, err
	}
	uri, err := amqp.ParseURI(p.cfg.URL)
	if err != nil {
		return nil, err
	}
	live, err := ReadLive(ctx, uri.Vhost)
	if err != nil {
		return nil, err
	}
	if err := p.refreshDepths(ctx, t, live); err != nil {
		return nil, err
	}
	return Diff(t, live)
}

// refreshDepths corrects the message counts of the declared queues with a
// passive declare each: rabbitmqctl reports a quorum queue's depth from
// metrics that lag by seconds, and a fix must not say "no messages" about a
// queue that holds some.
func (p *PubSub) refreshDepths(ctx context.Context, t topology.Topology, live Live) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return fmt.Errorf("plan topology: %w", ErrClosed)
	}
	d := &declarer{conn: p.subConn}
	defer d.close()
	for i, l := range live.Queues {
		if _, declared := t.Queue(l.Name); !declared {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		err := d.do(func(ch *amqp.Channel) error {
			q, err := ch.QueueDeclarePassive(l.Name, true, false, false, false, nil)
			live.Queues[i].Messages = max(l.Messages, q.Messages)
			return err
		})
		var amqpErr *amqp.Error
		if errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound {
			continue // deleted since it was listed
		}
		if err != nil {
			return fmt.Errorf("count messages of queue %s: %w", l.Name, err)
		}
	}
	return nil
}

// Live is what a vhost holds, as far as a topology is concerned.
type Live struct {
	Exchanges []LiveExchange
	Queues    []LiveQueue
	Bindings  []LiveBinding
}

// LiveExchange is an exchange on the broker.
type LiveExchange struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Durable    bool           `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Internal   bool           `json:"internal"`
	Arguments  map[string]any `json:"-"`
}

// LiveQueue is a queue on the broker.
type LiveQueue struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Durable    bool   `json:"durable"`
	AutoDelete bool   `json:"auto_delete"`
	// Arguments holds the x-arguments; numbers are json.Number.
	Arguments map[string]any `json:"-"`
	// Messages is the number of ready and unacknowledged messages.
	Messages int `json:"messages"`
}

// LiveBinding is a binding on the broker.
type LiveBinding struct {
	Source          string `json:"source_name"`
	Destination     string `json:"destination_name"`
	DestinationKind string `json:"destination_kind"`
	RoutingKey      string `json:"routing_key"`
}

// ReadLive lists vhost's exchanges, queues and bindings with rabbitmqctl, which
// must be on PATH and able to reach the node (RABBITMQ_NODENAME and the Erlang
// cookie, as for any rabbitmqctl use).
func ReadLive(ctx context.Context, vhost string) (Live, error) {
	type result struct {
		out []byte
		err error
	}
	cmds := [][]string{
		{"list_exchanges", "name", "type", "durable", "auto_delete", "internal", "arguments"},
		{"list_queues", "name", "type", "durable", "auto_delete", "arguments", "messages"},
		{"list_bindings", "source_name", "source_kind", "destination_name", "destination_kind", "routing_key"},
	}
	results := make([]result, len(cmds))
	var wg sync.WaitGroup
	for i, cmd := range cmds {
		wg.Go(func() {
			args := append([]string{"--quiet", cmd[0], "-p", vhost, "--formatter", "json"}, cmd[1:]...)
			var stderr bytes.Buffer
			c := exec.CommandContext(ctx, "rabbitmqctl", args...)
			c.Stderr = &stderr
			out, err := c.Output()
			if err != nil {
				err = fmt.Errorf("rabbitmqctl %s -p %s: %w: %s", cmd[0], vhost, err, strings.TrimSpace(stderr.String()))
			}
			results[i] = result{out, err}
		})
	}
	wg.Wait()
	var live Live
	for _, r := range results {
		if r.err != nil {
			return Live{}, r.err
		}
	}
	var err error
	if live.Exchanges, err = decodeRows[LiveExchange](results[0].out, func(e *LiveExchange, args map[string]any) { e.Arguments = args }); err != nil {
		return Live{}, fmt.Errorf("rabbitmqctl list_exchanges: %w", err)
	}
	if live.Queues, err = decodeRows[LiveQueue](results[1].out, func(q *LiveQueue, args map[string]any) { q.Arguments = args }); err != nil {
		return Live{}, fmt.Errorf("rabbitmqctl list_queues: %w", err)
	}
	if live.Bindings, err = decodeRows[LiveBinding](results[2].out, nil); err != nil {
		return Live{}, fmt.Errorf("rabbitmqctl list_bindings: %w", err)
	}
	return live, nil
}

// decodeRows decodes rabbitmqctl's JSON rows; arguments come as
// [[name, type, value], …].
func decodeRows[T any](data []byte, setArgs func(*T, map[string]any)) ([]T, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(data, &raws); err != nil {
		return nil, err
	}
	out := make([]T, 0, len(raws))
	for _, raw := range raws {
		var row T
		// Fields rabbitmqctl prints as "" instead of false (a quorum
		// queue's exclusive) are not decoded.
		if err := json.Unmarshal(raw, &row); err != nil {
			return nil, err
		}
		if setArgs != nil {
			var a struct {
				Arguments []json.RawMessage `json:"arguments"`
			}
			if err := json.Unmarshal(raw, &a); err != nil {
				return nil, err
			}
			args := map[string]any{}
			for _, triple := range a.Arguments {
				dec := json.NewDecoder(bytes.NewReader(triple))
				dec.UseNumber()
				var v []any
				if err := dec.Decode(&v); err != nil || len(v) != 3 {
					return nil, fmt.Errorf("argument %s: want [name, type, value]", triple)
				}
				name, _ := v[0].(string)
				args[name] = v[2]
			}
			setArgs(&row, args)
		}
		out = append(out, row)
	}
	return out, nil
}

// Diff compares the declared topology with live: declared objects absent from
// live are Missing; exchanges and queues with another type, flag or argument
// Differ (each argument reported on its own, with the fix); bindings from a
// declared exchange that t does not declare are Extra. Objects on exchanges
// t does not declare are not looked at. NativeGaps are not drift.
func Diff(t topology.Topology, live Live) (topology.Plan, error) {
	c, err := compile(t)
	if err != nil {
		return nil, err
	}
	var plan topology.Plan
	exchanges := map[string]LiveExchange{}
	for _, e := range live.Exchanges {
		exchanges[e.Name] = e
	}
	queues := map[string]LiveQueue{}
	for _, q := range live.Queues {
		queues[q.Name] = q
	}

	declaredExchanges := map[string]bool{}
	for _, e := range c.exchanges {
		declaredExchanges[e.Name] = true
		object := "exchange " + e.Name
		l, ok := exchanges[e.Name]
		if !ok {
			plan = append(plan, topology.Change{Kind: topology.Missing, Object: object, Attribute: "type", Want: e.Type})
			continue
		}
		fix := fmt.Sprintf("RabbitMQ cannot change an exchange in place: delete exchange %s (its bindings go with it) and apply again, which re-creates it and the declared bindings", e.Name)
		differs := func(attr, want, have string) {
			if want != have {
				plan = append(plan, topology.Change{Kind: topology.Differs, Object: object, Attribute: attr, Want: want, Have: have, Fix: fix})
			}
		}
		differs("type", e.Type, l.Type)
		differs("durable", "true", fmt.Sprint(l.Durable))
		differs("auto_delete", "false", fmt.Sprint(l.AutoDelete))
		differs("internal", "false", fmt.Sprint(l.Internal))
		for _, name := range sortedKeys(l.Arguments) {
			differs(name, "", argString(l.Arguments[name], true))
		}
	}

	for _, q := range c.queues {
		object := "queue " + q.name
		l, ok := queues[q.name]
		if !ok {
			plan = append(plan, topology.Change{Kind: topology.Missing, Object: object, Attribute: "type", Want: q.typ})
			continue
		}
		fix := queueFix(q.name, l.Messages)
		differs := func(attr, want, have string) {
			if want != have {
				plan = append(plan, topology.Change{Kind: topology.Differs, Object: object, Attribute: attr, Want: want, Have: have, Fix: fix})
			}
		}
		liveType := l.Type
		if liveType == "" {
			liveType = topology.Classic
		}
		differs("x-queue-type", q.typ, liveType)
		differs("durable", "true", fmt.Sprint(l.Durable))
		differs("auto_delete", "false", fmt.Sprint(l.AutoDelete))
		names := map[string]bool{}
		for name := range q.args {
			names[name] = true
		}
		for name := range l.Arguments {
			names[name] = true
		}
		delete(names, "x-queue-type") // compared as the type: absent = classic
		for _, name := range sortedKeys(names) {
			want, wok := q.args[name]
			have, hok := l.Arguments[name]
			differs(name, argString(want, wok), argString(have, hok))
		}
	}

	declared := map[compiledBinding]bool{}
	for _, b := range c.bindings {
		declared[b] = true
	}
	liveBindings := map[compiledBinding]bool{}
	for _, b := range live.Bindings {
		if !declaredExchanges[b.Source] {
			continue
		}
		lb := compiledBinding{exchange: b.Source, queue: b.Destination, key: b.RoutingKey}
		if b.DestinationKind == "exchange" {
			lb.queue = "exchange " + b.Destination
		}
		liveBindings[lb] = true
		if !declared[lb] {
			plan = append(plan, topology.Change{Kind: topology.Extra, Object: lb.object()})
		}
	}
	for _, b := range c.bindings {
		if !liveBindings[b] {
			plan = append(plan, topology.Change{Kind: topology.Missing, Object: b.object()})
		}
	}
	plan.Sort()
	return plan, nil
}

// argString renders an argument value the same way on both sides; "" means
// absent and `""` an empty string (the default exchange as DLX).
func argString(v any, present bool) string {
	if !present {
		return ""
	}
	s := fmt.Sprint(v)
	if s == "" {
		return `""`
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// NativeGaps lists what RabbitMQ cannot enforce of t natively (see the
// package function); `eventpipe topology plan` prints it beside the plan.
func (p *PubSub) NativeGaps(t topology.Topology) []string { return NativeGaps(t) }
