package outbox

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventpipe/eventpipe/app/inbox"
)

// WorkersConfig configures RunWorkers.
type WorkersConfig struct {
	// Relay configures the relay; its Schema is also the janitors'.
	Relay RelayConfig
	// Retention is how long published outbox rows are kept. Default 7 days.
	Retention time.Duration
	// RetentionInterval is the time between two retention runs. Default 1h.
	RetentionInterval time.Duration
	// Inbox, when set, is cleaned by an inbox.Janitor with InboxTTL and
	// InboxInterval (defaults 24h and 10m).
	Inbox         inbox.Store
	InboxTTL      time.Duration
	InboxInterval time.Duration
}

// RunWorkers runs everything the database needs in the background of `serve`
// — the relay, the outbox retention janitor and, when cfg.Inbox is set, the
// inbox janitor — until ctx ends, then waits for them and returns nil. It
// returns an error at once, starting nothing, when the configuration is
// invalid.
func RunWorkers(ctx context.Context, pool *pgxpool.Pool, publisher message.Publisher, cfg WorkersConfig, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.Default()
	}
	relay, err := NewRelay(pool, publisher, cfg.Relay, logger)
	if err != nil {
		return err
	}
	jobs := []func(context.Context) error{
		relay.Run,
		Janitor{Pool: pool, Schema: cfg.Relay.Schema, Retention: cfg.Retention, Interval: cfg.RetentionInterval, Logger: logger}.Run,
	}
	if cfg.Inbox != nil {
		jobs = append(jobs, inbox.Janitor{Store: cfg.Inbox, TTL: cfg.InboxTTL, Interval: cfg.InboxInterval, Logger: logger}.Run)
	}
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, job := range jobs {
		wg.Go(func() { errs[i] = job(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
