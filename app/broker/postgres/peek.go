package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/eventpipe/eventpipe/app/broker"
)

var _ broker.Peeker = (*PubSub)(nil)

// Peek reads up to max rows of the queue's table in offset order with one
// SELECT: rows claimed by a consumer included, as they are. It takes no lock
// and changes no column (attempts, available_at and claimed_until are the
// claim's), so it is read-only in every respect (decision 0029). Each message
// carries the metadata a delivery would give it, with metadata.AttemptKey
// the row's claims so far. A queue without a table is an error wrapping
// broker.ErrQueueNotFound.
func (p *PubSub) Peek(ctx context.Context, queue string, max int) (broker.Peeked, error) {
	if err := p.schema.checkTopic(queue); err != nil {
		return broker.Peeked{}, err
	}
	if max <= 0 {
		return broker.Peeked{Complete: false}, nil
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return broker.Peeked{}, ErrClosed
	}
	table := p.schema.table(queue)
	rows, err := p.publishPool.Query(ctx, `SELECT "offset", uuid, payload, metadata::text, attempts, first_failed_at
		FROM `+table+` ORDER BY "offset" LIMIT $1`, max+1)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return broker.Peeked{}, fmt.Errorf("postgres: peek %s: queue table %s does not exist: %w", queue, table, broker.ErrQueueNotFound)
	}
	if err != nil {
		return broker.Peeked{}, fmt.Errorf("postgres: peek %s: %w", queue, err)
	}
	defer rows.Close()
	var out broker.Peeked
	for rows.Next() {
		var (
			offset, attempts int64
			uuid, md         string
			payload          []byte
			firstFailed      *time.Time
		)
		if err := rows.Scan(&offset, &uuid, &payload, &md, &attempts, &firstFailed); err != nil {
			return broker.Peeked{}, fmt.Errorf("postgres: peek %s: %w", queue, err)
		}
		if len(out.Messages) == max {
			return out, nil // one more than max: not complete
		}
		out.Messages = append(out.Messages, p.schema.deliveredMessage(offset, uuid, payload, []byte(md), attempts, firstFailed))
	}
	if err := rows.Err(); err != nil {
		return broker.Peeked{}, fmt.Errorf("postgres: peek %s: %w", queue, err)
	}
	out.Complete = true
	return out, nil
}
