package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventpipe/eventpipe/migrations"
)

// Janitor defaults.
const (
	DefaultRetention         = 7 * 24 * time.Hour
	DefaultRetentionInterval = time.Hour
)

// Janitor deletes published rows older than Retention, so the outbox keeps
// a week of history for investigations without growing forever. Unpublished
// and parked rows are never deleted. Several may run at once.
type Janitor struct {
	// Pool is the database. Required.
	Pool *pgxpool.Pool
	// Schema holding the outbox table. Default migrations.DefaultSchema.
	Schema string
	// Retention is how long a published row is kept. Default 7 days.
	Retention time.Duration
	// Interval is the time between two runs. Default 1h.
	Interval time.Duration
	// Logger gets a line per run that deleted rows, and errors. Default
	// slog.Default().
	Logger *slog.Logger
}

// retentionBatch bounds one DELETE, keeping each transaction short.
const retentionBatch = 10_000

func (j *Janitor) setDefaults() error {
	j.Schema = migrations.SchemaOrDefault(j.Schema)
	if err := migrations.ValidateSchema(j.Schema); err != nil {
		return fmt.Errorf("outbox janitor: %w", err)
	}
	if j.Pool == nil {
		return errors.New("outbox janitor: no pool")
	}
	if j.Retention <= 0 {
		j.Retention = DefaultRetention
	}
	if j.Interval <= 0 {
		j.Interval = DefaultRetentionInterval
	}
	if j.Logger == nil {
		j.Logger = slog.Default()
	}
	return nil
}

// DeletePublished deletes published rows older than Retention now and
// returns how many.
func (j Janitor) DeletePublished(ctx context.Context) (int64, error) {
	if err := j.setDefaults(); err != nil {
		return 0, err
	}
	table := pgx.Identifier{j.Schema, "outbox"}.Sanitize()
	q := `DELETE FROM ` + table + ` WHERE id IN (
		SELECT id FROM ` + table + `
		WHERE published_at < now() - $1 * interval '1 microsecond' LIMIT $2)`
	var total int64
	for {
		tag, err := j.Pool.Exec(ctx, q, j.Retention.Microseconds(), retentionBatch)
		if err != nil {
			return total, fmt.Errorf("outbox janitor: delete published: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < retentionBatch {
			return total, nil
		}
	}
}

// Run deletes at once, then every Interval, until ctx ends; it then returns
// nil. Only a configuration error ends it early.
func (j Janitor) Run(ctx context.Context) error {
	if err := j.setDefaults(); err != nil {
		return err
	}
	t := time.NewTicker(j.Interval)
	defer t.Stop()
	for {
		n, err := j.DeletePublished(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			j.Logger.Error("outbox retention failed", "error", err)
		case n > 0:
			j.Logger.Info("published outbox rows deleted", "count", n, "retention", j.Retention)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
