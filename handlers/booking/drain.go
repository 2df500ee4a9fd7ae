package booking

import (
	"context"
	"fmt"
	"strings"

	"github.com/eventpipe/eventpipe/app/broker"
)

// QueueStatter counts a queue's messages. It is broker.QueueStatter, which
// the durable brokers' PubSubs implement (SQS, RabbitMQ, PostgreSQL; the
// embedded broker does not: nothing of it survives a deploy, so there is
// nothing to drain). Declared here so that the gate needs no broker client.
type QueueStatter interface {
	// QueueStats counts queue's messages; a queue that does not exist is
	// an error, never zeros.
	QueueStats(ctx context.Context, queue string) (broker.QueueStats, error)
}

// DrainReport is what CheckDrained found: the queue's counts, then its
// DLQ's when one was checked.
type DrainReport struct {
	Queues []broker.QueueStats
}

// Drained reports whether every queue checked holds no message for certain:
// nothing ready, in flight or delayed, with the in-flight messages counted.
// A broker that could not count them (RabbitMQ without its management API)
// never passes the gate.
func (r DrainReport) Drained() bool {
	for _, s := range r.Queues {
		if !s.Empty() {
			return false
		}
	}
	return len(r.Queues) > 0
}

// String is the counts of every queue and the verdict, with what kept it
// from being certain.
func (r DrainReport) String() string {
	parts := make([]string, 0, len(r.Queues))
	var unknown []string
	for _, s := range r.Queues {
		parts = append(parts, s.String())
		if !s.InFlightKnown {
			unknown = append(unknown, s.Queue)
		}
	}
	out := strings.Join(parts, "; ")
	switch {
	case r.Drained():
		return out + " — drained"
	case len(unknown) > 0 && r.total() == 0:
		return out + " — not drained: messages in flight unknown on " + strings.Join(unknown, ", ")
	default:
		return out + " — not drained"
	}
}

func (r DrainReport) total() int64 {
	var n int64
	for _, s := range r.Queues {
		n += s.Total()
	}
	return n
}

// CheckDrained is the drain-to-zero gate (§"DLQ posture"): before promoting
// a release that changes the message-body schema, queue and its DLQ (dlq;
// "" for none) must hold no message — none ready, in flight (a consumer
// may still fail and give it back) or delayed — so that no pre-deploy
// message reaches a post-deploy consumer. It reports the counts; promote
// only when report.Drained() and err is nil. A queue that does not exist is
// an error (wrapping broker.ErrQueueNotFound), so a misspelt name cannot
// pass. Stop the producers first, or the answer is stale as soon as it is
// given; on SQS, whose counts are approximate, see it drained for several
// minutes in a row before trusting it.
func CheckDrained(ctx context.Context, s QueueStatter, queue, dlq string) (DrainReport, error) {
	var r DrainReport
	for _, q := range []string{queue, dlq} {
		if q == "" {
			continue
		}
		stats, err := s.QueueStats(ctx, q)
		if err != nil {
			return r, fmt.Errorf("drain gate: %s: %w", q, err)
		}
		r.Queues = append(r.Queues, stats)
	}
	return r, nil
}
