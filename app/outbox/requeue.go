package outbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/eventpipe/eventpipe/app/dbtx"
)

// RequeueFilter selects the parked rows Requeue brings back: every one (All)
// or those with the given event ids, of any topic or of Topic only. All and
// EventIDs exclude each other, and one of them is required, so that an empty
// filter never means "everything".
type RequeueFilter struct {
	// All selects every parked row.
	All bool
	// EventIDs selects the parked rows with these event ids (the message
	// UUIDs the relay logs as message_id). An id that names no parked row
	// is skipped.
	EventIDs []string
	// Topic, when set, narrows the selection to that topic.
	Topic string
}

// ErrRequeueSelection is returned by Requeue for a filter that selects
// nothing explicitly (neither All nor an event id) or both ways at once.
var ErrRequeueSelection = errors.New("outbox requeue: select the rows with All or with event ids (not both)")

// Requeue un-parks the parked, unpublished rows f selects and returns how
// many: each gets parked_at cleared, attempts reset to 0 (so MaxAttempts
// tries again) and is due at once; last_error stays until it is published.
// The relays are woken by a notification on the outbox channel (at once on
// a pool, at commit inside a transaction). With strict order, a requeued row
// goes out before the rows of its key it held back.
//
// Requeue is for rows whose refusal has been dealt with (a broker limit
// raised, a binding added); a row the broker still refuses is parked again
// at its next try.
func (t Table) Requeue(ctx context.Context, db dbtx.Querier, f RequeueFilter) (int64, error) {
	if f.All == (len(f.EventIDs) > 0) {
		return 0, ErrRequeueSelection
	}
	table, err := t.name()
	if err != nil {
		return 0, err
	}
	ids := f.EventIDs
	if ids == nil {
		ids = []string{}
	}
	tag, err := db.Exec(ctx, `UPDATE `+table+` SET parked_at = NULL, attempts = 0, next_attempt_at = now()
		WHERE parked_at IS NOT NULL AND published_at IS NULL
		  AND ($1 OR event_id = ANY($2::text[]))
		  AND ($3 = '' OR topic = $3)`, f.All, ids, f.Topic)
	if err != nil {
		return 0, fmt.Errorf("outbox requeue: %w", err)
	}
	n := tag.RowsAffected()
	if n > 0 {
		// Without it the rows would wait for the relays' next poll.
		if _, err := db.Exec(ctx, `SELECT pg_notify($1, '')`, channel(t.Schema)); err != nil {
			return n, fmt.Errorf("outbox requeue: %d rows requeued, relays not notified (they find them at their next poll): %w", n, err)
		}
	}
	return n, nil
}
