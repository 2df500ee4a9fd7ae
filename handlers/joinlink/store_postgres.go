package joinlink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventpipe/eventpipe/app/dbtx"
	"github.com/eventpipe/eventpipe/migrations"
)

// Postgres is the Store on PostgreSQL (migrations/00007_joinlink.sql). A
// transaction in ctx (dbtx.From) is used when there is one.
type Postgres struct {
	pool   *pgxpool.Pool
	schema string
}

var _ Store = (*Postgres)(nil)

// NewPostgres returns the store on schema (migrated; the default schema when
// empty).
func NewPostgres(pool *pgxpool.Pool, schema string) (*Postgres, error) {
	schema = migrations.SchemaOrDefault(schema)
	if err := migrations.ValidateSchema(schema); err != nil {
		return nil, fmt.Errorf("joinlink: %w", err)
	}
	return &Postgres{pool: pool, schema: schema}, nil
}

func (p *Postgres) table() string {
	return pgx.Identifier{p.schema, "hdb_program_session"}.Sanitize()
}

// CreateSession implements Store.
func (p *Postgres) CreateSession(ctx context.Context, now time.Time) (int64, error) {
	var id int64
	err := dbtx.Q(ctx, p.pool).QueryRow(ctx, `INSERT INTO `+p.table()+` (created_at, updated_at) VALUES ($1, $1) RETURNING id`, micro(now)).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("create program session: %w", err)
	}
	return id, nil
}

const sessionColumns = `id, link_generation_at, link_generation_status, updated_at, COALESCE(updated_by, 0)`

func scanSession(row pgx.Row) (Session, error) {
	var s Session
	var status string
	if err := row.Scan(&s.ID, &s.LinkGenerationAt, &status, &s.UpdatedAt, &s.UpdatedBy); err != nil {
		return Session{}, err
	}
	s.Status = Status(status)
	s.UpdatedAt = s.UpdatedAt.UTC()
	if s.LinkGenerationAt != nil {
		t := s.LinkGenerationAt.UTC()
		s.LinkGenerationAt = &t
	}
	return s, nil
}

