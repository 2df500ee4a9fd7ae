package broker

import (
	"context"
	"fmt"
	"strings"
)

// DrainReport is what CheckDrained found: each checked queue's counts, in
// the order they were named.
type DrainReport struct {
	Queues []QueueStats
}

// Drained reports whether every queue checked holds no message for certain:
// nothing ready, in flight or delayed, with the in-flight messages counted.
// A broker that could not count them (RabbitMQ without its management API)
// never passes the gate, and neither does a report of no queue.
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
	var total int64
	for _, s := range r.Queues {
		parts = append(parts, s.String())
		total += s.Total()
		if !s.InFlightKnown {
			unknown = append(unknown, s.Queue)
		}
	}
	out := strings.Join(parts, "; ")
	switch {
	case r.Drained():
		return out + " — drained"
	case len(unknown) > 0 && total == 0:
		return out + " — not drained: messages in flight unknown on " + strings.Join(unknown, ", ")
	default:
		return out + " — not drained"
	}
}

// CheckDrained is the drain-to-zero gate of a deploy: before promoting a
// release that changes a message-body schema (the booking session FIFO
// spec's "DLQ posture"), the queue and its dead-letter queue must hold no
// message — none ready, in flight (a consumer may still fail and give it
// back) or delayed — so that no pre-deploy message reaches a post-deploy
// consumer. It counts queues ("" entries are skipped) and reports the
// counts; promote only when report.Drained() and err is nil. A queue that
// does not exist is an error (wrapping ErrQueueNotFound), so a misspelt name
// cannot pass. Stop the producers first, or the answer is stale as soon as
// it is given; on SQS, whose counts are approximate, see it drained for
// several minutes in a row before trusting it. `eventpipe drain-check` is
// this gate as a command.
func CheckDrained(ctx context.Context, s QueueStatter, queues ...string) (DrainReport, error) {
	var r DrainReport
	for _, q := range queues {
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
