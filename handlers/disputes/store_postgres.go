package disputes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventpipe/eventpipe/app/dbtx"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/migrations"
)

// Tables writes the producers' business rows and their events in a caller's
// transaction (§1: BEGIN; INSERT disputes; INSERT outbox; COMMIT): both
// commit or neither does. The zero value is the default schema's, events to
// domain-events.
type Tables struct {
	// Schema holding the tables (migrations/00005_disputes.sql) and the
	// outbox; migrations.DefaultSchema when empty.
	Schema string
	// Topic the events are published to; DomainEventsQueue when empty.
	Topic string
	// Now defaults the rows' times; time.Now when nil.
	Now func() time.Time
}

func (t Tables) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

func (t Tables) topic() string {
	if t.Topic != "" {
		return t.Topic
	}
	return DomainEventsQueue
}

func (t Tables) table(name string) string {
	return pgx.Identifier{migrations.SchemaOrDefault(t.Schema), name}.Sanitize()
}

func (t Tables) write(ctx context.Context, tx pgx.Tx, env Envelope) error {
	msg, err := Message(env)
	if err != nil {
		return err
	}
	return outbox.Table{Schema: t.Schema}.Write(ctx, tx, t.topic(), msg)
}

// RaiseDispute inserts d and its DisputeRaised outbox row in tx and returns
// the event id. The caller commits or rolls back both. A dispute id that
// exists wraps ErrExists (and leaves tx usable).
func (t Tables) RaiseDispute(ctx context.Context, tx pgx.Tx, d Dispute) (string, error) {
	env, err := disputeEnvelope(ctx, &d, t.now())
	if err != nil {
		return "", fmt.Errorf("raise dispute: %w", err)
	}
	// ON CONFLICT DO NOTHING: an existing id is reported without aborting
	// the caller's transaction.
	tag, err := tx.Exec(ctx, `INSERT INTO `+t.table("disputes")+` (id, txn_id, reason_code, rail, tat_due_at, raised_at, event_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING`, d.ID, d.TxnID, d.ReasonCode, d.Rail, d.TATDueAt, d.RaisedAt, env.EventID)
	if err != nil {
		return "", fmt.Errorf("raise dispute %s: %w", d.ID, exists(err))
	}
	if tag.RowsAffected() == 0 {
		return "", fmt.Errorf("raise dispute %s: %w", d.ID, ErrExists)
	}
	if err := t.write(ctx, tx, env); err != nil {
		return "", fmt.Errorf("raise dispute %s: %w", d.ID, err)
	}
	return env.EventID, nil
}

// FlagTransaction inserts f and its TransactionFlagged outbox row in tx.
func (t Tables) FlagTransaction(ctx context.Context, tx pgx.Tx, f Flag) (string, error) {
	env, err := flagEnvelope(ctx, &f, t.now())
	if err != nil {
		return "", fmt.Errorf("flag transaction: %w", err)
	}
	_, err = tx.Exec(ctx, `INSERT INTO `+t.table("transaction_flags")+` (event_id, txn_id, risk_score, reason, flagged_at)
		VALUES ($1, $2, $3, $4, $5)`, env.EventID, f.TxnID, f.RiskScore, f.Reason, f.FlaggedAt)
	if err != nil {
		return "", fmt.Errorf("flag transaction %s: %w", f.TxnID, err)
	}
	if err := t.write(ctx, tx, env); err != nil {
		return "", fmt.Errorf("flag transaction %s: %w", f.TxnID, err)
	}
	return env.EventID, nil
}

