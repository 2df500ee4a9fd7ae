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
// rows available now that no subscriber has claimed; InFlight, rows
// available now and claimed (row-locked by a subscriber's open batch, not
// yet acked or nacked); Delayed, rows whose available_at is in the future
// (a nack's redelivery delay); OldestAge, since the oldest row's created_at.
// The counts are exact, as of the statement's snapshot. A queue without a
// table is an error wrapping broker.ErrQueueNotFound.
//
// A claim is only a row lock, so telling claimed rows from the others takes
// a lock too: the statement takes FOR KEY SHARE SKIP LOCKED on every
// unclaimed available row for its own short duration. A subscriber claiming
// at that moment skips those rows and polls again one PollInterval later,
// and the statement's cost grows with the backlog: it is for gates and
// consoles, not for a loop. It runs on the publishing pool.
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
	var available, delayed, unclaimed, oldestMicros int64
	err := p.publishPool.QueryRow(ctx, `WITH unclaimed AS (
			SELECT 1 FROM `+table+`
			WHERE available_at <= statement_timestamp()
			FOR KEY SHARE SKIP LOCKED
		)
		SELECT
			count(*) FILTER (WHERE available_at <= statement_timestamp()),
			count(*) FILTER (WHERE available_at > statement_timestamp()),
			(SELECT count(*) FROM unclaimed),
			coalesce((extract(epoch FROM statement_timestamp() - min(created_at)) * 1000000)::bigint, 0)
		FROM `+table).Scan(&available, &delayed, &unclaimed, &oldestMicros)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return broker.QueueStats{}, fmt.Errorf("postgres: queue stats of %s: queue table %s does not exist: %w", queue, table, broker.ErrQueueNotFound)
	}
	if err != nil {
		return broker.QueueStats{}, fmt.Errorf("postgres: queue stats of %s: %w", queue, err)
	}
	return broker.QueueStats{
		Queue:         queue,
		Ready:         unclaimed,
		InFlight:      max(available-unclaimed, 0),
		InFlightKnown: true,
		Delayed:       delayed,
		OldestAge:     max(time.Duration(oldestMicros)*time.Microsecond, 0),
	}, nil
}
