package outbox

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/dbtx"
)

// Writer is "publish after commit", the one way handlers, producers and
// stores ask for a message to go out with their business change: Write is
// called inside the business transaction, and the messages are published only
// once it commits — never if it rolls back.
//
// The composition root picks the Writer once: TxWriter (the outbox table, in
// the PostgreSQL transaction ctx carries; a relay publishes) with a database,
// AfterCommit (the memory twin) without one.
type Writer interface {
	Write(ctx context.Context, topic string, msgs ...*message.Message) error
}

// TxWriter writes into Table inside the transaction ctx carries (dbtx.From).
// Outside a transaction it refuses: a row written on its own would be
// published whether or not the business change commits.
type TxWriter struct{ Table Table }

var _ Writer = TxWriter{}

// Write implements Writer.
func (w TxWriter) Write(ctx context.Context, topic string, msgs ...*message.Message) error {
	tx, ok := dbtx.From(ctx)
	if !ok {
		return fmt.Errorf("outbox write %s: no transaction in the context (dbtx.InTx)", topic)
	}
	return w.Table.Write(ctx, tx, topic, msgs...)
}

// AfterCommit is the Writer of the embedded mode (no database): Write stages
// the messages in the unit of work ctx carries (Unit), which publishes them
// through Publisher after its function returned nil — after the in-memory
// commit, never from inside it. Without a database there is no relay: a
// message whose publish fails then is reported (*NotPublishedError) and not
// retried; the embedded mode keeps nothing across a restart anyway.
type AfterCommit struct{ Publisher message.Publisher }

var _ Writer = AfterCommit{}

// Write implements Writer.
func (a AfterCommit) Write(ctx context.Context, topic string, msgs ...*message.Message) error {
	u, ok := ctx.Value(unitKey{}).(*unit)
	if !ok {
		return fmt.Errorf("outbox write %s: no unit of work in the context (outbox.Unit)", topic)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, m := range msgs {
		u.staged = append(u.staged, staged{pub: a.Publisher, topic: topic, msg: m})
	}
	return nil
}

type unitKey struct{}

type unit struct {
	mu     sync.Mutex
	staged []staged
}

type staged struct {
	pub   message.Publisher
	topic string
	msg   *message.Message
}

// Unit runs fn as one unit of work for AfterCommit writers: what they stage
// while fn runs is published after fn returns nil, and dropped when it returns
// an error. Inside an enclosing Unit the enclosing one publishes. With
// TxWriter nothing is staged (the rows are in the transaction), so callers use
// Unit around every business change, whichever writer the root chose.
//
// An error from fn is returned as is; a failed publish after fn succeeded is a
// *NotPublishedError (the change stays committed).
func Unit(ctx context.Context, fn func(ctx context.Context) error) error {
	if _, ok := ctx.Value(unitKey{}).(*unit); ok {
		return fn(ctx)
	}
	u := &unit{}
	if err := fn(context.WithValue(ctx, unitKey{}, u)); err != nil {
		return err
	}
	u.mu.Lock()
	msgs := u.staged
	u.staged = nil
	u.mu.Unlock()
	var errs []error
	for _, s := range msgs {
		if err := s.pub.Publish(s.topic, s.msg); err != nil {
			errs = append(errs, fmt.Errorf("publish %s (message %s): %w", s.topic, s.msg.UUID, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return &NotPublishedError{Err: err}
	}
	return nil
}

// NotPublishedError reports messages that were committed with their business
// change but whose publish after the commit failed (AfterCommit only).
type NotPublishedError struct{ Err error }

func (e *NotPublishedError) Error() string {
	return "committed, not published: " + e.Err.Error()
}

func (e *NotPublishedError) Unwrap() error { return e.Err }

// Checked returns w with check run on every message before anything is
// written: when check refuses one, Write writes none of the call's messages
// and returns check's error. The composition root uses it to hold what our
// producers write to the strict JSON Schemas (strict on publish).
func Checked(w Writer, check func(topic string, msg *message.Message) error) Writer {
	return checked{w: w, check: check}
}

type checked struct {
	w     Writer
	check func(topic string, msg *message.Message) error
}

// Write implements Writer.
func (c checked) Write(ctx context.Context, topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if err := c.check(topic, m); err != nil {
			return err
		}
	}
	return c.w.Write(ctx, topic, msgs...)
}
