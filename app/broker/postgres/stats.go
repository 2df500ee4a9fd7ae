package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/eventpipe/eventpipe/app/broker"
)

var _ broker.QueueStatter = (*PubSub)(nil)

// QueueStats counts the rows of the queue's table in one statement: Ready,
// rows that may be claimed now (a crashed subscriber's row once its lease has
// ended included); InFlight, rows claimed under a lease that has not ended
// (delivered or waiting in a subscriber's batch, not yet acked or nacked);
// Delayed, rows waiting out a nack's redelivery delay; OldestAge, since the
// oldest row's created_at. The counts are exact, as of the statement's
// snapshot; the statement takes no lock and leaves claims alone, but it reads
// the whole table: it is for gates and consoles, not for a loop. A queue
// without a table is an error wrapping broker.ErrQueueNotFound. It runs on
// the publishing pool.
func (p *PubSub) QueueStats(ctx context.Context, queue string) (broker.QueueStats, error) {
	if err := p.schema.checkTopic(queue); err != nil {
		return broker.QueueStats{}, err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return broker.QueueStats{}, ErrClosed
	}
	table := p.schema.table(queue)
	var ready, inFlight, delayed, oldestMicros int64
	err := p.publishPool.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE available_at <= statement_timestamp()),
			count(*) FILTER (WHERE claimed_until > statement_timestamp()),
			count(*) FILTER (WHERE available_at > statement_timestamp()
				AND (claimed_until IS NULL OR claimed_until <= statement_timestamp())),
			coalesce((extract(epoch FROM statement_timestamp() - min(created_at)) * 1000000)::bigint, 0)
		FROM `+table).Scan(&ready, &inFlight, &delayed, &oldestMicros)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return broker.QueueStats{}, fmt.Errorf("postgres: queue stats of %s: queue table %s does not exist: %w", queue, table, broker.ErrQueueNotFound)
	}
	if err != nil {
		return broker.QueueStats{}, fmt.Errorf("postgres: queue stats of %s: %w", queue, err)
	}
	return broker.QueueStats{
		Queue:         queue,
		Ready:         ready,
		InFlight:      inFlight,
		InFlightKnown: true,
		Delayed:       delayed,
		OldestAge:     max(time.Duration(oldestMicros)*time.Microsecond, 0),
	}, nil
}
