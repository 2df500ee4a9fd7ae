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
	mu sync.Mutex
	// deadline is the running attempt's, zero between attempts (a retry's
	// backoff is the policy's, bounded by it, and keeps the lease).
	deadline time.Time
}

type attemptClockKey struct{}

// WithAttemptClock returns ctx carrying a new clock, and the clock.
func WithAttemptClock(ctx context.Context) (context.Context, *AttemptClock) {
	c := &AttemptClock{}
	return context.WithValue(ctx, attemptClockKey{}, c), c
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
