package disputes

import (
	"context"
	"errors"
	"time"

	"github.com/eventpipe/eventpipe/app/msgctx"
)

// Review queues of a review_queue entry.
const (
	QueueReview = "review"
	QueueAML    = "aml"
)

// Errors a store returns.
var (
	// ErrExists: a dispute, flag or document with that id already exists.
	ErrExists = errors.New("already exists")
	// ErrNotFound: no such row.
	ErrNotFound = errors.New("not found")
	// ErrKeyReused: an idempotency key that was first used with another
	// request (the API answers 422).
	ErrKeyReused = errors.New("idempotency key already used with another request")
)

// Dispute is a dispute raised on a transaction (raise_dispute).
type Dispute struct {
	// ID is "dsp_" + a ULID; NewDisputeID when empty.
	ID         string
	TxnID      string
	ReasonCode string
	Rail       string
	// TATDueAt is the resolution deadline the API computed; optional.
	TATDueAt *time.Time
	// RaisedAt defaults to now.
	RaisedAt time.Time
	// EventID is set by the store: the DisputeRaised event's id.
	EventID string
}

// Flag is a transaction flagged for review (flag_transaction_for_review).
type Flag struct {
	TxnID     string
	RiskScore float64
	Reason    string
	// FlaggedAt defaults to now.
	FlaggedAt time.Time
}

// Document is a document the ingest-worker stored.
type Document struct {
	// ID is "doc_" + a ULID; NewID("doc", …) when empty.
	ID         string
	Bucket     string
	Key        string
	IngestedAt time.Time
}

// Reminder is a dispute's TAT timer (DisputeRaised's effect).
type Reminder struct {
	DisputeID string
	EventID   string
	TxnID     string
	TATDueAt  time.Time
	RemindAt  time.Time
	// AutoReverse: a failed_but_debited UPI dispute, eligible for
	// auto-reversal. Scheduling such a reminder also stores its pending
	// Reversal, in the same transaction.
	AutoReverse bool
	// FiredAt is when the reminder sweep fired it; nil until then. Set by
	// the store only (FireDueReminders).
	FiredAt *time.Time
}

// ReversalStatus is where an auto-reversal stands.
type ReversalStatus string

// Reversal statuses. Pending is the only one the reversal worker works on;
// Reversed and Failed are final.
const (
	ReversalPending  ReversalStatus = "pending"
	ReversalReversed ReversalStatus = "reversed"
	ReversalFailed   ReversalStatus = "failed"
)

// Reversal is the auto-reversal of an eligible dispute: recorded pending
// with its reminder (DisputeRaised's effect), completed by the
// ReversalWorker through a Reverser.
type Reversal struct {
	DisputeID string
	TxnID     string
	Status    ReversalStatus
	// Attempts counts the claims (calls started); the latest claim's
	// number fences RecordReversal against an older claim's late answer.
	Attempts int
	// NextAttemptAt is when a pending reversal is due: its backoff after a
	// transient failure, and while claimed its lease.
	NextAttemptAt time.Time
	LastError     string
	// Reference is the payment system's reversal id once Reversed.
	Reference   string
	CompletedAt *time.Time
}

// IdempotencyKey is an API request's Idempotency-Key and a hash of what it
// asked (its operation and normalised body): the same key must come with
// the same request.
type IdempotencyKey struct {
	Key         string
	RequestHash string
}

// StoredResponse is the first answer to an idempotency key, replayed to
// every repeat of the request.
type StoredResponse struct {
	Status int
	Body   []byte
}

// ReviewEntry is a review queue entry (TransactionFlagged's effect).
type ReviewEntry struct {
	EventID   string
	TxnID     string
	RiskScore float64
	Reason    string
	// Queue is QueueReview or QueueAML.
	Queue     string
	FlaggedAt time.Time
}

// KBStats is the knowledge base's statistics row (get_service_health).
type KBStats struct {
	Documents      int64
	LastIngestedAt *time.Time
	// LastEventID is the DocumentIngested that refreshed it last.
	LastEventID string
	RefreshedAt time.Time
}

