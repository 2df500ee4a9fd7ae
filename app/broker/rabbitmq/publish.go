package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
)

// UnroutableError is returned by Publish when the broker returned a message
// that no queue took (publishes are mandatory): nothing is bound to the
// exchange for the routing key — the topic's queue was deleted, or the broker
// lost it (a restart without its data). The message was not stored.
//
// It is not permanent: the adapter forgets the topic's declaration when a
// message comes back, so the next Publish to the topic declares the topology
// again, and a retry (the outbox's) delivers the message once the queue is
// back.
type UnroutableError struct {
	// Exchange and RoutingKey are what the messages were published with.
	Exchange, RoutingKey string
	// MessageUUID is the first message returned; Returned counts the
	// messages of the call that came back.
	MessageUUID string
	Returned    int
	// ReplyCode and ReplyText are the broker's reason, e.g. 312 NO_ROUTE.
	ReplyCode uint16
	ReplyText string
}

func (e *UnroutableError) Error() string {
	more := ""
	if e.Returned > 1 {
		more = fmt.Sprintf(" (and %d more)", e.Returned-1)
	}
	return fmt.Sprintf("rabbitmq: message %s%s returned by the broker (%d %s): no queue is bound to exchange %q for routing key %q",
		e.MessageUUID, more, e.ReplyCode, e.ReplyText, e.Exchange, e.RoutingKey)
}

// returnBuffer is how many returns a publish channel holds before amqp091's
// reader waits for the publisher to take them: the publisher drains them
// while it sends and while it waits, so this only smooths bursts. (A reader
// left waiting gives up after 5 s and drops the return.)
const returnBuffer = 64

// pubChannel is a pooled publish channel. With confirms on, its returns are
// watched; a channel goes back to the pool only with nothing pending on it,
// so every return on it belongs to the publish that holds it.
type pubChannel struct {
	ch      *amqp.Channel
	returns <-chan amqp.Return // nil with confirms off
	// dirty means a publish gave up with confirms (and maybe returns)
	// still pending: the channel is closed instead of pooled.
	dirty bool
}

func (p *PubSub) publish(topic string, msgs []*message.Message) error {
	deadline := time.Now().Add(p.cfg.PublishTimeout)
	ctx, cancel := context.WithDeadline(msgs[0].Context(), deadline)
	defer cancel()

	err := p.withChannel(ctx, func(pc *pubChannel) error {
		if _, ok := p.declared.Load(topic); !ok {
			if err := p.topology.Declare(pc.ch, topic); err != nil {
				return err
			}
			p.declared.Store(topic, struct{}{})
		}
		if isDeadLetter(msgs) {
			for _, m := range msgs {
				exchange, key, pub, err := p.deadLetterPublishing(topic, m)
				if err == nil {
					err = p.publishOn(ctx, pc, exchange, key, 1, func(int) (amqp.Publishing, context.Context, error) {
						return pub, m.Context(), nil
					})
				}
				if err != nil {
					return err
				}
			}
			return nil
		}
		exchange, key := p.topology.Route(topic)
		return p.publishOn(ctx, pc, exchange, key, len(msgs), func(i int) (amqp.Publishing, context.Context, error) {
			pub, err := p.marshaler.Marshal(msgs[i])
			return pub, msgs[i].Context(), err
		})
	})
	if _, returned := errors.AsType[*UnroutableError](err); returned {
		// What was declared is gone: declare it again next time.
		p.forgetDeclared(topic)
	}
	return err
}

// withChannel runs publish on a pooled channel. While the broker blocks the
// publish connection it fails at once with ErrBlocked: opening a channel,
// declaring and awaiting a confirm all wait for a broker that no longer reads
// the connection. If the broker blocks it during the call, publishOn notices;
// but a synchronous call already under way (a channel opening, a declaration,
// a socket write) cannot be interrupted, so when ctx ends first on a blocked
// connection, the connection is dropped (and redialed), which ends them.
func (p *PubSub) withChannel(ctx context.Context, publish func(*pubChannel) error) error {
	if err := p.pubConn.flow.Load().err(); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, p.pubConn.abortIfBlocked)
	defer stop()
	pc, err := p.acquire(ctx)
	if err == nil {
		err = publish(pc)
		p.release(pc)
	}
	if err != nil && !errors.Is(err, ErrBlocked) {
		if blocked := p.pubConn.flow.Load().err(); blocked != nil {
			// Whatever ended the call, the reason is the broker's.
			err = fmt.Errorf("%w (%w)", blocked, err)
		}
	}
	return err
}

