package joinlink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventpipe/eventpipe/migrations"
)

// ScheduleInput is createLinkSchedule's input (iface-04).
type ScheduleInput struct {
	ProgramSessionID int64
	FireAt           time.Time
	ActorUserID      int64
}

// Schedule is one one-time schedule: at FireAt, Body (an encoded
// JOIN_LINK_GENERATION message) is delivered to the event queue.
type Schedule struct {
	// Name is deterministic: ScheduleName(ProgramSessionID).
	Name             string
	ProgramSessionID int64
	FireAt           time.Time
	Body             []byte
}

// Schedules is the scheduling adapter (AwsSchedulerService's role, iface-06):
// upsert and delete one-time schedules by name. On SQS it is EventBridge
// Scheduler (package app/eventbridge, handed in through Adapters); on the
// other brokers MemorySchedules and PostgresSchedules stand in for it, and a
// Dispatcher delivers what is due.
type Schedules interface {
	// Upsert creates or replaces the schedule named s.Name.
	Upsert(ctx context.Context, s Schedule) error
	// Delete removes the named schedule; a missing one is not an error.
	Delete(ctx context.Context, name string) error
}

// DueSchedules is a Schedules whose due schedules a Dispatcher delivers.
type DueSchedules interface {
	Schedules
	// PublishDue calls publish for up to limit schedules due at now
	// (oldest first) and deletes each one publish accepted. A schedule
	// publish refuses stays, to be tried on the next tick.
	PublishDue(ctx context.Context, now time.Time, limit int, publish func(Schedule) error) (int, error)
}

// Scheduler is JoinLinkSchedulerService: the flag guard, the deterministic
// name and the message shape over a Schedules. It is best effort (dec-01):
// errors are logged, never returned, since the DB is the source of truth and
// the fallback sweep is the net.
type Scheduler struct {
	// Enabled is ENABLE_JOIN_LINK_SCHEDULER (default false): when off,
	// nothing is scheduled and the sweep alone generates.
	Enabled   bool
	Schedules Schedules
	Logger    *slog.Logger
	// Metrics counts the schedule calls that failed; nil counts nothing.
	Metrics *Metrics
}

func (s *Scheduler) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func (s *Scheduler) off() bool { return s == nil || !s.Enabled || s.Schedules == nil }

// CreateLinkSchedule upserts the session's one-time schedule
// "join-link-<id>" firing at in.FireAt. It reports whether it succeeded.
func (s *Scheduler) CreateLinkSchedule(ctx context.Context, in ScheduleInput) bool {
	if s.off() {
		return false
	}
	name := ScheduleName(in.ProgramSessionID)
	log := s.logger().With(slog.String("schedule", name), slog.Int64("program_session_id", in.ProgramSessionID))
	body, err := Encode(NewMessage(Data{ProgramSessionID: in.ProgramSessionID, ActorUserID: in.ActorUserID}, in.FireAt))
	if err == nil {
		err = s.Schedules.Upsert(ctx, Schedule{Name: name, ProgramSessionID: in.ProgramSessionID, FireAt: in.FireAt.UTC(), Body: body})
	}
	if err != nil {
		log.WarnContext(ctx, "join-link schedule not registered; the fallback sweep will generate", slog.Any("error", err))
		s.Metrics.scheduleError("upsert")
		return false
	}
	log.InfoContext(ctx, "join-link schedule upserted", slog.Time("fire_at", in.FireAt.UTC()))
	return true
}

// DeleteLinkSchedule deletes the session's schedule. It reports whether it
// succeeded.
func (s *Scheduler) DeleteLinkSchedule(ctx context.Context, programSessionID int64) bool {
	if s.off() {
		return false
	}
	name := ScheduleName(programSessionID)
	if err := s.Schedules.Delete(ctx, name); err != nil {
		s.logger().WarnContext(ctx, "join-link schedule not deleted", slog.String("schedule", name), slog.Any("error", err))
		s.Metrics.scheduleError("delete")
		return false
	}
	s.logger().InfoContext(ctx, "join-link schedule deleted", slog.String("schedule", name))
	return true
}

