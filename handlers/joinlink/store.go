package joinlink

import (
	"context"
	"errors"
	"time"
)

// Status is a session's linkGenerationStatus (sm-01). The vocabulary is the
// spec's.
type Status string

// The states of sm-01.
const (
	NotScheduled Status = "NOT_SCHEDULED"
	Scheduled    Status = "SCHEDULED"
	InProgress   Status = "IN_PROGRESS"
	Completed    Status = "COMPLETED"
	Failed       Status = "FAILED"
)

// Valid reports whether s is one of the five states.
func (s Status) Valid() bool {
	switch s {
	case NotScheduled, Scheduled, InProgress, Completed, Failed:
		return true
	}
	return false
}

// Errors a store returns.
var (
	// ErrNotFound: no such session (or it is soft-deleted).
	ErrNotFound = errors.New("program session not found")
	// ErrInProgress: the session is being generated; its time cannot be
	// changed until the run ends (our rule, see SetLinkGeneration).
	ErrInProgress = errors.New("link generation in progress")
)

// Session is the link-generation part of a program session
// (hdb_program_session).
type Session struct {
	ID               int64
	LinkGenerationAt *time.Time
	Status           Status
	UpdatedAt        time.Time
	// UpdatedBy is the last actor (audit); 0 = none (updated_by NULL).
	UpdatedBy int64
}

// Store holds the sessions' link-generation state. Every write is a direct,
// WHERE-guarded UPDATE of the link_generation_* columns (dec-08, inv-02);
// none loads and re-saves a row. Times are the caller's clock (Service.Now),
// truncated to microseconds, so that the claim's updated_at doubles as the
// run's fencing token.
type Store interface {
	// CreateSession adds a program session (NOT_SCHEDULED). The real
	// sessions belong to the program-session module; this is the stand-in
	// for tests, the demo and the embedded mode.
	CreateSession(ctx context.Context, now time.Time) (int64, error)
	// Session returns a session; ErrNotFound when missing or deleted.
	Session(ctx context.Context, id int64) (Session, error)
	// SetLinkGeneration persists at with status SCHEDULED, or clears it
	// (at nil) with NOT_SCHEDULED. ErrNotFound when missing; ErrInProgress
	// when the session is IN_PROGRESS and not stale (before staleBefore).
	SetLinkGeneration(ctx context.Context, id int64, at *time.Time, actor int64, now, staleBefore time.Time) (Session, error)
	// Claim is the atomic claim (dec-05, dec-10): one UPDATE setting
	// IN_PROGRESS and updated_at = now WHERE the session is not deleted and
	// status IN (SCHEDULED, FAILED) OR (status = IN_PROGRESS AND updated_at
	// < staleBefore). It reports whether this caller won. COMPLETED and
	// NOT_SCHEDULED are never claimed.
	Claim(ctx context.Context, id int64, actor int64, now, staleBefore time.Time) (bool, error)
	// Finish moves the run claimed at claimedAt to status (COMPLETED or
	// FAILED): UPDATE … WHERE status = IN_PROGRESS AND updated_at =
	// claimedAt. It reports false when the run was reclaimed meanwhile
	// (stale) and leaves the row alone.
	Finish(ctx context.Context, id int64, claimedAt time.Time, status Status, actor int64, now time.Time) (bool, error)
	// DueForFallback is the sweep's candidate query
	// (findDueForFallbackGeneration): not deleted, link_generation_at <=
	// dueBefore, and status IN (SCHEDULED, FAILED) or IN_PROGRESS with
	// updated_at < staleBefore; by link_generation_at, at most limit.
	DueForFallback(ctx context.Context, dueBefore, staleBefore time.Time, limit int) ([]int64, error)
	// DeleteSession soft-deletes a session (deleted_at).
	DeleteSession(ctx context.Context, id int64, now time.Time) error
	// CountStatus counts the sessions (not deleted) in status: the FAILED
	// gauge (OQ-JLG-103).
	CountStatus(ctx context.Context, status Status) (int, error)
}

// micro truncates t to Postgres' precision.
func micro(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }
