package booking

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Memory is the Store of the embedded mode and tests: the Postgres store's
// semantics in process.
type Memory struct {
	mu       sync.Mutex
	now      func() time.Time
	seen     map[string]bool
	events   map[string][]Event
	sessions map[string]Session
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{now: time.Now, seen: map[string]bool{}, events: map[string][]Event{}, sessions: map[string]Session{}}
}

// Apply implements Store.
func (m *Memory) Apply(_ context.Context, ev Event) error {
	data, err := canonicalData(ev.Data)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen[ev.EventID] {
		return nil
	}
	m.seen[ev.EventID] = true
	ev.Data = data
	ev.OccurredAt = ev.OccurredAt.UTC().Truncate(time.Microsecond)
	m.events[ev.BookingSessionID] = append(m.events[ev.BookingSessionID], ev)
	s, ok := m.sessions[ev.BookingSessionID]
	if !ok {
		s = Session{ID: ev.BookingSessionID, Status: StatusInProgress}
	}
	s.Status = nextStatus(s.Status, ev.Type)
	s.Events++
	s.LastEventID, s.LastStepID = ev.EventID, ev.StepID
	s.UpdatedAt = m.now().UTC().Truncate(time.Microsecond)
	m.sessions[ev.BookingSessionID] = s
	return nil
}

// Session implements Store.
func (m *Memory) Session(_ context.Context, id string) (Session, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	return s, ok, nil
}

// Events implements Store.
func (m *Memory) Events(_ context.Context, sessionID string) ([]Event, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.events[sessionID]), nil
}
