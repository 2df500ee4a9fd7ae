package joinlink

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Memory is the Store of the embedded mode and of unit tests: the Postgres
// store's semantics under one mutex.
type Memory struct {
	mu       sync.Mutex
	next     int64
	sessions map[int64]*memSession
}

type memSession struct {
	Session
	deleted bool
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory { return &Memory{sessions: map[int64]*memSession{}} }

// CreateSession implements Store.
func (m *Memory) CreateSession(_ context.Context, now time.Time) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next++
	m.sessions[m.next] = &memSession{Session: Session{ID: m.next, Status: NotScheduled, UpdatedAt: micro(now)}}
	return m.next, nil
}

func (m *Memory) get(id int64) (*memSession, error) {
	s, ok := m.sessions[id]
	if !ok || s.deleted {
		return nil, fmt.Errorf("program session %d: %w", id, ErrNotFound)
	}
	return s, nil
}

func (s *memSession) snapshot() Session {
	out := s.Session
	if s.LinkGenerationAt != nil {
		t := *s.LinkGenerationAt
		out.LinkGenerationAt = &t
	}
	return out
}

// Session implements Store.
func (m *Memory) Session(_ context.Context, id int64) (Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.get(id)
	if err != nil {
		return Session{}, err
	}
	return s.snapshot(), nil
}

// SetLinkGeneration implements Store.
func (m *Memory) SetLinkGeneration(_ context.Context, id int64, at *time.Time, actor int64, now, staleBefore time.Time) (Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.get(id)
	if err != nil {
		return Session{}, err
	}
	if s.Status == InProgress && !s.UpdatedAt.Before(micro(staleBefore)) {
		return Session{}, fmt.Errorf("program session %d: %w", id, ErrInProgress)
	}
	if at == nil {
		s.LinkGenerationAt, s.Status = nil, NotScheduled
	} else {
		t := micro(*at)
		s.LinkGenerationAt, s.Status = &t, Scheduled
	}
	s.UpdatedAt, s.UpdatedBy = micro(now), actor
	return s.snapshot(), nil
}

func claimable(s *memSession, staleBefore time.Time) bool {
	if s.deleted {
		return false
	}
	switch s.Status {
	case Scheduled, Failed:
		return true
	case InProgress:
		return s.UpdatedAt.Before(micro(staleBefore))
	}
	return false
}

// Claim implements Store.
func (m *Memory) Claim(_ context.Context, id int64, actor int64, now, staleBefore time.Time) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	if !ok || !claimable(s, staleBefore) {
		return false, nil
	}
	s.Status, s.UpdatedAt, s.UpdatedBy = InProgress, micro(now), actor
	return true, nil
}

// Finish implements Store.
func (m *Memory) Finish(_ context.Context, id int64, claimedAt time.Time, status Status, actor int64, now time.Time) (bool, error) {
	if status != Completed && status != Failed {
		return false, fmt.Errorf("finish program session %d: status %s is not COMPLETED or FAILED", id, status)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	if !ok || s.Status != InProgress || !s.UpdatedAt.Equal(micro(claimedAt)) {
		return false, nil
	}
	s.Status, s.UpdatedAt, s.UpdatedBy = status, micro(now), actor
	return true, nil
}

// DueForFallback implements Store.
func (m *Memory) DueForFallback(_ context.Context, dueBefore, staleBefore time.Time, limit int) ([]int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var due []*memSession
	for _, s := range m.sessions {
		if s.LinkGenerationAt != nil && !s.LinkGenerationAt.After(dueBefore) && claimable(s, staleBefore) {
			due = append(due, s)
		}
	}
	slices.SortFunc(due, func(a, b *memSession) int {
		if c := a.LinkGenerationAt.Compare(*b.LinkGenerationAt); c != 0 {
			return c
		}
		return int(a.ID - b.ID)
	})
	if len(due) > limit {
		due = due[:limit]
	}
	ids := make([]int64, len(due))
	for i, s := range due {
		ids[i] = s.ID
	}
	return ids, nil
}

// DeleteSession implements Store.
func (m *Memory) DeleteSession(_ context.Context, id int64, _ time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.get(id)
	if err != nil {
		return err
	}
	s.deleted = true
	return nil
}

// CountStatus implements Store.
func (m *Memory) CountStatus(_ context.Context, status Status) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, s := range m.sessions {
		if !s.deleted && s.Status == status {
			n++
		}
	}
	return n, nil
}
