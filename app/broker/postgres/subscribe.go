package postgres

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Subscribe starts a subscription that competes with every other subscriber
// of topic. The channel closes when ctx ends or the PubSub closes. Each
// message must be acked or nacked before the next one arrives.
func (p *PubSub) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if err := p.schema.checkTopic(topic); err != nil {
		return nil, err
	}
	if p.isClosed() {
		return nil, ErrClosed
	}
	if p.cfg.AutoInitializeSchema {
		if err := p.ensureTable(ctx, topic); err != nil {
			return nil, err
		}
	} else if err := p.checkTable(ctx, topic); err != nil {
		return nil, err
	}

	nacked := newNackSet()
	// One watermill-sql Subscriber per subscription: it is cheap (no
	// connection of its own) and gives each subscription its own nack set.
	logger := p.logger.With(watermill.LogFields{"topic": topic})
	sub, err := wsql.NewSubscriber(settlingBeginner{pool: p.consumePool, logger: logger}, wsql.SubscriberConfig{
		AckDeadline:    &p.cfg.AckDeadline,
		PollInterval:   p.cfg.PollInterval,
		RetryInterval:  p.cfg.RetryInterval,
		ResendInterval: p.cfg.RetryInterval, // unused: nacks never reach watermill-sql
		SchemaAdapter:  p.schema,
		OffsetsAdapter: queueOffsets{schema: p.schema, nacked: nacked, redeliveryDelay: p.cfg.RedeliveryDelay},
	}, logger)
	if err != nil {
		return nil, fmt.Errorf("postgres: subscribe %s: %w", topic, err)
	}

	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	p.subs[sub] = struct{}{}
	p.relays.Add(1)
	p.mu.Unlock()

	upstream, err := sub.Subscribe(ctx, topic)
	if err != nil {
		p.forget(sub)
		p.relays.Done()
		return nil, fmt.Errorf("postgres: subscribe %s: %w", topic, err)
	}
	out := make(chan *message.Message)
	go func() {
		defer p.relays.Done()
		defer p.forget(sub)
		defer close(out)
		relay(upstream, out, nacked)
	}()
	return out, nil
}

// relay hands each upstream message to the consumer as a copy, so that it can
// turn the consumer's nack into a release of the row (see queueOffsets). The
// copy shares the upstream context: it carries watermill-sql's transaction and
// is cancelled when the message is settled, the ack deadline passes, or the
// subscription ends.
func relay(upstream <-chan *message.Message, out chan<- *message.Message, nacked *nackSet) {
	for m := range upstream {
		delivered := m.Copy()
		delivered.SetContext(m.Context())
		select {
		case out <- delivered:
		case <-m.Context().Done():
			// Nobody took it before watermill-sql gave up on it; the row
			// goes back to the queue with the rollback.
			continue
		}
		select {
		case <-delivered.Acked():
			m.Ack()
		case <-delivered.Nacked():
			// The delay is read from the consumer's copy, where the retry
			// middleware set it.
			nacked.add(m, nackOf(delivered))
			m.Ack()
		case <-m.Context().Done():
			// Ack deadline, Close or ctx: the row is released; a late
			// ack or nack from the consumer changes nothing.
		}
	}
}

func (p *PubSub) forget(sub *wsql.Subscriber) {
	p.mu.Lock()
	delete(p.subs, sub)
	p.mu.Unlock()
	_ = sub.Close()
}