// Dispatcher delivers due schedules to the event queue: the EventBridge
// Scheduler → SQS leg, in process. Several may run at once on
// PostgresSchedules (each due row goes to one of them).
type Dispatcher struct {
	Schedules DueSchedules
	Publisher message.Publisher
	// Topic is the event queue; Queue when empty.
	Topic string
	// Interval between polls; DefaultDispatchInterval when 0.
	Interval time.Duration
	// Batch is the most schedules one poll delivers; 100 when 0.
	Batch  int
	Logger *slog.Logger
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// DefaultDispatchInterval: a schedule fires at most this late.
const DefaultDispatchInterval = time.Second

// Tick delivers what is due now and returns how many it delivered.
func (d *Dispatcher) Tick(ctx context.Context) (int, error) {
	now := time.Now()
	if d.Now != nil {
		now = d.Now()
	}
	topic := d.Topic
	if topic == "" {
		topic = Queue
	}
	batch := d.Batch
	if batch <= 0 {
		batch = 100
	}
	return d.Schedules.PublishDue(ctx, now, batch, func(s Schedule) error {
		msg := message.NewMessage(watermill.NewUUID(), s.Body)
		msg.Metadata.Set(CorrelationIDKey, s.Name)
		return d.Publisher.Publish(topic, msg)
	})
}

// Run ticks every Interval until ctx ends.
func (d *Dispatcher) Run(ctx context.Context) error {
	interval := d.Interval
	if interval <= 0 {
		interval = DefaultDispatchInterval
	}
	log := d.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if n, err := d.Tick(ctx); err != nil && ctx.Err() == nil {
			log.ErrorContext(ctx, "join-link schedules: dispatch failed", slog.Any("error", err))
		} else if n > 0 {
			log.InfoContext(ctx, "join-link schedules fired", slog.Int("count", n))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// MemorySchedules is the embedded mode's Schedules.
type MemorySchedules struct {
	mu sync.Mutex
	m  map[string]Schedule
}

var _ DueSchedules = (*MemorySchedules)(nil)

// NewMemorySchedules returns an empty in-memory schedule table.
func NewMemorySchedules() *MemorySchedules { return &MemorySchedules{m: map[string]Schedule{}} }

// Upsert implements Schedules.
func (m *MemorySchedules) Upsert(_ context.Context, s Schedule) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s.Body = slices.Clone(s.Body)
	m.m[s.Name] = s
	return nil
}

// Delete implements Schedules.
func (m *MemorySchedules) Delete(_ context.Context, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, name)
	return nil
}

// Get returns the named schedule.
func (m *MemorySchedules) Get(name string) (Schedule, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.m[name]
	return s, ok
}

// PublishDue implements DueSchedules. The lock is held while publishing, so
// concurrent dispatchers never deliver one schedule twice.
func (m *MemorySchedules) PublishDue(_ context.Context, now time.Time, limit int, publish func(Schedule) error) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var due []Schedule
	for _, s := range m.m {
		if !s.FireAt.After(now) {
			due = append(due, s)
		}
	}
	slices.SortFunc(due, func(a, b Schedule) int { return a.FireAt.Compare(b.FireAt) })
	if len(due) > limit {
		due = due[:limit]
	}
	n := 0
	var errs []error
	for _, s := range due {
		if err := publish(s); err != nil {
			errs = append(errs, fmt.Errorf("schedule %s: %w", s.Name, err))
			continue
		}
		delete(m.m, s.Name)
		n++
	}
	return n, errors.Join(errs...)
}

// PostgresSchedules is Schedules on the join_link_schedules table
// (migrations/00007_joinlink.sql).
type PostgresSchedules struct {
	pool   *pgxpool.Pool
	schema string
}