// RecordDocument inserts doc and its DocumentIngested outbox row in tx. A
// document id or (bucket, key) that exists wraps ErrExists (and leaves tx
// usable).
func (t Tables) RecordDocument(ctx context.Context, tx pgx.Tx, doc Document) (string, error) {
	env, err := documentEnvelope(ctx, &doc, t.now())
	if err != nil {
		return "", fmt.Errorf("record document: %w", err)
	}
	tag, err := tx.Exec(ctx, `INSERT INTO `+t.table("kb_documents")+` (id, bucket, key, ingested_at, event_id)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`, doc.ID, doc.Bucket, doc.Key, doc.IngestedAt, env.EventID)
	if err != nil {
		return "", fmt.Errorf("record document %s: %w", doc.ID, exists(err))
	}
	if tag.RowsAffected() == 0 {
		return "", fmt.Errorf("record document %s (s3://%s/%s): %w", doc.ID, doc.Bucket, doc.Key, ErrExists)
	}
	if err := t.write(ctx, tx, env); err != nil {
		return "", fmt.Errorf("record document %s: %w", doc.ID, err)
	}
	return env.EventID, nil
}

func exists(err error) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == "23505" {
		return fmt.Errorf("%w: %w", ErrExists, err)
	}
	return err
}

// Postgres is the Store on PostgreSQL: producers write through Tables in a
// transaction of their own, effects in the inbox's (dbtx.From).
type Postgres struct {
	pool   *pgxpool.Pool
	tables Tables
}

var _ Store = (*Postgres)(nil)

// NewPostgres returns the store on schema (migrated), its events written to
// the outbox for topic (DomainEventsQueue when empty).
func NewPostgres(pool *pgxpool.Pool, schema, topic string) (*Postgres, error) {
	schema = migrations.SchemaOrDefault(schema)
	if err := migrations.ValidateSchema(schema); err != nil {
		return nil, fmt.Errorf("disputes: %w", err)
	}
	return &Postgres{pool: pool, tables: Tables{Schema: schema, Topic: topic}}, nil
}

// Tables returns the store's Tables, for callers that own the transaction.
func (p *Postgres) Tables() Tables { return p.tables }

// RaiseDispute implements Store.
func (p *Postgres) RaiseDispute(ctx context.Context, d Dispute) (id string, err error) {
	err = dbtx.InTx(ctx, p.pool, func(ctx context.Context, tx pgx.Tx) error {
		id, err = p.tables.RaiseDispute(ctx, tx, d)
		return err
	})
	return id, err
}

// FlagTransaction implements Store.
func (p *Postgres) FlagTransaction(ctx context.Context, f Flag) (id string, err error) {
	err = dbtx.InTx(ctx, p.pool, func(ctx context.Context, tx pgx.Tx) error {
		id, err = p.tables.FlagTransaction(ctx, tx, f)
		return err
	})
	return id, err
}

// RecordDocument implements Store.
func (p *Postgres) RecordDocument(ctx context.Context, doc Document) (id string, err error) {
	err = dbtx.InTx(ctx, p.pool, func(ctx context.Context, tx pgx.Tx) error {
		id, err = p.tables.RecordDocument(ctx, tx, doc)
		return err
	})
	return id, err
}

