package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventpipe/eventpipe/app/dbtx"
	"github.com/eventpipe/eventpipe/migrations"
)

// Postgres is the Store on the processed_messages table (migrations
// 00001_processed_messages.sql).
type Postgres struct {
	pool   *pgxpool.Pool
	table  string // quoted schema.processed_messages
	leases string // quoted schema.inbox_leases
	// holder is the session that identifies this store's leases.
	holder *presence
}

var _ Store = (*Postgres)(nil)

// NewPostgres returns the store on the processed_messages table of schema
// (migrations.DefaultSchema when empty), which must be migrated.
func NewPostgres(pool *pgxpool.Pool, schema string) (*Postgres, error) {
	schema = migrations.SchemaOrDefault(schema)
	if err := migrations.ValidateSchema(schema); err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	return &Postgres{pool: pool, table: pgx.Identifier{schema, "processed_messages"}.Sanitize(),
		leases: pgx.Identifier{schema, "inbox_leases"}.Sanitize(),
		holder: &presence{cfg: pool.Config().ConnConfig}}, nil
}

// Close ends the session that names this store's leases. Call it once no
// lease is held any more (at shutdown); a lease taken afterwards opens a new
// one.
func (p *Postgres) Close() { p.holder.close() }

// Process implements Store. It begins a transaction — or, when ctx already
// carries one (dbtx.WithTx), a savepoint inside it, so the caller's commit
// decides — inserts the marker and runs effect with ctx carrying that
// transaction. A concurrent Process of the same message blocks on the primary
// key until the first transaction ends.
//
// In a transaction of its own (a dbtx.PipelinedTx) the marker costs no round
// trip: it goes in one pipeline with BEGIN and effect's first statement,
// ahead of it (or with COMMIT when effect runs none), so a one-statement
// effect costs two round trips in all, as many as the effect alone in pgx's
// transaction. The marker decides: for a duplicate, its unique violation
// makes the server skip effect's statements (they return
// dbtx.ErrHeldFailed) and Process returns failure.Duplicate whatever effect
// returned (an effect that fails before its first statement has the marker
// sent on its own first); nothing of effect commits. What effect does before
// its first statement runs for a duplicate too: an effect is its statements
// (a read, such as fetching the document to record, may come first). Inside a
// caller's transaction the marker is its own statement, answered before
// effect runs, so that a duplicate is known before the caller commits.
func (p *Postgres) Process(ctx context.Context, consumer, messageID string, effect func(ctx context.Context) error) (err error) {
	if err := checkKey(consumer, messageID); err != nil {
		return err
	}
	_, nested := dbtx.From(ctx)
	var marker *dbtx.Held
	err = dbtx.InTx(ctx, p.pool, func(ctx context.Context, tx pgx.Tx) error {
		// A plain INSERT, not the ON CONFLICT of mark: the transaction (or
		// savepoint) is ours and the marker its first statement, so a
		// duplicate's unique violation only ends what InTx rolls back
		// anyway, and the insert costs the server less: no speculative
		// insertion, 2 WAL records instead of 3 (decision 0038).
		insert := `INSERT INTO ` + p.table + ` (consumer, message_id) VALUES ($1, $2)`
		if ptx, ok := tx.(*dbtx.PipelinedTx); ok && !nested {
			held, err := ptx.ExecWithNext("inbox marker", insert, consumer, messageID)
			if err != nil {
				return err
			}
			marker = held
			err = effect(ctx)
			if sent, _ := marker.Outcome(); err != nil && !sent {
				// An effect that failed before its first statement: a
				// duplicate is still reported as one (and acknowledged),
				// whatever its effect would do now — the document it read
				// may be gone. One round trip, on the error path only.
				_ = ptx.Flush(ctx)
			}
			return err
		}
		_, err := tx.Exec(ctx, insert, consumer, messageID)
		if err := markError(err, consumer, messageID); err != nil {
			return err
		}
		return effect(ctx)
	})
	if marker != nil {
		// Sent with effect's first statement, on its own, or with COMMIT:
		// when it failed, that is Process's answer, whatever effect or the
		// commit returned.
		if sent, merr := marker.Outcome(); sent && merr != nil {
			return markError(merr, consumer, messageID)
		}
	}
	return err
}

// markError is the error of the marker's INSERT: failure.Duplicate for a
// unique violation.
func markError(err error, consumer, messageID string) error {
	if err == nil {
		return nil
	}
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == uniqueViolation {
		return duplicate(consumer, messageID)
	}
	return fmt.Errorf("inbox: consumer %q, message %q: mark: %w", consumer, messageID, err)
}

// uniqueViolation is PostgreSQL's SQLSTATE of a duplicate key.
const uniqueViolation = "23505"

// MarkTx inserts the marker of (consumer, messageID) in tx, for handlers that
// own their transaction: fresh is false when the message was already
// processed (and committed), in which case the handler must skip its effect.
// The marker commits or rolls back with tx.
func (p *Postgres) MarkTx(ctx context.Context, tx pgx.Tx, consumer, messageID string) (fresh bool, err error) {
	if err := checkKey(consumer, messageID); err != nil {
		return false, err
	}
	return p.mark(ctx, tx, consumer, messageID)
}

