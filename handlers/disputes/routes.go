package disputes

import (
	"log/slog"
	"time"

	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/route"
)

// Defaults of the events-worker's effects. The spec gives no values; these
// are ours, each overridable on Handlers (and in config).
const (
	// DefaultAMLThreshold: a TransactionFlagged with risk_score (0–100) at
	// or above it is escalated to AML. 80 = the top fifth of the scale; the
	// spec states no threshold.
	DefaultAMLThreshold = 80.0
	// DefaultTAT is a dispute's resolution time when its event carries no
	// tat_due_at: occurred_at + 5 days. The API normally computes the
	// deadline (§2's payload has tat_due_at); this conservative fallback
	// only keeps a dispute without one from going unwatched.
	DefaultTAT = 5 * 24 * time.Hour
	// DefaultReminderLead is how long before the TAT due time the reminder
	// fires: one day, so an agent has a working day to act.
	DefaultReminderLead = 24 * time.Hour
)

// Handlers is the events-worker and its dependencies.
type Handlers struct {
	// Store holds the effects' tables.
	Store Store
	// Inbox is the §1 processed_events dedupe (inbox.NewPostgres on the
	// same database as Store, inbox.NewMemory with the memory store).
	Inbox  inbox.Store
	Logger *slog.Logger
	// AMLThreshold: risk score at which a flagged transaction goes to AML;
	// DefaultAMLThreshold when 0.
	AMLThreshold float64
	// DefaultTAT and ReminderLead: see the constants; defaults when 0.
	DefaultTAT   time.Duration
	ReminderLead time.Duration
	// Backoff overrides the route's backoff (tests shorten it);
	// DefaultBackoff when zero.
	Backoff route.Backoff
	// Objects reads the documents of ingest-queue's S3 notifications (the
	// S3 adapter; MemoryObjects for sample traffic and tests); nil leaves the
	// ingest-worker route out.
	Objects Objects
	// Bucket is the bucket whose documents are ingested
	// (disputes.s3_bucket): records of other buckets are dropped with a log
	// line. "" accepts every bucket.
	Bucket string
	// IngestBackoff overrides ingest-queue's backoff;
	// DefaultIngestBackoff when zero.
	IngestBackoff route.Backoff
}

// DefaultBackoff is domain-events' wait between attempts. Transient failures
// here are the database's (§4: "Postgres connection reset": seconds), so the
// first retry comes after 10 s — the consumer's whole 10 s budget (§3 Lambda
// timeout) — then 20 s, 40 s, capped at the queue's 60 s visibility timeout:
// never slower than the spec's own redelivery, and the fifth attempt (then
// the DLQ) comes about 2 minutes after the first instead of 4. It is the
// Postgres broker's available_at; on SQS the queue's visibility timeout
// decides (eventpipe's rule: SQS retry timing is the queue's).
func DefaultBackoff() route.Backoff {
	return route.Backoff{Initial: 10 * time.Second, Multiplier: 2, Max: 60 * time.Second, Jitter: 0.2}
}

// MaxAttempts is domain-events' maxReceiveCount (§3).
const MaxAttempts = 5

// Policy is domain-events' failure policy (§3, §4): five attempts by broker
// redelivery, permanent errors failing until then, then domain-events-dlq.
func (h Handlers) Policy() route.Policy {
	b := h.Backoff
	if b == (route.Backoff{}) {
		b = DefaultBackoff()
	}
	return route.Policy{
		MaxAttempts: MaxAttempts, Redelivery: route.Broker, Backoff: b,
		OnPermanent: route.FailUntilMax, DeadLetterQueue: DomainEventsDLQ,
	}
}

// Routes returns the events-worker route, and the ingest-worker route when
// Objects is set. Running them needs Store and Inbox.
func (h Handlers) Routes() route.Set {
	set := route.Set{{
		Name:     "events-worker",
		Queue:    DomainEventsQueue,
		Validate: Validate,
		Handle:   h.handleDomainEvent,
		Policy:   h.Policy(),
		// §3: the events-worker Lambda's 10 s timeout.
		Timeout: 10 * time.Second,
		TraceID: traceIDOf,
		MessageID: func(payload []byte) string {
			env, err := Decode(payload)
			if err != nil {
				return ""
			}
			return env.EventID
		},
		InboxConsumer: Consumer,
	}}
	if h.Objects != nil {
		set = append(set, h.ingestRoute())
	}
	return set
}

func (h Handlers) ingestRoute() route.Route {
	return route.Route{
		Name:     "ingest-worker",
		Queue:    IngestQueue,
		Validate: ValidateS3Notification,
		Handle:   h.handleIngest,
		Policy:   h.IngestPolicy(),
		// §3: the ingest-worker Lambda's 60 s timeout.
		Timeout: 60 * time.Second,
	}
}

// Catalog is the spec's routes (both) for `eventpipe publish` validation
// only: their handlers must not be run (its Objects is an empty
// MemoryObjects).
func Catalog() route.Set { return Handlers{Objects: NewMemoryObjects()}.Routes() }