var _ DueSchedules = (*PostgresSchedules)(nil)

// NewPostgresSchedules returns the schedule table of schema (the default
// schema when empty).
func NewPostgresSchedules(pool *pgxpool.Pool, schema string) (*PostgresSchedules, error) {
	schema = migrations.SchemaOrDefault(schema)
	if err := migrations.ValidateSchema(schema); err != nil {
		return nil, fmt.Errorf("joinlink: %w", err)
	}
	return &PostgresSchedules{pool: pool, schema: schema}, nil
}

func (p *PostgresSchedules) table() string {
	return pgx.Identifier{p.schema, "join_link_schedules"}.Sanitize()
}

// Upsert implements Schedules.
func (p *PostgresSchedules) Upsert(ctx context.Context, s Schedule) error {
	_, err := p.pool.Exec(ctx, `INSERT INTO `+p.table()+` (name, program_session_id, fire_at, body, updated_at)
		VALUES ($1, $2, $3, $4, now())
		ON CONFLICT (name) DO UPDATE SET program_session_id = EXCLUDED.program_session_id,
			fire_at = EXCLUDED.fire_at, body = EXCLUDED.body, updated_at = now()`,
		s.Name, s.ProgramSessionID, s.FireAt.UTC(), s.Body)
	if err != nil {
		return fmt.Errorf("upsert schedule %s: %w", s.Name, err)
	}
	return nil
}

// Delete implements Schedules.
func (p *PostgresSchedules) Delete(ctx context.Context, name string) error {
	if _, err := p.pool.Exec(ctx, `DELETE FROM `+p.table()+` WHERE name = $1`, name); err != nil {
		return fmt.Errorf("delete schedule %s: %w", name, err)
	}
	return nil
}

// Get returns the named schedule.
func (p *PostgresSchedules) Get(ctx context.Context, name string) (Schedule, bool, error) {
	var s Schedule
	err := p.pool.QueryRow(ctx, `SELECT name, program_session_id, fire_at, body FROM `+p.table()+` WHERE name = $1`, name).
		Scan(&s.Name, &s.ProgramSessionID, &s.FireAt, &s.Body)
	if errors.Is(err, pgx.ErrNoRows) {
		return Schedule{}, false, nil
	}
	if err != nil {
		return Schedule{}, false, fmt.Errorf("schedule %s: %w", name, err)
	}
	s.FireAt = s.FireAt.UTC()
	return s, true, nil
}

// PublishDue implements DueSchedules: the due rows are locked (FOR UPDATE
// SKIP LOCKED, so concurrent dispatchers share the work), published, and
// deleted in one transaction. A crash after a publish and before the commit
// publishes again: the claim absorbs the duplicate.
func (p *PostgresSchedules) PublishDue(ctx context.Context, now time.Time, limit int, publish func(Schedule) error) (int, error) {
	n := 0
	var errs []error
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT name, program_session_id, fire_at, body FROM `+p.table()+`
			WHERE fire_at <= $1 ORDER BY fire_at LIMIT $2 FOR UPDATE SKIP LOCKED`, now.UTC(), limit)
		if err != nil {
			return err
		}
		due, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Schedule, error) {
			var s Schedule
			err := row.Scan(&s.Name, &s.ProgramSessionID, &s.FireAt, &s.Body)
			return s, err
		})
		if err != nil {
			return err
		}
		var sent []string
		for _, s := range due {
			if err := publish(s); err != nil {
				errs = append(errs, fmt.Errorf("schedule %s: %w", s.Name, err))
				continue
			}
			sent = append(sent, s.Name)
		}
		if len(sent) == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, `DELETE FROM `+p.table()+` WHERE name = ANY($1)`, sent); err != nil {
			return err
		}
		n = len(sent)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("publish due schedules: %w", err)
	}
	return n, errors.Join(errs...)
}