// Store holds the spec's state: the producers' business rows (written with
// their event, in one transaction, or published after the in-memory commit)
// and the consumer's effects (written inside the inbox's transaction:
// dbtx.From(ctx) on Postgres).
type Store interface {
	// RaiseDispute stores d and its DisputeRaised event; it returns the
	// event id.
	RaiseDispute(ctx context.Context, d Dispute) (string, error)
	// FlagTransaction stores f and its TransactionFlagged event.
	FlagTransaction(ctx context.Context, f Flag) (string, error)
	// RecordDocument stores doc and its DocumentIngested event.
	RecordDocument(ctx context.Context, doc Document) (string, error)

	// ScheduleReminder is DisputeRaised's effect; a second one for the
	// same dispute keeps the first (the event carries the full state).
	ScheduleReminder(ctx context.Context, r Reminder) error
	// EnqueueReview is TransactionFlagged's effect.
	EnqueueReview(ctx context.Context, e ReviewEntry) error
	// RefreshKBStats is DocumentIngested's effect: the statistics
	// recomputed from the stored documents.
	RefreshKBStats(ctx context.Context, eventID string) error

	// Idempotent runs write, the business change, at most once per key: the
	// key, write's changes (and their events) and write's response commit
	// together. A key stored before returns its response (replayed true)
	// without calling write, or ErrKeyReused when its request hash differs.
	// A request with a key still being written waits for it. An error from
	// write stores nothing.
	Idempotent(ctx context.Context, key IdempotencyKey, write func(ctx context.Context) (StoredResponse, error)) (resp StoredResponse, replayed bool, err error)

	// FireDueReminders marks up to limit reminders due at now (RemindAt
	// not after now, not fired yet) fired at now and returns them, each to
	// one caller only, however many sweep at once.
	FireDueReminders(ctx context.Context, now time.Time, limit int) ([]Reminder, error)

	// ClaimReversals claims up to limit pending reversals due at now: each
	// one's Attempts goes up by one and it is not due again before now +
	// lease, so no other claim takes it while its call runs.
	ClaimReversals(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]Reversal, error)
	// RecordReversal stores the outcome of r's claim (Status, NextAttemptAt
	// when still pending, LastError, Reference, CompletedAt) if r is still
	// pending and r.Attempts is its latest claim; false when a later claim
	// took it over or it is no longer pending.
	RecordReversal(ctx context.Context, r Reversal) (bool, error)
	// Reversal returns a dispute's reversal; false when it has none.
	Reversal(ctx context.Context, disputeID string) (Reversal, bool, error)
	// PendingReversals counts the pending reversals.
	PendingReversals(ctx context.Context) (int, error)

	Dispute(ctx context.Context, id string) (Dispute, error)
	Reminder(ctx context.Context, disputeID string) (Reminder, bool, error)
	ReviewEntries(ctx context.Context, txnID string) ([]ReviewEntry, error)
	KBStats(ctx context.Context) (KBStats, error)
}

// NewDisputeID returns "dsp_" + a ULID.
func NewDisputeID() string { return NewID("dsp", time.Now()) }

func newTraceID() string { return msgctx.NewTraceID() }

// traceIDFor returns ctx's trace id when it is a W3C trace id (what §2's
// trace_id holds), else a new one.
func traceIDFor(ctx context.Context) string {
	if id := msgctx.TraceID(ctx); traceIDPattern.MatchString(id) {
		return id
	}
	return newTraceID()
}

// disputeEnvelope is d's DisputeRaised event.
func disputeEnvelope(ctx context.Context, d *Dispute, now time.Time) (Envelope, error) {
	if d.ID == "" {
		d.ID = NewID("dsp", now)
	}
	if d.RaisedAt.IsZero() {
		d.RaisedAt = now
	}
	d.RaisedAt = d.RaisedAt.UTC().Truncate(time.Millisecond)
	env, err := NewEnvelope(Event{DisputeRaised: &DisputeRaised{TxnID: d.TxnID, ReasonCode: d.ReasonCode, TATDueAt: d.TATDueAt, Rail: d.Rail}}, d.ID, traceIDFor(ctx), d.RaisedAt)
	if err != nil {
		return Envelope{}, err
	}
	if _, err := Encode(env); err != nil {
		return Envelope{}, err
	}
	d.EventID = env.EventID
	return env, nil
}

func flagEnvelope(ctx context.Context, f *Flag, now time.Time) (Envelope, error) {
	if f.FlaggedAt.IsZero() {
		f.FlaggedAt = now
	}
	f.FlaggedAt = f.FlaggedAt.UTC().Truncate(time.Millisecond)
	env, err := NewEnvelope(Event{TransactionFlagged: &TransactionFlagged{TxnID: f.TxnID, RiskScore: f.RiskScore, Reason: f.Reason}}, f.TxnID, traceIDFor(ctx), f.FlaggedAt)
	if err != nil {
		return Envelope{}, err
	}
	if _, err := Encode(env); err != nil {
		return Envelope{}, err
	}
	return env, nil
}

func documentEnvelope(ctx context.Context, doc *Document, now time.Time) (Envelope, error) {
	if doc.ID == "" {
		doc.ID = NewID("doc", now)
	}
	if doc.IngestedAt.IsZero() {
		doc.IngestedAt = now
	}
	doc.IngestedAt = doc.IngestedAt.UTC().Truncate(time.Millisecond)
	env, err := NewEnvelope(Event{DocumentIngested: &DocumentIngested{Bucket: doc.Bucket, Key: doc.Key}}, doc.ID, traceIDFor(ctx), doc.IngestedAt)
	if err != nil {
		return Envelope{}, err
	}
	if _, err := Encode(env); err != nil {
		return Envelope{}, err
	}
	return env, nil
}
