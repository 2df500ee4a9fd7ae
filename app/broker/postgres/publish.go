package postgres

import (
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/eventpipe/eventpipe/app/broker"
)

// Publish checks the payload limit, then inserts all messages in one
// statement: they commit together, in order. The first message's context
// bounds the call.
func (p *PubSub) Publish(topic string, msgs ...*message.Message) error {
	if err := broker.CheckPayloads(msgs); err != nil {
		return err
	}
	if len(msgs) == 0 {
		return nil
	}
	if err := p.schema.checkTopic(topic); err != nil {
		return err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrClosed
	}
	ctx := msgs[0].Context()
	if p.cfg.AutoInitializeSchema {
		if err := p.ensureTable(ctx, topic); err != nil {
			return err
		}
	}
	if err := p.publisher.Publish(topic, msgs...); err != nil {
		return p.explain(topic, fmt.Errorf("postgres: publish %s: %w", topic, err))
	}
	return nil
}

// explain adds what to do to an undefined_table error.
func (p *PubSub) explain(topic string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return fmt.Errorf("%w (queue table %s does not exist: create it with SubscribeInitialize or enable AutoInitializeSchema)",
			err, p.schema.table(topic))
	}
	return err
}
