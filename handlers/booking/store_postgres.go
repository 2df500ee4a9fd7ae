package booking

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventpipe/eventpipe/app/dbtx"
	"github.com/eventpipe/eventpipe/migrations"
)

// Postgres is the Store on PostgreSQL (migrations/00006_booking.sql). Apply
// writes through the inbox's transaction (dbtx.From) when ctx carries one,
// else in its own.
type Postgres struct {
	pool   *pgxpool.Pool
	schema string
}

var _ Store = (*Postgres)(nil)

// NewPostgres returns the store on pool's schema (migrations.DefaultSchema
// when empty), which must be migrated.
func NewPostgres(pool *pgxpool.Pool, schema string) (*Postgres, error) {
	if pool == nil {
		return nil, errors.New("booking: nil pool")
	}
	schema = migrations.SchemaOrDefault(schema)
	if err := migrations.ValidateSchema(schema); err != nil {
		return nil, fmt.Errorf("booking: %w", err)
	}
	return &Postgres{pool: pool, schema: schema}, nil
}

func (p *Postgres) table(name string) string { return pgx.Identifier{p.schema, name}.Sanitize() }

// Apply implements Store.
func (p *Postgres) Apply(ctx context.Context, ev Event) error {
	return dbtx.InTx(ctx, p.pool, func(ctx context.Context, tx pgx.Tx) error { return p.apply(ctx, tx, ev) })
}

func (p *Postgres) apply(ctx context.Context, tx pgx.Tx, ev Event) error {
	data, err := canonicalData(ev.Data)
	if err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, `INSERT INTO `+p.table("booking_session_events")+`
		(event_id, booking_session_id, event_type, step_id, occurred_at, data)
		VALUES ($1, $2, $3, $4, $5, $6::jsonb) ON CONFLICT (event_id) DO NOTHING`,
		ev.EventID, ev.BookingSessionID, ev.Type, ev.StepID, ev.OccurredAt.UTC(), string(data))
	if err != nil {
		return fmt.Errorf("booking: record event %s: %w", ev.EventID, err)
	}
	if tag.RowsAffected() == 0 {
		return nil
	}
	// The row lock of ON CONFLICT DO UPDATE orders concurrent events of
	// one session; a final status stays final.
	_, err = tx.Exec(ctx, `INSERT INTO `+p.table("booking_sessions")+` AS s
		(id, status, events, last_event_id, last_step_id, updated_at)
		VALUES ($1, $2, 1, $3, $4, now())
		ON CONFLICT (id) DO UPDATE SET
			status = CASE WHEN s.status IN ($5, $6) THEN s.status ELSE EXCLUDED.status END,
			events = s.events + 1, last_event_id = EXCLUDED.last_event_id,
			last_step_id = EXCLUDED.last_step_id, updated_at = now()`,
		ev.BookingSessionID, nextStatus(StatusInProgress, ev.Type), ev.EventID, ev.StepID, StatusCompleted, StatusAbandoned)
	if err != nil {
		return fmt.Errorf("booking: update session %s: %w", ev.BookingSessionID, err)
	}
	return nil
}

// Session implements Store.
func (p *Postgres) Session(ctx context.Context, id string) (Session, bool, error) {
	var s Session
	err := p.pool.QueryRow(ctx, `SELECT id, status, events, last_event_id, last_step_id, updated_at
		FROM `+p.table("booking_sessions")+` WHERE id = $1`, id).
		Scan(&s.ID, &s.Status, &s.Events, &s.LastEventID, &s.LastStepID, &s.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, false, nil
	}
	if err != nil {
		return Session{}, false, fmt.Errorf("booking: session %s: %w", id, err)
	}
	s.UpdatedAt = s.UpdatedAt.UTC()
	return s, true, nil
}

// Events implements Store.
func (p *Postgres) Events(ctx context.Context, sessionID string) ([]Event, error) {
	rows, err := p.pool.Query(ctx, `SELECT event_id, booking_session_id, event_type, step_id, occurred_at, data::text
		FROM `+p.table("booking_session_events")+` WHERE booking_session_id = $1 ORDER BY seq`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("booking: events of %s: %w", sessionID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) {
		var ev Event
		var data string
		if err := row.Scan(&ev.EventID, &ev.BookingSessionID, &ev.Type, &ev.StepID, &ev.OccurredAt, &data); err != nil {
			return Event{}, err
		}
		ev.OccurredAt = ev.OccurredAt.UTC()
		// jsonb's own text is not canonical (its key order is by length).
		c, err := canonicalData([]byte(data))
		if err != nil {
			return Event{}, err
		}
		ev.Data = c
		return ev, nil
	})
	if err != nil {
		return nil, fmt.Errorf("booking: events of %s: %w", sessionID, err)
	}
	return out, nil
}