// publishOn sends n messages (next(i) marshals the i-th and gives its own
// context) on pc in order and, with confirms on, waits until the broker has
// confirmed each one, watching for returns.
//
// Each message's own context and ctx bound its send and its confirm. They are
// checked as they are, not through a context derived per message: those two
// timers per message were 8 % of the CPU time of a 100-message publish
// (BENCHMARKS.md, R1).
func (p *PubSub) publishOn(ctx context.Context, pc *pubChannel, exchange, key string, n int,
	next func(i int) (amqp.Publishing, context.Context, error),
) error {
	mandatory := !p.cfg.DisableConfirms
	type pending struct {
		id      string
		ctx     context.Context
		confirm *amqp.DeferredConfirmation
	}
	sent := make([]pending, n)
	var returned []amqp.Return
	// A blocked connection fails the call: the broker reads nothing more.
	flow := p.pubConn.flow.Load()
	if err := flow.err(); err != nil {
		return err
	}
	returns := pc.returns
	drain := func() {
		for {
			select {
			case r, ok := <-returns:
				if !ok {
					returns = nil
					return
				}
				returned = append(returned, r)
			default:
				return
			}
		}
	}
	for i := range sent {
		pub, msgCtx, err := next(i)
		if err != nil {
			return fmt.Errorf("message %s: %w", pub.MessageId, err)
		}
		if err := msgCtx.Err(); err != nil {
			return fmt.Errorf("message %s: %w", pub.MessageId, err)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("message %s: %w", pub.MessageId, err)
		}
		if now := p.pubConn.flow.Load(); now != flow && now.blocked {
			return fmt.Errorf("message %s: %w", pub.MessageId, now.err())
		}
		// From the first send until every confirm is in, the channel has
		// something pending.
		pc.dirty = true
		confirm, err := pc.ch.PublishWithDeferredConfirm(exchange, key, mandatory, false, pub)
		if err != nil {
			return fmt.Errorf("message %s: %w", pub.MessageId, err)
		}
		sent[i] = pending{pub.MessageId, msgCtx, confirm}
		drain()
	}
	if p.cfg.DisableConfirms {
		pc.dirty = false
		return nil
	}
	var refused error
	for _, m := range sent {
		var acked bool
		var err error
	wait:
		for {
			select {
			case <-m.confirm.Done():
				acked = m.confirm.Acked()
				break wait
			case r, ok := <-returns:
				if !ok {
					returns = nil
					continue
				}
				returned = append(returned, r)
			case <-flow.changed:
				if flow = p.pubConn.flow.Load(); flow.blocked {
					err = flow.err()
					break wait
				}
			case <-m.ctx.Done():
				err = m.ctx.Err()
				break wait
			case <-ctx.Done():
				err = ctx.Err()
				break wait
			}
		}
		switch {
		case err != nil:
			return fmt.Errorf("message %s: waiting for the publisher confirm: %w", m.id, err)
		case !acked && pc.ch.IsClosed():
			// amqp091 nacks what was pending when the channel closed.
			return fmt.Errorf("message %s: channel closed before the broker confirmed: %w", m.id, ErrNotConnected)
		case !acked && refused == nil:
			// Reported once the rest are confirmed, so that the channel
			// is left with nothing pending.
			refused = fmt.Errorf("message %s: %w", m.id, ErrNotConfirmed)
		}
	}
	// The broker sends a return before the confirm of the same message, and
	// amqp091 hands both over in that order: every return is in by now.
	drain()
	pc.dirty = false
	if refused != nil {
		return refused
	}
	if len(returned) > 0 {
		r := returned[0]
		return &UnroutableError{
			Exchange: exchange, RoutingKey: key,
			MessageUUID: r.MessageId, Returned: len(returned),
			ReplyCode: r.ReplyCode, ReplyText: r.ReplyText,
		}
	}
	return nil
}

// acquire takes a channel from the pool, opening it if it is new or was
// closed (by a broker error or a lost connection). On error the slot goes
// back to the pool empty, so the pool never shrinks.
func (p *PubSub) acquire(ctx context.Context) (*pubChannel, error) {
	var pc *pubChannel
	select {
	case pc = <-p.pool:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for a free publish channel: %w", ctx.Err())
	}
	if pc != nil && !pc.ch.IsClosed() {
		return pc, nil
	}
	ch, err := p.pubConn.channel()
	if err == nil && !p.cfg.DisableConfirms {
		if err = ch.Confirm(false); err != nil {
			_ = ch.Close()
			err = fmt.Errorf("enable publisher confirms: %w", err)
		}
	}
	if err != nil {
		p.pool <- nil
		return nil, err
	}
	pc = &pubChannel{ch: ch}
	if !p.cfg.DisableConfirms {
		// Without confirms a return cannot be matched to its publish, so
		// publishes are not mandatory and nobody listens.
		pc.returns = ch.NotifyReturn(make(chan amqp.Return, returnBuffer))
	}
	return pc, nil
}

// release puts pc back in the pool, or closes it and puts back an empty slot
// if a publish left something pending on it. The close does not hold the
// caller: on a blocked connection it waits until the broker reads again, or
// the connection closes.
func (p *PubSub) release(pc *pubChannel) {
	if pc.dirty {
		go func(ch *amqp.Channel) { _ = ch.Close() }(pc.ch)
		pc = nil
	}
	p.pool <- pc
}

// forgetDeclared makes the next publish to topic declare its topology again.
func (p *PubSub) forgetDeclared(topic string) {
	p.declared.Delete(topic)
	if f, ok := p.topology.(forgetter); ok {
		f.forget()
	}
}

// forgetAllDeclared makes every topic declare its topology again: after a
// reconnect (of either connection), since a broker restarted without its data
// has lost every queue, and a subscription resuming declares through the same
// Topology.
func (p *PubSub) forgetAllDeclared() {
	p.declared.Clear()
	if f, ok := p.topology.(forgetter); ok {
		f.forget()
	}
}
