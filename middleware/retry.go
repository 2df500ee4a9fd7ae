package middleware

import (
	"context"
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/cenkalti/backoff/v5"

	"github.com/eventpipe/eventpipe/app/failure"
)

// Retry re-runs a failed handler in process with exponential backoff and
// jitter before the message is nacked back to the broker.
//
// Watermill's middleware.Retry is not used: its hook fires on failed retries
// rather than on retries, its ShouldRetry check advances the backoff, and it
// retries a handler cut short by shutdown. This one is small enough to own.
type Retry struct {
	// MaxRetries is the number of retries after the first attempt.
	MaxRetries int
	// InitialInterval is the wait before the first retry; each next wait is
	// Multiplier times longer, up to MaxInterval, each spread by
	// ±RandomizationFactor.
	InitialInterval     time.Duration
	MaxInterval         time.Duration
	Multiplier          float64
	RandomizationFactor float64
	// OnRetry, when set, is called before each retry with its number (from 1),
	// the wait before it and the error that caused it.
	OnRetry func(msg *message.Message, retry int, wait time.Duration, err error)
}

// Middleware returns the handler wrapped with retries. Only transient
// failures are retried (see package failure): a permanent or duplicate one is
// returned at once, and so is a failure caused by cancellation (shutdown) —
// the message goes back to the broker instead. A transient error asking for
// a later retry (failure.AsTransient with retryAfter) waits at least that long.
func (r Retry) Middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		// Each attempt starts from the original context: a previous attempt
		// may have cancelled a context derived from it.
		ctx := msg.Context()
		b := &backoff.ExponentialBackOff{
			InitialInterval:     r.InitialInterval,
			MaxInterval:         r.MaxInterval,
			Multiplier:          r.Multiplier,
			RandomizationFactor: r.RandomizationFactor,
		}
		b.Reset()
		for retry := 0; ; retry++ {
			msg.SetContext(ctx)
			produced, err := h(msg)
			if err == nil || retry >= r.MaxRetries || failure.Of(err) != failure.Transient ||
				errors.Is(err, context.Canceled) || ctx.Err() != nil {
				return produced, err
			}
			wait := max(b.NextBackOff(), failure.RetryAfter(err))
			if r.OnRetry != nil {
				r.OnRetry(msg, retry+1, wait, err)
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, err
			case <-t.C:
			}
		}
	}
}