func (p *Postgres) mark(ctx context.Context, tx pgx.Tx, consumer, messageID string) (bool, error) {
	tag, err := tx.Exec(ctx, `INSERT INTO `+p.table+` (consumer, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`, consumer, messageID)
	if err != nil {
		return false, fmt.Errorf("inbox: consumer %q, message %q: mark: %w", consumer, messageID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Unmark implements Store, in ctx's transaction if it carries one.
func (p *Postgres) Unmark(ctx context.Context, consumer, messageID string) error {
	if err := checkKey(consumer, messageID); err != nil {
		return err
	}
	_, err := dbtx.Q(ctx, p.pool).Exec(ctx, `DELETE FROM `+p.table+` WHERE consumer = $1 AND message_id = $2`, consumer, messageID)
	if err != nil {
		return fmt.Errorf("inbox: consumer %q, message %q: unmark: %w", consumer, messageID, err)
	}
	return nil
}

// cleanupBatch bounds one DELETE so that a large backlog of old markers is
// removed in short transactions instead of one long one.
const cleanupBatch = 10_000

// Cleanup implements Store. The age is measured on the database's clock, the
// one that wrote processed_at.
func (p *Postgres) Cleanup(ctx context.Context, ttl time.Duration) (int64, error) {
	if ttl < 0 {
		return 0, errors.New("inbox: cleanup: negative ttl")
	}
	q := `DELETE FROM ` + p.table + ` WHERE (consumer, message_id) IN (
		SELECT consumer, message_id FROM ` + p.table + `
		WHERE processed_at < now() - $1 * interval '1 microsecond' LIMIT $2)`
	var total int64
	for {
		tag, err := p.pool.Exec(ctx, q, ttl.Microseconds(), cleanupBatch)
		if err != nil {
			return total, fmt.Errorf("inbox: cleanup: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < cleanupBatch {
			// Expired leases go too (their holders died before Release).
			if _, err := p.pool.Exec(ctx, `DELETE FROM `+p.leases+` WHERE expires_at <= now()`); err != nil {
				return total, fmt.Errorf("inbox: cleanup leases: %w", err)
			}
			return total, nil
		}
	}
}

// Lease implements Store. Expiry is measured on the database's clock, so
// workers on different hosts agree on it. A lease also names its holder's
// PostgreSQL session (a connection the store keeps open for its leases): a
// lease whose holder's session is gone — its process died — is taken over at
// once, not one TTL later.
func (p *Postgres) Lease(ctx context.Context, consumer, messageID string, ttl time.Duration) (*Lease, error) {
	return lease(ctx, p, consumer, messageID, ttl)
}

func (p *Postgres) acquire(ctx context.Context, k memKey, holder string, ttl time.Duration) (ok, processed bool, left time.Duration, err error) {
	pid, started, err := p.holder.identity(ctx)
	if err != nil {
		return false, false, 0, err
	}
	err = dbtx.InTx(ctx, p.pool, func(ctx context.Context, tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+p.table+` WHERE consumer = $1 AND message_id = $2)`,
			k.consumer, k.id).Scan(&processed); err != nil || processed {
			return err
		}
		// Taken when absent or expired; a live lease of another holder
		// stays, and its time left is reported.
		var got string
		var leftUS int64
		err := tx.QueryRow(ctx, `INSERT INTO `+p.leases+` AS l (consumer, message_id, holder, expires_at, holder_pid, holder_started)
			VALUES ($1, $2, $3, now() + $4 * interval '1 microsecond', $5, $6)
			ON CONFLICT (consumer, message_id) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at,
				holder_pid = EXCLUDED.holder_pid, holder_started = EXCLUDED.holder_started
			WHERE l.expires_at <= now()
			   OR (l.holder_pid IS NOT NULL AND NOT EXISTS (
			       SELECT 1 FROM pg_stat_activity a WHERE a.pid = l.holder_pid AND a.backend_start = l.holder_started))
			RETURNING holder, 0`, k.consumer, k.id, holder, ttl.Microseconds(), pid, started).Scan(&got, &leftUS)
		if errors.Is(err, pgx.ErrNoRows) {
			if err := tx.QueryRow(ctx, `SELECT GREATEST(0, (extract(epoch FROM expires_at - now()) * 1e6)::bigint) FROM `+p.leases+`
				WHERE consumer = $1 AND message_id = $2`, k.consumer, k.id).Scan(&leftUS); err != nil {
				return err
			}
			left = time.Duration(leftUS) * time.Microsecond
			return nil
		}
		ok = err == nil && got == holder
		return err
	})
	return ok, processed, left, err
}

func (p *Postgres) renew(ctx context.Context, k memKey, holder string, ttl time.Duration) (bool, error) {
	// The session may have been lost and opened again: the lease names the
	// current one.
	pid, started, err := p.holder.identity(ctx)
	if err != nil {
		return false, err
	}
	tag, err := p.pool.Exec(ctx, `UPDATE `+p.leases+` SET expires_at = now() + $4 * interval '1 microsecond', holder_pid = $5, holder_started = $6
		WHERE consumer = $1 AND message_id = $2 AND holder = $3`, k.consumer, k.id, holder, ttl.Microseconds(), pid, started)
	return tag.RowsAffected() == 1, err
}

func (p *Postgres) release(ctx context.Context, k memKey, holder string) error {
	_, err := p.pool.Exec(ctx, `DELETE FROM `+p.leases+` WHERE consumer = $1 AND message_id = $2 AND holder = $3`, k.consumer, k.id, holder)
	return err
}
