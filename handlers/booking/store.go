package booking

import (
	"context"
	"time"
)

// Session statuses. completed and abandoned are final: a later event is
// recorded but does not reopen the session.
const (
	StatusInProgress = "in_progress"
	StatusCompleted  = "completed"
	StatusAbandoned  = "abandoned"
)

// Session is a booking session's summary row.
type Session struct {
	ID          string
	Status      string
	Events      int64
	LastEventID string
	LastStepID  string
	UpdatedAt   time.Time
}

// Store is the consumer's state (migrations/00006_booking.sql). Apply runs
// inside the inbox's transaction (dbtx.From(ctx) on Postgres).
type Store interface {
	// Apply is an event's effect: the event recorded after the session's
	// earlier ones, and the session's summary updated. An event id already
	// recorded changes nothing (a second line behind the inbox).
	Apply(ctx context.Context, ev Event) error
	// Session returns the session's summary; false when it has no event.
	Session(ctx context.Context, id string) (Session, bool, error)
	// Events returns the session's events in applied order.
	Events(ctx context.Context, sessionID string) ([]Event, error)
}

// nextStatus is the session's status after an event of type typ.
func nextStatus(current, typ string) string {
	if current == StatusCompleted || current == StatusAbandoned {
		return current
	}
	switch typ {
	case TypeBookingCompleted:
		return StatusCompleted
	case TypeBookingAbandoned:
		return StatusAbandoned
	}
	return StatusInProgress
}
