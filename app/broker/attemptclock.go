package broker

import (
	"context"
	"sync"
	"time"
)

// AttemptClock tells a broker that renews the lease of a message while it is
// handled (a heartbeat: SQS visibility, the Postgres claim) when the attempt
// under way must end, so that a handler past its deadline (one that ignores
// its context) is not kept leased for ever: its message goes to another
// consumer when the lease then runs out.
//
// The broker puts a clock in the context of the message it delivers
// (WithAttemptClock); middleware.Timeout reports each attempt's deadline to
// it (StartAttempt). It is safe for concurrent use: the handler's goroutine
// reports, the broker's reads. A message whose context carries no clock, or
// whose handler never reports, has no deadline.
type AttemptClock struct {
	// Context is the message's context the clock was put in: the clock is
	// that context too, with itself as a value, so that putting it there
	// costs one allocation per message.
	context.Context

	mu sync.Mutex
	// deadline is the running attempt's, zero between attempts (a retry's
	// backoff is the policy's, bounded by it, and keeps the lease).
	deadline time.Time
}

type attemptClockKey struct{}

// WithAttemptClock returns ctx carrying a new clock, and the clock.
func WithAttemptClock(ctx context.Context) (context.Context, *AttemptClock) {
	c := &AttemptClock{Context: ctx}
	return c, c
}

// Value is the clock for its own key, else the parent context's value.
func (c *AttemptClock) Value(key any) any {
	if key == (attemptClockKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// StartAttempt reports to the clock in ctx, if there is one, that an attempt
// runs until deadline; calling end reports that it is over. Without a clock
// it does nothing.
func StartAttempt(ctx context.Context, deadline time.Time) (end func()) {
	c, _ := ctx.Value(attemptClockKey{}).(*AttemptClock)
	if c == nil {
		return func() {}
	}
	c.mu.Lock()
	c.deadline = deadline
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		c.deadline = time.Time{}
		c.mu.Unlock()
	}
}

// Overdue reports whether an attempt is running past its deadline at now. A
// nil clock is never overdue.
func (c *AttemptClock) Overdue(now time.Time) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.deadline.IsZero() && !now.Before(c.deadline)
}
