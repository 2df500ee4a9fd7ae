package interviews

import (
	"log/slog"
	"time"

	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/app/route"
)

// Handlers are the spec's two consumers and their dependencies.
type Handlers struct {
	// Store holds interviews, credits and reports.
	Store Store
	// Outbox takes report.generate with the settlement (outbox.TxWriter
	// with the Postgres store, outbox.AfterCommit with the memory one).
	Outbox outbox.Writer
	// Generator writes reports (LLMGenerator in production).
	Generator ReportGenerator
	Logger    *slog.Logger
	// ReportQueue is where report.generate goes; ReportGenerateQueue when
	// empty. Set it to Disabled to skip the request with a warning (the
	// spec's REPORT_GENERATE_QUEUE_URL missing).
	ReportQueue string
	// StaleClaim bounds a PROCESSING claim; DefaultStaleClaim when 0.
	StaleClaim time.Duration
	// CompletedBackoff and ReportBackoff override the routes' backoff
	// (tests shorten them); zero values take the defaults below.
	CompletedBackoff route.Backoff
	ReportBackoff    route.Backoff
}

// Disabled as Handlers.ReportQueue turns the report request off.
const Disabled = "-"

func (h Handlers) reportQueue() string {
	switch h.ReportQueue {
	case "":
		return ReportGenerateQueue
	case Disabled:
		return ""
	default:
		return h.ReportQueue
	}
}

func (h Handlers) staleClaim() time.Duration {
	if h.StaleClaim > 0 {
		return h.StaleClaim
	}
	return DefaultStaleClaim
}

// DefaultCompletedBackoff is interview-completed's default wait between attempts.
// Settlement fails transiently only when the database does (a failover, a
// restart: seconds). On SQS the queue's 180 s visibility timeout paces the
// redeliveries (the spec's timing: a 15 s database outage never
// dead-letters an interview); on the other brokers 5 s then 10 s retries
// after a blip without hammering a database that is down.
func DefaultCompletedBackoff() route.Backoff {
	return route.Backoff{Initial: 5 * time.Second, Multiplier: 2, Max: 30 * time.Second, Jitter: 0.2}
}

// DefaultReportBackoff is report-generate's default wait between attempts. The
// model is the usual failure: rate limits and overload last tens of seconds
// to minutes, so 30 s then 60 s (a Retry-After the server sends wins when
// longer) on brokers without a visibility timeout; on SQS the queue's 1800 s
// visibility decides.
func DefaultReportBackoff() route.Backoff {
	return route.Backoff{Initial: 30 * time.Second, Multiplier: 2, Max: 5 * time.Minute, Jitter: 0.2}
}

// Policies per the spec: three attempts by broker redelivery (SQS: "3
// receives then DLQ"), invalid bodies dropped.
func (h Handlers) completedPolicy() route.Policy {
	b := h.CompletedBackoff
	if b == (route.Backoff{}) {
		b = DefaultCompletedBackoff()
	}
	return route.Policy{MaxAttempts: 3, Redelivery: route.Broker, Backoff: b, OnPermanent: route.Drop, DeadLetterQueue: InterviewCompletedDLQ}
}

func (h Handlers) reportPolicy() route.Policy {
	b := h.ReportBackoff
	if b == (route.Backoff{}) {
		b = DefaultReportBackoff()
	}
	return route.Policy{MaxAttempts: 3, Redelivery: route.Broker, Backoff: b, OnPermanent: route.Drop, DeadLetterQueue: ReportGenerateDLQ}
}

// Routes returns the spec's two routes. A zero Handlers is enough for
// validation (app.Catalog); running the routes needs Store, Outbox and
// Generator.
func (h Handlers) Routes() route.Set {
	return route.Set{
		{
			Name:     "interview-completed",
			Queue:    InterviewCompletedQueue,
			Validate: ValidateInterviewEvent,
			Handle:   h.handleInterviewCompleted,
			Policy:   h.completedPolicy(),
			// The spec's interview-completed Lambda timeout.
			Timeout: 30 * time.Second,
			TraceID: traceIDFromRequestID,
		},
		{
			Name:     "report-generate",
			Queue:    ReportGenerateQueue,
			Validate: ValidateReportGenerate,
			Handle:   h.handleReportGenerate,
			Policy:   h.reportPolicy(),
			// The spec's report-generate Lambda timeout.
			Timeout: 5 * time.Minute,
			TraceID: traceIDFromRequestID,
		},
	}
}