// Session implements Store.
func (p *Postgres) Session(ctx context.Context, id int64) (Session, error) {
	s, err := scanSession(dbtx.Q(ctx, p.pool).QueryRow(ctx, `SELECT `+sessionColumns+` FROM `+p.table()+` WHERE id = $1 AND deleted_at IS NULL`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, fmt.Errorf("program session %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Session{}, fmt.Errorf("program session %d: %w", id, err)
	}
	return s, nil
}

// SetLinkGeneration implements Store: one guarded UPDATE; when it changes
// nothing, a read tells a missing session from one in progress.
func (p *Postgres) SetLinkGeneration(ctx context.Context, id int64, at *time.Time, actor int64, now, staleBefore time.Time) (Session, error) {
	status := Scheduled
	var atArg *time.Time
	if at == nil {
		status = NotScheduled
	} else {
		t := micro(*at)
		atArg = &t
	}
	s, err := scanSession(dbtx.Q(ctx, p.pool).QueryRow(ctx, `UPDATE `+p.table()+`
		SET link_generation_at = $2, link_generation_status = $3, updated_at = $4, updated_by = NULLIF($5, 0)
		WHERE id = $1 AND deleted_at IS NULL
		  AND NOT (link_generation_status = 'IN_PROGRESS' AND updated_at >= $6)
		RETURNING `+sessionColumns, id, atArg, string(status), micro(now), actor, micro(staleBefore)))
	if errors.Is(err, pgx.ErrNoRows) {
		if _, err := p.Session(ctx, id); err != nil {
			return Session{}, err
		}
		return Session{}, fmt.Errorf("program session %d: %w", id, ErrInProgress)
	}
	if err != nil {
		return Session{}, fmt.Errorf("set link generation %d: %w", id, err)
	}
	return s, nil
}

// Claim implements Store: the claim predicate of the package doc (SCHEDULED
// or FAILED, or IN_PROGRESS and stale; never COMPLETED), in one
// conditional UPDATE (atomic in Postgres: a concurrent claimer waits for the
// row lock, re-evaluates the WHERE on the new row version and loses).
func (p *Postgres) Claim(ctx context.Context, id int64, actor int64, now, staleBefore time.Time) (bool, error) {
	tag, err := dbtx.Q(ctx, p.pool).Exec(ctx, `UPDATE `+p.table()+`
		SET link_generation_status = 'IN_PROGRESS', updated_at = $2, updated_by = NULLIF($3, 0)
		WHERE id = $1 AND deleted_at IS NULL
		  AND (link_generation_status IN ('SCHEDULED', 'FAILED')
		       OR (link_generation_status = 'IN_PROGRESS' AND updated_at < $4))`,
		id, micro(now), actor, micro(staleBefore))
	if err != nil {
		return false, fmt.Errorf("claim program session %d: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Finish implements Store.
func (p *Postgres) Finish(ctx context.Context, id int64, claimedAt time.Time, status Status, actor int64, now time.Time) (bool, error) {
	if status != Completed && status != Failed {
		return false, fmt.Errorf("finish program session %d: status %s is not COMPLETED or FAILED", id, status)
	}
	tag, err := dbtx.Q(ctx, p.pool).Exec(ctx, `UPDATE `+p.table()+`
		SET link_generation_status = $3, updated_at = $4, updated_by = NULLIF($5, 0)
		WHERE id = $1 AND link_generation_status = 'IN_PROGRESS' AND updated_at = $2`,
		id, micro(claimedAt), string(status), micro(now), actor)
	if err != nil {
		return false, fmt.Errorf("mark program session %d %s: %w", id, status, err)
	}
	return tag.RowsAffected() == 1, nil
}

// DueForFallback implements Store.
func (p *Postgres) DueForFallback(ctx context.Context, dueBefore, staleBefore time.Time, limit int) ([]int64, error) {
	rows, err := p.pool.Query(ctx, `SELECT id FROM `+p.table()+`
		WHERE deleted_at IS NULL AND link_generation_at <= $1
		  AND (link_generation_status IN ('SCHEDULED', 'FAILED')
		       OR (link_generation_status = 'IN_PROGRESS' AND updated_at < $2))
		ORDER BY link_generation_at, id LIMIT $3`, micro(dueBefore), micro(staleBefore), limit)
	if err != nil {
		return nil, fmt.Errorf("fallback candidates: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("fallback candidates: %w", err)
	}
	return ids, nil
}

// CountStatus implements Store.
func (p *Postgres) CountStatus(ctx context.Context, status Status) (int, error) {
	var n int
	err := dbtx.Q(ctx, p.pool).QueryRow(ctx, `SELECT count(*) FROM `+p.table()+` WHERE link_generation_status = $1 AND deleted_at IS NULL`,
		string(status)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count %s program sessions: %w", status, err)
	}
	return n, nil
}

// SweepLock is a SweepLock over a PostgreSQL session-level advisory lock,
// keyed by the schema, so one replica sweeps at a time; the lock goes with
// its connection, so a replica that dies mid-sweep frees it. Under the lock
// a scheduled sweep takes its tick (joinlink_sweep_ticks holds the newest
// one taken), so a replica whose timer fires after another's sweep of the
// same tick ended skips it.
func (p *Postgres) SweepLock() SweepLock {
	return pgSweepLock{pool: p.pool, key: "eventpipe.joinlink.sweep/" + p.schema, ticks: pgx.Identifier{p.schema, "joinlink_sweep_ticks"}.Sanitize()}
}

type pgSweepLock struct {
	pool  *pgxpool.Pool
	key   string
	ticks string
}

func (l pgSweepLock) TryLock(ctx context.Context, tick time.Time) (func(), bool, error) {
	conn, err := l.pool.Acquire(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("sweep lock: %w", err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, l.key).Scan(&ok); err != nil {
		conn.Release()
		return nil, false, fmt.Errorf("sweep lock: %w", err)
	}
	if !ok {
		conn.Release()
		return nil, false, nil
	}
	release := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, l.key); err != nil {
			// The lock must not outlive this sweep: drop the connection,
			// which releases it.
			_ = conn.Conn().Close(ctx)
		}
		conn.Release()
	}
	if tick.IsZero() {
		return release, true, nil
	}
	// Only a newer tick than the newest taken is this replica's to sweep.
	err = conn.QueryRow(ctx, `INSERT INTO `+l.ticks+` AS t (id, last_tick) VALUES (true, $1)
		ON CONFLICT (id) DO UPDATE SET last_tick = EXCLUDED.last_tick, updated_at = now()
		WHERE t.last_tick < EXCLUDED.last_tick
		RETURNING true`, micro(tick)).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) {
		release()
		return nil, false, nil
	}
	if err != nil {
		release()
		return nil, false, fmt.Errorf("sweep tick %s: %w", tick.UTC().Format(time.RFC3339), err)
	}
	return release, true, nil
}

// DeleteSession implements Store.
func (p *Postgres) DeleteSession(ctx context.Context, id int64, now time.Time) error {
	tag, err := dbtx.Q(ctx, p.pool).Exec(ctx, `UPDATE `+p.table()+` SET deleted_at = $2 WHERE id = $1 AND deleted_at IS NULL`, id, micro(now))
	if err != nil {
		return fmt.Errorf("delete program session %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("program session %d: %w", id, ErrNotFound)
	}
	return nil
}
