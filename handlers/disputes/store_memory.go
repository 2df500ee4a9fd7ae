package disputes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/eventpipe/eventpipe/app/outbox"
)

// isNotPublished reports a change that committed but whose event was not
// published (the embedded mode's after-commit publish failed).
func isNotPublished(err error) bool {
	np := (*outbox.NotPublishedError)(nil)
	return errors.As(err, &np)
}

// Memory is the Store of the embedded mode: the Postgres store's semantics
// in process, with its events written to the outbox writer of the embedded
// mode (outbox.AfterCommit), which publishes them right after the in-memory
// commit. A crash between the two loses the event — the embedded mode keeps
// nothing across a restart anyway (decision 0002) — and a publish error is
// returned after the row is committed (*outbox.NotPublishedError).
type Memory struct {
	outbox outbox.Writer
	topic  string
	logger *slog.Logger
	now    func() time.Time

	mu        sync.Mutex
	disputes  map[string]Dispute
	flags     []Flag
	docs      map[string]Document
	docKeys   map[[2]string]bool
	reminders map[string]Reminder
	reversals map[string]Reversal
	reviews   map[string]ReviewEntry
	stats     KBStats

	// keyMu serialises Idempotent (held across its write, which takes mu):
	// the embedded mode's stand-in for the key's row lock.
	keyMu sync.Mutex
	keys  map[string]storedKey
}

type storedKey struct {
	hash string
	resp StoredResponse
}

var _ Store = (*Memory)(nil)

// MemoryOptions configures NewMemory.
type MemoryOptions struct {
	// Outbox takes the events (outbox.AfterCommit publishes them after
	// the in-memory commit); nil publishes nothing (a store for the
	// consumer side only).
	Outbox outbox.Writer
	// Topic of the events; DomainEventsQueue when empty.
	Topic  string
	Logger *slog.Logger
}

// NewMemory returns an empty in-memory store.
func NewMemory(opts MemoryOptions) *Memory {
	if opts.Topic == "" {
		opts.Topic = DomainEventsQueue
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Memory{
		outbox: opts.Outbox, topic: opts.Topic, logger: opts.Logger, now: time.Now,
		disputes: map[string]Dispute{}, docs: map[string]Document{}, docKeys: map[[2]string]bool{},
		reminders: map[string]Reminder{}, reversals: map[string]Reversal{}, reviews: map[string]ReviewEntry{},
		keys: map[string]storedKey{},
	}
}

// commit runs the in-memory change apply and writes env to the outbox in one
// unit of work: env is published after apply returned nil.
func (m *Memory) commit(ctx context.Context, env Envelope, apply func() error) error {
	err := outbox.Unit(ctx, func(ctx context.Context) error {
		m.mu.Lock()
		err := apply()
		m.mu.Unlock()
		if err != nil || m.outbox == nil {
			return err
		}
		msg, err := Message(env)
		if err != nil {
			return err
		}
		msg.SetContext(ctx)
		return m.outbox.Write(ctx, m.topic, msg)
	})
	if np := (*outbox.NotPublishedError)(nil); errors.As(err, &np) {
		m.logger.ErrorContext(ctx, "event committed but not published (embedded mode: no outbox table)",
			slog.String("event_id", env.EventID), slog.String("event_type", env.EventType),
			slog.String("trace_id", env.TraceID), slog.String("queue", m.topic), slog.Any("error", err))
	}
	return err
}

// RaiseDispute implements Store.
func (m *Memory) RaiseDispute(ctx context.Context, d Dispute) (string, error) {
	env, err := disputeEnvelope(ctx, &d, m.now())
	if err != nil {
		return "", fmt.Errorf("raise dispute: %w", err)
	}
	err = m.commit(ctx, env, func() error {
		if _, ok := m.disputes[d.ID]; ok {
			return fmt.Errorf("raise dispute %s: %w", d.ID, ErrExists)
		}
		m.disputes[d.ID] = d
		return nil
	})
	if err != nil && !isNotPublished(err) {
		return "", err
	}
	return env.EventID, err
}

// FlagTransaction implements Store.
func (m *Memory) FlagTransaction(ctx context.Context, f Flag) (string, error) {
	env, err := flagEnvelope(ctx, &f, m.now())
	if err != nil {
		return "", fmt.Errorf("flag transaction: %w", err)
	}
	err = m.commit(ctx, env, func() error {
		m.flags = append(m.flags, f)
		return nil
	})
	return env.EventID, err
}

// RecordDocument implements Store.
func (m *Memory) RecordDocument(ctx context.Context, doc Document) (string, error) {
	env, err := documentEnvelope(ctx, &doc, m.now())
	if err != nil {
		return "", fmt.Errorf("record document: %w", err)
	}
	err = m.commit(ctx, env, func() error {
		k := [2]string{doc.Bucket, doc.Key}
		if _, ok := m.docs[doc.ID]; ok || m.docKeys[k] {
			return fmt.Errorf("record document %s: %w", doc.ID, ErrExists)
		}
		m.docs[doc.ID], m.docKeys[k] = doc, true
		return nil
	})
	if err != nil && !isNotPublished(err) {
		return "", err
	}
	return env.EventID, err
}

// ScheduleReminder implements Store.
func (m *Memory) ScheduleReminder(_ context.Context, r Reminder) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.reminders[r.DisputeID]; ok {
		return nil
	}
	r.TATDueAt, r.RemindAt, r.FiredAt = r.TATDueAt.UTC(), r.RemindAt.UTC(), nil
	m.reminders[r.DisputeID] = r
	if _, ok := m.reversals[r.DisputeID]; r.AutoReverse && !ok {
		m.reversals[r.DisputeID] = Reversal{DisputeID: r.DisputeID, TxnID: r.TxnID, Status: ReversalPending, NextAttemptAt: m.now().UTC()}
	}
	return nil
}

