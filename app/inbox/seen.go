package inbox

import (
	"context"
	"fmt"
)

// Seen implements Store: whether (consumer, messageID)'s marker is
// committed.
func (p *Postgres) Seen(ctx context.Context, consumer, messageID string) (bool, error) {
	if err := checkKey(consumer, messageID); err != nil {
		return false, err
	}
	var seen bool
	err := p.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+p.table+` WHERE consumer = $1 AND message_id = $2)`,
		consumer, messageID).Scan(&seen)
	if err != nil {
		return false, fmt.Errorf("inbox: consumer %q, message %q: seen: %w", consumer, messageID, err)
	}
	return seen, nil
}

// Seen implements Store.
func (m *Memory) Seen(_ context.Context, consumer, messageID string) (bool, error) {
	if err := checkKey(consumer, messageID); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.marks[memKey{consumer, messageID}]
	return ok, nil
}
