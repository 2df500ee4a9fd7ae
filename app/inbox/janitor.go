package inbox

import (
	"context"
	"log/slog"
	"time"
)

// Janitor defaults.
const (
	DefaultTTL             = 24 * time.Hour
	DefaultJanitorInterval = 10 * time.Minute
)

// Janitor deletes old markers periodically (StackUp §4: 24 h cleanup). Several
// may run at once: deleting is idempotent.
type Janitor struct {
	// Store is cleaned. Required.
	Store Store
	// TTL is how long a marker is kept. Default 24h.
	TTL time.Duration
	// Interval is the time between two cleanups. Default 10m.
	Interval time.Duration
	// Logger gets one line per cleanup that deleted something, and errors.
	// Default slog.Default().
	Logger *slog.Logger
}

// Run cleans once at once, then every Interval, until ctx ends; it then
// returns nil. A failed cleanup is logged and retried at the next tick.
func (j Janitor) Run(ctx context.Context) error {
	if j.TTL <= 0 {
		j.TTL = DefaultTTL
	}
	if j.Interval <= 0 {
		j.Interval = DefaultJanitorInterval
	}
	if j.Logger == nil {
		j.Logger = slog.Default()
	}
	t := time.NewTicker(j.Interval)
	defer t.Stop()
	for {
		n, err := j.Store.Cleanup(ctx, j.TTL)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			j.Logger.Error("inbox cleanup failed", "error", err)
		case n > 0:
			j.Logger.Info("inbox markers deleted", "count", n, "ttl", j.TTL)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
