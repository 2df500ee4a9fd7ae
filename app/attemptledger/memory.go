package attemptledger

import (
	"context"
	"sync"
	"time"
)

// Memory is the in-process twin of Postgres, for tests: the same counting and
// expiry, but the counts die with the process, which is exactly the crash the
// ledger exists to survive.
type Memory struct {
	mu   sync.Mutex
	rows map[memKey]memRow
	ttl  time.Duration
	now  func() time.Time
}

type memKey struct{ queue, id string }

type memRow struct {
	crashes int
	updated time.Time
}

// NewMemory returns an empty ledger whose rows expire after ttl (DefaultTTL
// when 0) without a bump.
func NewMemory(ttl time.Duration) *Memory {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Memory{rows: map[memKey]memRow{}, ttl: ttl, now: time.Now}
}

// Bump records one more crash redelivery and returns the count.
func (m *Memory) Bump(_ context.Context, queue, messageID string) (int, error) {
	if err := checkKey(queue, messageID); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	key := memKey{queue, messageID}
	for k, r := range m.rows {
		if k != key && now.Sub(r.updated) > m.ttl {
			delete(m.rows, k)
		}
	}
	r := m.rows[key]
	if now.Sub(r.updated) > m.ttl {
		r.crashes = 0
	}
	r.crashes++
	r.updated = now
	m.rows[key] = r
	return r.crashes, nil
}

// Forget drops the row of messageID on queue, if any.
func (m *Memory) Forget(_ context.Context, queue, messageID string) error {
	if err := checkKey(queue, messageID); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.rows, memKey{queue, messageID})
	return nil
}
