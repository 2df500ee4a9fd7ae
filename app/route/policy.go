package route

import (
	"errors"
	"fmt"
	"time"

	"github.com/eventpipe/eventpipe/app/topology"
)

// Redelivery says where a failed attempt is tried again.
type Redelivery string

const (
	// InProcess retries in the consumer, holding the message, with backoff
	// between attempts (StackUp §6: three in-process retries). Cheap for
	// short outages; the message stays locked meanwhile.
	InProcess Redelivery = "in-process"
	// Broker gives the message back to the broker after each failed attempt
	// (SQS visibility, a RabbitMQ requeue, a Postgres row made available
	// again), delayed by the backoff where the broker can delay it. Any
	// consumer may take the next attempt (the SQS specs).
	Broker Redelivery = "broker"
)

// OnPermanent says what a permanent failure (failure.Permanent: a body that
// does not decode, an unknown type, a rule the message breaks) does.
type OnPermanent string

const (
	// Drop acknowledges the message with a log line and a metric (interviews
	// spec: an invalid body is logged and dropped).
	Drop OnPermanent = "drop"
	// DeadLetter moves the message to the dead-letter queue at once, with the
	// reason (StackUp §6: a parse failure goes to the DLQ).
	DeadLetter OnPermanent = "dead-letter"
	// FailUntilMax treats it like a transient failure: it is attempted again
	// until MaxAttempts, then dead-lettered (disputes spec: permanent errors
	// fail until maxReceiveCount).
	FailUntilMax OnPermanent = "fail-until-max"
)

// Backoff is the wait between two attempts: Initial, then each wait
// Multiplier times longer up to Max, each spread by ±Jitter (a fraction).
type Backoff struct {
	Initial    time.Duration
	Multiplier float64
	Max        time.Duration
	Jitter     float64
}

// Wait returns the wait after the given failed attempt (1-based), before
// jitter: Initial × Multiplier^(attempt-1), capped at Max.
func (b Backoff) Wait(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	w := float64(b.Initial)
	for i := 1; i < attempt && w < float64(b.Max); i++ {
		w *= b.Multiplier
	}
	return min(time.Duration(w), b.Max)
}

// Policy is what a route does when its handler fails. Every broker applies it
// the same way (package middleware); where a broker has a native mechanism
// (an SQS redrive policy, a quorum queue's delivery limit, a delayed
// redelivery) it backs the policy up, for the cases the consumer cannot see,
// such as a process killed mid-handler.
type Policy struct {
	// MaxAttempts is how many times a message is tried in all (deliveries
	// and in-process retries together) before it is dead-lettered. The
	// attempt number is x-attempt (earlier deliveries, from the broker) plus
	// the in-process attempts of this delivery.
	MaxAttempts int
	// Redelivery says whether attempts after a failure run in process or
	// after a redelivery by the broker.
	Redelivery Redelivery
	// Backoff is the wait between attempts.
	Backoff Backoff
	// ExplicitBackoff makes Backoff, with Broker redelivery, override a
	// broker's own redelivery timing. Default false: SQS, whose queues time
	// redeliveries by their visibility timeout, leaves a nacked message's
	// visibility alone (the SQS specs' Lambda semantics: a short database
	// outage must not use up a message's receives); brokers without a timing
	// of their own (Postgres, RabbitMQ, in memory) wait Backoff either way.
	ExplicitBackoff bool
	// OnPermanent is what a permanent failure does.
	OnPermanent OnPermanent
	// DeadLetterQueue is the queue (topic) dead letters are published to.
	// Empty means the route has no dead-letter queue (join-link spec: the
	// fallback sweep recovers): a message that would be dead-lettered is
	// acknowledged with a log line and a metric instead.
	DeadLetterQueue string
}

// DefaultPolicy is the policy of a route that does not set one: three
// attempts in process with a short backoff, permanent failures dead-lettered
// at once.
func DefaultPolicy() Policy {
	return Policy{
		MaxAttempts: 3,
		Redelivery:  InProcess,
		Backoff:     Backoff{Initial: 200 * time.Millisecond, Multiplier: 2, Max: 5 * time.Second, Jitter: 0.2},
		OnPermanent: DeadLetter,
	}
}

// Validate reports every problem with the policy.
func (p Policy) Validate() error {
	var errs []error
	if p.MaxAttempts < 1 {
		errs = append(errs, fmt.Errorf("max attempts must be at least 1, got %d", p.MaxAttempts))
	}
	switch p.Redelivery {
	case InProcess, Broker:
	default:
		errs = append(errs, fmt.Errorf("redelivery must be %q or %q, got %q", InProcess, Broker, p.Redelivery))
	}
	switch p.OnPermanent {
	case Drop, DeadLetter, FailUntilMax:
	default:
		errs = append(errs, fmt.Errorf("on permanent must be %q, %q or %q, got %q", Drop, DeadLetter, FailUntilMax, p.OnPermanent))
	}
	b := p.Backoff
	if b.Initial < 0 || b.Max < b.Initial {
		errs = append(errs, fmt.Errorf("backoff: want 0 <= initial (%s) <= max (%s)", b.Initial, b.Max))
	}
	if b.Multiplier < 1 {
		errs = append(errs, fmt.Errorf("backoff: multiplier must be at least 1, got %g", b.Multiplier))
	}
	if b.Jitter < 0 || b.Jitter > 1 {
		errs = append(errs, fmt.Errorf("backoff: jitter must be within 0..1, got %g", b.Jitter))
	}
	return errors.Join(errs...)
}

// ForQueue returns p adjusted to the queue q the route consumes, as its
// topology declares it (config/topology/*.yaml):
//
//   - the keys set in q's policy block override p's (an operator's tuning);
//   - DeadLetterQueue becomes q's dead-letter queue when p names none;
//   - with broker redelivery, a max_receives on q below MaxAttempts is an
//     error: the broker would dead-letter first, without the reason.
func (p Policy) ForQueue(q topology.Queue) (Policy, error) {
	if o := q.Policy; o != nil {
		if o.MaxAttempts > 0 {
			p.MaxAttempts = o.MaxAttempts
		}
		if o.Redelivery != "" {
			p.Redelivery = Redelivery(o.Redelivery)
		}
		if o.OnPermanent != "" {
			p.OnPermanent = OnPermanent(o.OnPermanent)
		}
		if b := o.Backoff; b != nil {
			if b.Initial > 0 {
				p.Backoff.Initial = b.Initial
			}
			if b.Multiplier > 0 {
				p.Backoff.Multiplier = b.Multiplier
			}
			if b.Max > 0 {
				p.Backoff.Max = b.Max
			}
			if b.Jitter > 0 {
				p.Backoff.Jitter = b.Jitter
			}
		}
	}
	if d := q.DeadLetter; d != nil {
		switch p.DeadLetterQueue {
		case "":
			p.DeadLetterQueue = d.Queue
		case d.Queue:
		default:
			return p, fmt.Errorf("queue %s: the route dead-letters to %s but the topology declares %s", q.Name, p.DeadLetterQueue, d.Queue)
		}
	}
	if p.Redelivery == Broker && q.MaxReceives > 0 && p.MaxAttempts > q.MaxReceives {
		return p, fmt.Errorf("queue %s: max attempts %d with broker redelivery exceeds max_receives %d: the broker would dead-letter first, without the reason", q.Name, p.MaxAttempts, q.MaxReceives)
	}
	return p, p.Validate()
}