// ScheduleReminder implements Store. An eligible reminder's pending
// reversal is inserted with it, only when the reminder is new: a second
// DisputeRaised for the dispute changes nothing.
func (p *Postgres) ScheduleReminder(ctx context.Context, r Reminder) error {
	return dbtx.InTx(ctx, p.pool, func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO `+p.tables.table("dispute_reminders")+`
			(dispute_id, event_id, txn_id, tat_due_at, remind_at, auto_reverse) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (dispute_id) DO NOTHING`,
			r.DisputeID, r.EventID, r.TxnID, r.TATDueAt, r.RemindAt, r.AutoReverse)
		if err != nil {
			return fmt.Errorf("schedule reminder %s: %w", r.DisputeID, err)
		}
		if !r.AutoReverse || tag.RowsAffected() == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+p.tables.table("dispute_reversals")+` (dispute_id, txn_id)
			VALUES ($1, $2) ON CONFLICT (dispute_id) DO NOTHING`, r.DisputeID, r.TxnID); err != nil {
			return fmt.Errorf("schedule reversal %s: %w", r.DisputeID, err)
		}
		return nil
	})
}

// Idempotent implements Store. The key's row is inserted first: a second
// request with the key waits on the primary key until the first commits (then
// replays its response) or rolls back (then runs write itself).
func (p *Postgres) Idempotent(ctx context.Context, k IdempotencyKey, write func(ctx context.Context) (StoredResponse, error)) (resp StoredResponse, replayed bool, err error) {
	table := p.tables.table("idempotency_keys")
	err = dbtx.InTx(ctx, p.pool, func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO `+table+` (key, request_hash) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING`, k.Key, k.RequestHash)
		if err != nil {
			return fmt.Errorf("idempotency key: %w", err)
		}
		if tag.RowsAffected() == 0 {
			var hash string
			if err := tx.QueryRow(ctx, `SELECT request_hash, status, response FROM `+table+` WHERE key = $1`, k.Key).
				Scan(&hash, &resp.Status, &resp.Body); err != nil {
				return fmt.Errorf("idempotency key: %w", err)
			}
			if hash != k.RequestHash {
				return ErrKeyReused
			}
			replayed = true
			return nil
		}
		if resp, err = write(ctx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE `+table+` SET status = $2, response = $3 WHERE key = $1`, k.Key, resp.Status, resp.Body); err != nil {
			return fmt.Errorf("idempotency key: %w", err)
		}
		return nil
	})
	if err != nil {
		return StoredResponse{}, false, err
	}
	return resp, replayed, nil
}

// FireDueReminders implements Store: one statement marks the due rows it
// could lock (FOR UPDATE SKIP LOCKED), so concurrent sweepers split them; a
// row another sweeper marked meanwhile fails the re-checked condition. The
// locking CTE runs once — inside "IN (subquery)" the planner may run a
// LIMIT subquery once per row and take them all.
func (p *Postgres) FireDueReminders(ctx context.Context, now time.Time, limit int) ([]Reminder, error) {
	table := p.tables.table("dispute_reminders")
	rows, err := dbtx.Q(ctx, p.pool).Query(ctx, `WITH due AS (
			SELECT dispute_id FROM `+table+` WHERE reminded_at IS NULL AND remind_at <= $1
			ORDER BY remind_at LIMIT $2 FOR UPDATE SKIP LOCKED)
		UPDATE `+table+` r SET reminded_at = $1 FROM due
		WHERE r.dispute_id = due.dispute_id AND r.reminded_at IS NULL
		RETURNING r.dispute_id, r.event_id, r.txn_id, r.tat_due_at, r.remind_at, r.auto_reverse, r.reminded_at`, now.UTC(), limit)
	if err != nil {
		return nil, fmt.Errorf("fire due reminders: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanReminder)
	if err != nil {
		return nil, fmt.Errorf("fire due reminders: %w", err)
	}
	slices.SortFunc(out, func(a, b Reminder) int { return a.RemindAt.Compare(b.RemindAt) })
	return out, nil
}

const reversalColumns = `dispute_id, txn_id, status, attempts, next_attempt_at, last_error, reference, completed_at`

// qualified prefixes each of columns (comma-separated) with alias.
func qualified(alias, columns string) string {
	cols := strings.Split(columns, ", ")
	for i, c := range cols {
		cols[i] = alias + "." + c
	}
	return strings.Join(cols, ", ")
}

func scanReversal(row pgx.CollectableRow) (Reversal, error) {
	var r Reversal
	var status string
	if err := row.Scan(&r.DisputeID, &r.TxnID, &status, &r.Attempts, &r.NextAttemptAt, &r.LastError, &r.Reference, &r.CompletedAt); err != nil {
		return Reversal{}, err
	}
	r.Status, r.NextAttemptAt = ReversalStatus(status), r.NextAttemptAt.UTC()
	if r.CompletedAt != nil {
		t := r.CompletedAt.UTC()
		r.CompletedAt = &t
	}
	return r, nil
}

// ClaimReversals implements Store, like FireDueReminders: concurrent workers
// split the due rows.
func (p *Postgres) ClaimReversals(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]Reversal, error) {
	table := p.tables.table("dispute_reversals")
	rows, err := dbtx.Q(ctx, p.pool).Query(ctx, `WITH due AS (
			SELECT dispute_id FROM `+table+` WHERE status = 'pending' AND next_attempt_at <= $1
			ORDER BY next_attempt_at LIMIT $3 FOR UPDATE SKIP LOCKED)
		UPDATE `+table+` r SET attempts = r.attempts + 1, next_attempt_at = $2 FROM due
		WHERE r.dispute_id = due.dispute_id AND r.status = 'pending' AND r.next_attempt_at <= $1
		RETURNING `+qualified("r", reversalColumns), now.UTC(), now.Add(lease).UTC(), limit)
	if err != nil {
		return nil, fmt.Errorf("claim reversals: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanReversal)
	if err != nil {
		return nil, fmt.Errorf("claim reversals: %w", err)
	}
	return out, nil
}

// RecordReversal implements Store.
func (p *Postgres) RecordReversal(ctx context.Context, r Reversal) (bool, error) {
	tag, err := dbtx.Q(ctx, p.pool).Exec(ctx, `UPDATE `+p.tables.table("dispute_reversals")+`
		SET status = $3, next_attempt_at = $4, last_error = $5, reference = $6, completed_at = $7
		WHERE dispute_id = $1 AND attempts = $2 AND status = 'pending'`,
		r.DisputeID, r.Attempts, string(r.Status), r.NextAttemptAt.UTC(), r.LastError, r.Reference, r.CompletedAt)
	if err != nil {
		return false, fmt.Errorf("record reversal %s: %w", r.DisputeID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Reversal implements Store.
func (p *Postgres) Reversal(ctx context.Context, disputeID string) (Reversal, bool, error) {
	rows, err := p.pool.Query(ctx, `SELECT `+reversalColumns+` FROM `+p.tables.table("dispute_reversals")+` WHERE dispute_id = $1`, disputeID)
	if err != nil {
		return Reversal{}, false, fmt.Errorf("reversal %s: %w", disputeID, err)
	}
	r, err := pgx.CollectExactlyOneRow(rows, scanReversal)
	if errors.Is(err, pgx.ErrNoRows) {
		return Reversal{}, false, nil
	}
	if err != nil {
		return Reversal{}, false, fmt.Errorf("reversal %s: %w", disputeID, err)
	}
	return r, true, nil
}

// PendingReversals implements Store.
func (p *Postgres) PendingReversals(ctx context.Context) (int, error) {
	var n int
	if err := p.pool.QueryRow(ctx, `SELECT count(*) FROM `+p.tables.table("dispute_reversals")+` WHERE status = 'pending'`).Scan(&n); err != nil {
		return 0, fmt.Errorf("pending reversals: %w", err)
	}
	return n, nil
}

// EnqueueReview implements Store.
func (p *Postgres) EnqueueReview(ctx context.Context, e ReviewEntry) error {
	return dbtx.InTx(ctx, p.pool, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+p.tables.table("review_queue")+`
			(event_id, txn_id, risk_score, reason, queue, flagged_at) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (event_id) DO NOTHING`,
			e.EventID, e.TxnID, e.RiskScore, e.Reason, e.Queue, e.FlaggedAt)
		if err != nil {
			return fmt.Errorf("enqueue review %s: %w", e.TxnID, err)
		}
		return nil
	})
}

// RefreshKBStats implements Store.
func (p *Postgres) RefreshKBStats(ctx context.Context, eventID string) error {
	return dbtx.InTx(ctx, p.pool, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+p.tables.table("kb_statistics")+`
			(id, documents, last_ingested_at, last_event_id, refreshed_at)
			SELECT 1, count(*), max(ingested_at), $1, now() FROM `+p.tables.table("kb_documents")+`
			ON CONFLICT (id) DO UPDATE SET documents = EXCLUDED.documents, last_ingested_at = EXCLUDED.last_ingested_at,
				last_event_id = EXCLUDED.last_event_id, refreshed_at = EXCLUDED.refreshed_at`, eventID)
		if err != nil {
			return fmt.Errorf("refresh kb statistics: %w", err)
		}
		return nil
	})
}

// Dispute implements Store.
func (p *Postgres) Dispute(ctx context.Context, id string) (Dispute, error) {
	var d Dispute
	err := p.pool.QueryRow(ctx, `SELECT id, txn_id, reason_code, rail, tat_due_at, raised_at, event_id FROM `+p.tables.table("disputes")+` WHERE id = $1`, id).
		Scan(&d.ID, &d.TxnID, &d.ReasonCode, &d.Rail, &d.TATDueAt, &d.RaisedAt, &d.EventID)
	if errors.Is(err, pgx.ErrNoRows) {
		return Dispute{}, fmt.Errorf("dispute %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Dispute{}, fmt.Errorf("dispute %s: %w", id, err)
	}
	d.RaisedAt = d.RaisedAt.UTC()
	if d.TATDueAt != nil {
		t := d.TATDueAt.UTC()
		d.TATDueAt = &t
	}
	return d, nil
}

func scanReminder(row pgx.CollectableRow) (Reminder, error) {
	var r Reminder
	if err := row.Scan(&r.DisputeID, &r.EventID, &r.TxnID, &r.TATDueAt, &r.RemindAt, &r.AutoReverse, &r.FiredAt); err != nil {
		return Reminder{}, err
	}
	r.TATDueAt, r.RemindAt = r.TATDueAt.UTC(), r.RemindAt.UTC()
	if r.FiredAt != nil {
		t := r.FiredAt.UTC()
		r.FiredAt = &t
	}
	return r, nil
}

// Reminder implements Store.
func (p *Postgres) Reminder(ctx context.Context, disputeID string) (Reminder, bool, error) {
	rows, err := p.pool.Query(ctx, `SELECT dispute_id, event_id, txn_id, tat_due_at, remind_at, auto_reverse, reminded_at FROM `+p.tables.table("dispute_reminders")+` WHERE dispute_id = $1`, disputeID)
	if err != nil {
		return Reminder{}, false, fmt.Errorf("reminder %s: %w", disputeID, err)
	}
	r, err := pgx.CollectExactlyOneRow(rows, scanReminder)
	if errors.Is(err, pgx.ErrNoRows) {
		return Reminder{}, false, nil
	}
	if err != nil {
		return Reminder{}, false, fmt.Errorf("reminder %s: %w", disputeID, err)
	}
	return r, true, nil
}

// ReviewEntries implements Store.
func (p *Postgres) ReviewEntries(ctx context.Context, txnID string) ([]ReviewEntry, error) {
	rows, err := p.pool.Query(ctx, `SELECT event_id, txn_id, risk_score, reason, queue, flagged_at FROM `+p.tables.table("review_queue")+` WHERE txn_id = $1 ORDER BY flagged_at, event_id`, txnID)
	if err != nil {
		return nil, fmt.Errorf("review entries %s: %w", txnID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ReviewEntry, error) {
		var e ReviewEntry
		err := row.Scan(&e.EventID, &e.TxnID, &e.RiskScore, &e.Reason, &e.Queue, &e.FlaggedAt)
		e.FlaggedAt = e.FlaggedAt.UTC()
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("review entries %s: %w", txnID, err)
	}
	return out, nil
}

// KBStats implements Store. Before any refresh it is the zero KBStats.
func (p *Postgres) KBStats(ctx context.Context) (KBStats, error) {
	var s KBStats
	err := p.pool.QueryRow(ctx, `SELECT documents, last_ingested_at, last_event_id, refreshed_at FROM `+p.tables.table("kb_statistics")+` WHERE id = 1`).
		Scan(&s.Documents, &s.LastIngestedAt, &s.LastEventID, &s.RefreshedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return KBStats{}, nil
	}
	if err != nil {
		return KBStats{}, fmt.Errorf("kb statistics: %w", err)
	}
	if s.LastIngestedAt != nil {
		t := s.LastIngestedAt.UTC()
		s.LastIngestedAt = &t
	}
	return s, nil
}
