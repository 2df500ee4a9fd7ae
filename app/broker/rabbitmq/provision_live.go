package rabbitmq

// # Reading the live broker
//
// Plan reads the vhost's live exchanges, queues (with arguments, type and
// depth) and bindings with `rabbitmqctl list_exchanges|list_queues|
// list_bindings -p VHOST --formatter json` (ReadLive) and compares (Diff):
// missing exchanges, queues and bindings; differing types, flags and arguments;
// bindings on the declared exchanges that nobody declared (Extra). AMQP alone
// cannot do this: a passive declare reports neither arguments nor bindings, and
// an active one changes the broker. The management HTTP API could, but it is a
// plugin a node may not run (QueueStats, which has no other source of
// unacknowledged counts, copes without it), whereas rabbitmqctl ships with
// every node; the list commands are scoped to the one vhost, unlike
// export_definitions, which would also carry every user's password hash.
// Diff takes a Live value, so a reader of the
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
	"strings"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventpipe/eventpipe/app/topology"
)

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
