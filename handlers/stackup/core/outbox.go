package core

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/dbtx"
	"github.com/eventpipe/eventpipe/app/outbox"
)

// Outbox makes Core publish only after commit (§5.14: "반드시 커밋 후에
// 발행한다"). Stage is called inside the business transaction; Flush after it
// committed, with what was staged.
type Outbox interface {
	Stage(ctx context.Context, topic string, msg *message.Message) error
	// Flush runs after the transaction committed.
	Flush(ctx context.Context) error
}

// PostgresOutbox writes staged messages into the transactional outbox
// (app/outbox) in the transaction ctx carries; the relay publishes them
// after commit. Flush does nothing.
type PostgresOutbox struct {
	// Schema holds the outbox table (the store's schema).
	Schema string
}

// Stage implements Outbox.
func (o PostgresOutbox) Stage(ctx context.Context, topic string, msg *message.Message) error {
	tx, ok := dbtx.From(ctx)
	if !ok {
		return errors.New("stackup outbox: stage outside a transaction")
	}
	return outbox.Table{Schema: o.Schema}.Write(ctx, tx, topic, msg)
}

// Flush implements Outbox.
func (PostgresOutbox) Flush(context.Context) error { return nil }

// AfterCommit is the memory store's outbox: staged messages wait in the
// context (see Begin) and are published by Flush, after the in-memory commit
// — never from inside the transaction. Without a database there is no relay;
// a message whose publish fails after commit is lost with a log line (the
// embedded mode is not durable anyway, decision 0002).
type AfterCommit struct {
	Publisher message.Publisher
}

type stagedKey struct{}

type staged struct {
	mu   sync.Mutex
	msgs []stagedMsg
}

type stagedMsg struct {
	topic string
	msg   *message.Message
}

// Begin returns ctx with an empty staging area. Service calls it before every
// transaction, whatever the outbox.
func Begin(ctx context.Context) context.Context {
	return context.WithValue(ctx, stagedKey{}, &staged{})
}

// Stage implements Outbox.
func (AfterCommit) Stage(ctx context.Context, topic string, msg *message.Message) error {
	s, ok := ctx.Value(stagedKey{}).(*staged)
	if !ok {
		return errors.New("stackup outbox: stage without Begin")
	}
	s.mu.Lock()
	s.msgs = append(s.msgs, stagedMsg{topic, msg})
	s.mu.Unlock()
	return nil
}

// Flush implements Outbox.
func (o AfterCommit) Flush(ctx context.Context) error {
	s, ok := ctx.Value(stagedKey{}).(*staged)
	if !ok {
		return nil
	}
	s.mu.Lock()
	msgs := s.msgs
	s.msgs = nil
	s.mu.Unlock()
	var errs []error
	for _, m := range msgs {
		if err := o.Publisher.Publish(m.topic, m.msg); err != nil {
			errs = append(errs, fmt.Errorf("publish %s after commit: %w", m.topic, err))
		}
	}
	return errors.Join(errs...)
}

// Discard drops what ctx staged (the transaction rolled back).
func Discard(ctx context.Context) {
	if s, ok := ctx.Value(stagedKey{}).(*staged); ok {
		s.mu.Lock()
		s.msgs = nil
		s.mu.Unlock()
	}
}
