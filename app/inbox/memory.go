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
	leases   map[memKey]memLease
	now      func() time.Time
}

type memLease struct {
	holder  string
	expires time.Time
}

type memKey struct{ consumer, id string }

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{marks: map[memKey]time.Time{}, inFlight: map[memKey]chan struct{}{}, leases: map[memKey]memLease{}, now: time.Now}
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
	now := m.now()
	for k, l := range m.leases {
		if !l.expires.After(now) {
			delete(m.leases, k)
		}
	}
	return n, nil
}

// Lease implements Store.
func (m *Memory) Lease(ctx context.Context, consumer, messageID string, ttl time.Duration) (*Lease, error) {
	return lease(ctx, m, consumer, messageID, ttl)
}

func (m *Memory) acquire(_ context.Context, k memKey, holder string, ttl time.Duration) (ok, processed bool, left time.Duration, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, done := m.marks[k]; done {
		return false, true, 0, nil
	}
	now := m.now()
	if l, held := m.leases[k]; held && l.expires.After(now) {
		return false, false, l.expires.Sub(now), nil
	}
	m.leases[k] = memLease{holder: holder, expires: now.Add(ttl)}
	return true, false, 0, nil
}

func (m *Memory) renew(_ context.Context, k memKey, holder string, ttl time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l, held := m.leases[k]; !held || l.holder != holder {
		return false, nil
	}
	m.leases[k] = memLease{holder: holder, expires: m.now().Add(ttl)}
	return true, nil
}

func (m *Memory) release(_ context.Context, k memKey, holder string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l, held := m.leases[k]; held && l.holder == holder {
		delete(m.leases, k)
	}
	return nil
}
