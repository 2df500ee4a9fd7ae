// Package route describes one consumer route: which queue it reads, how a body
// for it is validated, and the handler that runs for each message. Handler
// packages (handlers/<spec>) return their routes; the composition root wires
// them to the configured broker, and `eventpipe publish` uses Validate to
// refuse a body the route would reject before anything is sent.
package route

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Route is one handler bound to one queue.
type Route struct {
	// Name identifies the handler in logs and metrics. Unique per service.
	Name string
	// Queue is the topic the handler consumes (a queue name on brokers that
	// have queues).
	Queue string
	// Validate checks a message body for this route the way the handler's
	// decoder will, so that a publisher can refuse it up front.
	Validate func(payload []byte) error
	// Handle processes one message. Messages it returns are published by the
	// router (to the topics set by the route's publish configuration).
	Handle message.NoPublishHandlerFunc
	// Policy is what a failure does; the zero value means DefaultPolicy.
	Policy Policy
	// TraceID, when set, returns the trace id the route's wire format
	// carries (the StackUp envelope's traceId, the interviews spec's
	// requestId attribute, the disputes envelope's trace_id), or "". It is
	// used for a message without an x-trace-id.
	TraceID func(msg *message.Message) string
	// Timeout bounds one attempt of the handler: its context ends after it
	// and the attempt counts as a (transient) failure. DefaultTimeout when
	// 0. Handlers must honour their context; the SQS visibility heartbeat
	// stops with the attempt.
	Timeout time.Duration
	// Binary lets bodies that are not UTF-8 through. Every spec's wire
	// format is JSON text, so by default a body that is not valid UTF-8 is
	// a permanent failure before the handler runs (decoding it would
	// silently replace the bad bytes with U+FFFD).
	Binary bool
	// MessageID, when set, returns the id the wire format carries in the
	// body (the StackUp envelope's messageId, the disputes envelope's
	// event_id), or "". `eventpipe publish` uses it as the message id, so
	// the transport id and the body's id agree.
	MessageID func(payload []byte) string
	// InboxConsumer is the inbox consumer name the handler deduplicates
	// under (inbox.Store), when it keys its marker by MessageID's id. With
	// both set, a message delivered MaxAttempts times without an outcome
	// (its consumers crashed or timed out each time) whose marker is there
	// is acknowledged as a duplicate instead of dead-lettered: its last
	// attempt committed and only the settlement was lost.
	InboxConsumer string
	// Concurrency is the most messages of the queue the route handles at
	// once. 0, the default, is as many as the broker holds unsettled for one
	// consumer: the queue's batch size in its topology (RabbitMQ's prefetch,
	// SQS's receive batches, a Postgres claim), else the broker's prefetch
	// or batch size. 1 handles one message at a time. Ordered (FIFO) queues
	// are handled one message at a time per group (on the in-memory broker,
	// one at a time) whatever it says.
	Concurrency int
}

// DefaultTimeout is the handler timeout of a route that sets none.
const DefaultTimeout = time.Minute

// EffectiveTimeout is the route's handler timeout, DefaultTimeout when it
// sets none.
func (r Route) EffectiveTimeout() time.Duration {
	if r.Timeout > 0 {
		return r.Timeout
	}
	return DefaultTimeout
}

// EffectivePolicy is the route's policy, DefaultPolicy when it sets none.
func (r Route) EffectivePolicy() Policy {
	if r.Policy == (Policy{}) {
		return DefaultPolicy()
	}
	return r.Policy
}

// Set is the routes of a running service, looked up by queue.
type Set []Route

// ByQueue returns the route consuming queue.
func (s Set) ByQueue(queue string) (Route, error) {
	for _, r := range s {
		if r.Queue == queue {
			return r, nil
		}
	}
	return Route{}, fmt.Errorf("no route consumes %q (known: %s)", queue, strings.Join(s.Queues(), ", "))
}

// Queues lists the queues of the set, sorted.
func (s Set) Queues() []string {
	qs := make([]string, 0, len(s))
	for _, r := range s {
		qs = append(qs, r.Queue)
	}
	slices.Sort(qs)
	return qs
}