// Idempotent implements Store. A write that committed but whose event was not
// published (*outbox.NotPublishedError) keeps its key and response: the
// change is committed, so a repeat must not make it again.
func (m *Memory) Idempotent(ctx context.Context, k IdempotencyKey, write func(ctx context.Context) (StoredResponse, error)) (StoredResponse, bool, error) {
	m.keyMu.Lock()
	defer m.keyMu.Unlock()
	if stored, ok := m.keys[k.Key]; ok {
		if stored.hash != k.RequestHash {
			return StoredResponse{}, false, ErrKeyReused
		}
		return cloneResponse(stored.resp), true, nil
	}
	var resp StoredResponse
	// One unit: the events write stages are published after the key is
	// stored, as the Postgres store's commit makes them visible together.
	err := outbox.Unit(ctx, func(ctx context.Context) error {
		r, err := write(ctx)
		if err != nil {
			return err
		}
		resp = cloneResponse(r)
		m.keys[k.Key] = storedKey{hash: k.RequestHash, resp: resp}
		return nil
	})
	if err != nil && !isNotPublished(err) {
		return StoredResponse{}, false, err
	}
	return cloneResponse(resp), false, err
}

func cloneResponse(r StoredResponse) StoredResponse {
	return StoredResponse{Status: r.Status, Body: slices.Clone(r.Body)}
}

// FireDueReminders implements Store.
func (m *Memory) FireDueReminders(_ context.Context, now time.Time, limit int) ([]Reminder, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var due []Reminder
	for _, r := range m.reminders {
		if r.FiredAt == nil && !r.RemindAt.After(now) {
			due = append(due, r)
		}
	}
	slices.SortFunc(due, func(a, b Reminder) int {
		if c := a.RemindAt.Compare(b.RemindAt); c != 0 {
			return c
		}
		return strings.Compare(a.DisputeID, b.DisputeID)
	})
	if len(due) > limit {
		due = due[:limit]
	}
	at := now.UTC()
	for i := range due {
		due[i].FiredAt = &at
		m.reminders[due[i].DisputeID] = due[i]
	}
	return due, nil
}

