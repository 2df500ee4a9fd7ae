package attemptledger

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventpipe/eventpipe/migrations"
)

// Postgres is the ledger on the attempt_ledger table (migration
// 00009_attempt_ledger.sql).
type Postgres struct {
	pool  *pgxpool.Pool
	table string // quoted schema.attempt_ledger
	ttl   time.Duration
}

// NewPostgres returns the ledger on the attempt_ledger table of schema
// (migrations.DefaultSchema when empty), which must be migrated. Rows not
// bumped for ttl (DefaultTTL when 0) are expired.
func NewPostgres(pool *pgxpool.Pool, schema string, ttl time.Duration) (*Postgres, error) {
	schema = migrations.SchemaOrDefault(schema)
	if err := migrations.ValidateSchema(schema); err != nil {
		return nil, fmt.Errorf("attempt ledger: %w", err)
	}
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Postgres{pool: pool, table: pgx.Identifier{schema, "attempt_ledger"}.Sanitize(), ttl: ttl}, nil
}

// Bump records one more crash redelivery and returns the count, committed
// (one autocommitted statement) before it returns. A row older than the TTL
// starts again from 1; the statement also expires the other old rows, so the
// table holds only recent crashes without a janitor of its own (bumps are
// rare: only crashes cause them).
func (p *Postgres) Bump(ctx context.Context, queue, messageID string) (int, error) {
	if err := checkKey(queue, messageID); err != nil {
		return 0, err
	}
	var n int
	err := p.pool.QueryRow(ctx, `
WITH expired AS (
    DELETE FROM `+p.table+`
    WHERE updated_at < now() - make_interval(secs => $3) AND NOT (queue = $1 AND message_id = $2)
)
INSERT INTO `+p.table+` AS l (queue, message_id, crashes, updated_at) VALUES ($1, $2, 1, now())
ON CONFLICT (queue, message_id) DO UPDATE SET
    crashes = CASE WHEN l.updated_at < now() - make_interval(secs => $3) THEN 1 ELSE l.crashes + 1 END,
    updated_at = now()
RETURNING crashes`, queue, messageID, p.ttl.Seconds()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("attempt ledger: bump %s on %s: %w", messageID, queue, err)
	}
	return n, nil
}

// Forget deletes the row of messageID on queue, if any.
func (p *Postgres) Forget(ctx context.Context, queue, messageID string) error {
	if err := checkKey(queue, messageID); err != nil {
		return err
	}
	if _, err := p.pool.Exec(ctx, `DELETE FROM `+p.table+` WHERE queue = $1 AND message_id = $2`, queue, messageID); err != nil {
		return fmt.Errorf("attempt ledger: forget %s on %s: %w", messageID, queue, err)
	}
	return nil
}
