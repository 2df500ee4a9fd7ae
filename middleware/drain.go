package middleware

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Drain lets a message that is being handled when intake stops finish: its
// handler's context no longer ends with the subscription (which shutdown
// cancels first) but with drain, which the composition root cancels once the
// shutdown timeout is over. The context keeps every value of the delivery's.
//
// Without it a SIGTERM cancels every in-flight handler at once, so work that
// fitted easily in the shutdown timeout is requeued and its answer (a
// callback, a follow-up) is never sent.
//
// running, when not nil, counts the handlers inside it, so that shutdown can
// tell how many it cancelled and wait for them to return (Running.Wait).
func Drain(drain context.Context, running *Running) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			if running != nil {
				running.n.Add(1)
				defer running.n.Add(-1)
			}
			msg.SetContext(drained{Context: drain, values: context.WithoutCancel(msg.Context())})
			return h(msg)
		}
	}
}

// Running counts the handlers running inside Drain.
type Running struct{ n atomic.Int64 }

// Count is how many handlers run now.
func (r *Running) Count() int64 { return r.n.Load() }

// Wait returns true once no handler runs, false if ctx ends first. It polls:
// it is for shutdown, not for the hot path.
func (r *Running) Wait(ctx context.Context) bool {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for r.n.Load() > 0 {
		select {
		case <-ctx.Done():
			return r.n.Load() == 0
		case <-t.C:
		}
	}
	return true
}

// drained is a delivery's context that ends with drain: its Deadline, Done
// and Err are drain's (the embedded Context), its values the delivery's.
//
// One value per message instead of a cancelable context of its own hung on
// drain (context.WithCancel over context.WithoutCancel, an AfterFunc and its
// stop; 5 allocations and a registration in the drain's children per
// message, and a children map of its own for Timeout's context to register
// in): what derives a cancelable context from it (Timeout, once per attempt)
// registers on drain directly through AfterFunc.
type drained struct {
	context.Context
	// values is context.WithoutCancel of the delivery's context: it hides the
	// delivery's cancellation from the context package, so that
	// context.Cause and derived contexts see drain's, not the delivery's.
	values context.Context
}

func (d drained) Value(key any) any { return d.values.Value(key) }

// AfterFunc lets a context derived from d (context.WithCancel,
// context.WithDeadline, context.AfterFunc) follow drain without a goroutine
// of its own: the context package uses it for a parent that is none of its
// own types.
func (d drained) AfterFunc(f func()) (stop func() bool) { return context.AfterFunc(d.Context, f) }

func (d drained) String() string { return "middleware.Drain(" + contextName(d.values) + ")" }

func contextName(ctx context.Context) string {
	if s, ok := ctx.(interface{ String() string }); ok {
		return s.String()
	}
	return "context"
}