// ClaimReversals implements Store.
func (m *Memory) ClaimReversals(_ context.Context, now time.Time, lease time.Duration, limit int) ([]Reversal, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var due []Reversal
	for _, r := range m.reversals {
		if r.Status == ReversalPending && !r.NextAttemptAt.After(now) {
			due = append(due, r)
		}
	}
	slices.SortFunc(due, func(a, b Reversal) int {
		if c := a.NextAttemptAt.Compare(b.NextAttemptAt); c != 0 {
			return c
		}
		return strings.Compare(a.DisputeID, b.DisputeID)
	})
	if len(due) > limit {
		due = due[:limit]
	}
	for i := range due {
		due[i].Attempts++
		due[i].NextAttemptAt = now.Add(lease).UTC()
		m.reversals[due[i].DisputeID] = due[i]
	}
	return due, nil
}

// RecordReversal implements Store.
func (m *Memory) RecordReversal(_ context.Context, r Reversal) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.reversals[r.DisputeID]
	if !ok || cur.Status != ReversalPending || cur.Attempts != r.Attempts {
		return false, nil
	}
	cur.Status, cur.NextAttemptAt, cur.LastError, cur.Reference = r.Status, r.NextAttemptAt.UTC(), r.LastError, r.Reference
	cur.CompletedAt = nil
	if r.CompletedAt != nil {
		t := r.CompletedAt.UTC()
		cur.CompletedAt = &t
	}
	m.reversals[r.DisputeID] = cur
	return true, nil
}

// Reversal implements Store.
func (m *Memory) Reversal(_ context.Context, disputeID string) (Reversal, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.reversals[disputeID]
	return r, ok, nil
}

// PendingReversals implements Store.
func (m *Memory) PendingReversals(_ context.Context) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, r := range m.reversals {
		if r.Status == ReversalPending {
			n++
		}
	}
	return n, nil
}

// EnqueueReview implements Store.
func (m *Memory) EnqueueReview(_ context.Context, e ReviewEntry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.reviews[e.EventID]; !ok {
		e.FlaggedAt = e.FlaggedAt.UTC()
		m.reviews[e.EventID] = e
	}
	return nil
}

// RefreshKBStats implements Store.
func (m *Memory) RefreshKBStats(_ context.Context, eventID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := KBStats{Documents: int64(len(m.docs)), LastEventID: eventID, RefreshedAt: m.now().UTC()}
	for _, d := range m.docs {
		if s.LastIngestedAt == nil || d.IngestedAt.After(*s.LastIngestedAt) {
			t := d.IngestedAt
			s.LastIngestedAt = &t
		}
	}
	m.stats = s
	return nil
}

// Dispute implements Store.
func (m *Memory) Dispute(_ context.Context, id string) (Dispute, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.disputes[id]
	if !ok {
		return Dispute{}, fmt.Errorf("dispute %s: %w", id, ErrNotFound)
	}
	if d.TATDueAt != nil {
		t := d.TATDueAt.UTC()
		d.TATDueAt = &t
	}
	return d, nil
}

// Reminder implements Store.
func (m *Memory) Reminder(_ context.Context, disputeID string) (Reminder, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.reminders[disputeID]
	return r, ok, nil
}

// ReviewEntries implements Store.
func (m *Memory) ReviewEntries(_ context.Context, txnID string) ([]ReviewEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []ReviewEntry
	for _, e := range m.reviews {
		if e.TxnID == txnID {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b ReviewEntry) int {
		if c := a.FlaggedAt.Compare(b.FlaggedAt); c != 0 {
			return c
		}
		return strings.Compare(a.EventID, b.EventID)
	})
	return out, nil
}

// KBStats implements Store.
func (m *Memory) KBStats(_ context.Context) (KBStats, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stats, nil
}
