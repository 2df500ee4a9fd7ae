package rabbitmq

import (
	"context"
	"fmt"
	"sort"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventpipe/eventpipe/app/topology"
)

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
