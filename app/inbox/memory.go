package inbox

import (
	"context"
	"sync"
	"time"
)

// Memory is the in-process Store for the embedded mode and tests. It has the
// Postgres store's semantics except durability: markers live as long as the
// process. Effects get ctx unchanged (there is no transaction to carry).
type Memory struct {
	mu       sync.Mutex
	marks    map[memKey]time.Time
	inFlight map[memKey]chan struct{}
	now      func() time.Time
}

type memKey struct{ consumer, id string }

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{marks: map[memKey]time.Time{}, inFlight: map[memKey]chan struct{}{}, now: time.Now}
}

// Process implements Store. A second call for a message whose effect is
// running waits for it, like a second INSERT waits on Postgres's unique
// index.
func (m *Memory) Process(ctx context.Context, consumer, messageID string, effect func(ctx context.Context) error) error {
	if err := checkKey(consumer, messageID); err != nil {
		return err
	}
	k := memKey{consumer, messageID}
	m.mu.Lock()
	for {
		if _, ok := m.marks[k]; ok {
			m.mu.Unlock()
			return duplicate(consumer, messageID)
		}
		running, ok := m.inFlight[k]
		if !ok {
			break
		}
		m.mu.Unlock()
		select {
		case <-running:
		case <-ctx.Done():
			return ctx.Err()
		}
		m.mu.Lock()
	}
	done := make(chan struct{})
	m.inFlight[k] = done
	m.mu.Unlock()

	// returned stays false if effect panics: like a rolled-back
	// transaction, a panicking effect leaves no marker.
	returned := false
	var err error
	defer func() {
		m.mu.Lock()
		if returned && err == nil {
			m.marks[k] = m.now()
		}
		delete(m.inFlight, k)
		m.mu.Unlock()
		close(done)
	}()
	err = effect(ctx)
	returned = true
	return err
}

// Unmark implements Store.
func (m *Memory) Unmark(_ context.Context, consumer, messageID string) error {
	if err := checkKey(consumer, messageID); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.marks, memKey{consumer, messageID})
	m.mu.Unlock()
	return nil
}

// Cleanup implements Store.
func (m *Memory) Cleanup(_ context.Context, ttl time.Duration) (int64, error) {
	cutoff := m.now().Add(-ttl)
	var n int64
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, at := range m.marks {
		if at.Before(cutoff) {
			delete(m.marks, k)
			n++
		}
	}
	return n, nil
}
