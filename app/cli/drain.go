package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/eventpipe/eventpipe/app/broker"
)

// errNotDrained makes `drain-check` exit 1 without an error line of its own:
// the counts printed above it are the message.
var errNotDrained = errors.New("the queue is not drained")

// drainPoll is how often drain-check counts again while it waits.
const drainPoll = 5 * time.Second

func (e *env) drainCheckCmd() *cobra.Command {
	var (
		queue   string
		withDLQ bool
		wait    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "drain-check --queue Q [--with-dlq] [--wait DURATION]",
		Short: "Exit 0 when a queue (and its DLQ) holds no message: the drain-to-zero gate of a deploy",
		Long: `drain-check counts a queue's messages — ready, in flight (a consumer may still
fail and give one back) and delayed (waiting for a redelivery) — and, with
--with-dlq, those of the dead-letter queue its spec declares. It prints the
counts and exits 0 when every count is zero, 1 otherwise; with --wait it counts
again every 5 s until the queues are drained or the wait is over.

It is the gate before promoting a release that changes a message-body schema
(the booking session FIFO spec's "DLQ posture"): stop the producers, let the
consumers drain the queue, and deploy only when drain-check passes, so that
no pre-deploy message reaches a post-deploy consumer. It works on RabbitMQ
(ready + unacknowledged, through the management API: without it the messages
in flight are unknown and the gate stays shut), SQS (approximate counts: see
it pass for a few minutes in a row before trusting it) and PostgreSQL. A queue
that does not exist is an error (exit 1), never zero. The memory broker lives
inside its serve process and has nothing to drain across a deploy.

--queue takes the queue's name in its spec's topology (ai.analyze.resume); on
SQS, where that queue is ai-analyze-resume (with sqs.queue_prefix in front),
the SQS name is accepted too and the counts are shown under the topology name.`,
		Example: `  eventpipe drain-check --queue booking-session-events.fifo --with-dlq
  eventpipe drain-check --queue booking-session-events.fifo --with-dlq --wait 10m && ./promote.sh`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if wait < 0 {
				return usageError{fmt.Errorf("--wait %s: want 0 or more", wait)}
			}
			return e.withBroker(cmd, queue, func(b brokerSession) error {
				st, ok := b.ps.(broker.QueueStatter)
				if !ok {
					return fmt.Errorf("drain-check: this broker cannot count its queues")
				}
				queues := []string{b.queue}
				if withDLQ {
					q, ok := b.top.Queue(b.queue)
					switch {
					case !ok:
						return usageError{fmt.Errorf("--with-dlq: queue %s is not declared by an enabled spec, so its dead-letter queue is unknown: enable its spec, or check the DLQ with a second drain-check --queue", queue)}
					case q.DeadLetter == nil:
						return usageError{fmt.Errorf("--with-dlq: queue %s declares no dead-letter queue", b.queue)}
					}
					queues = append(queues, q.DeadLetter.Queue)
				}
				ctx := cmd.Context()
				deadline := time.Now().Add(wait)
				for {
					r, err := broker.CheckDrained(ctx, st, queues...)
					if err != nil {
						return err
					}
					if _, err := fmt.Fprintln(cmd.OutOrStdout(), r.String()); err != nil {
						return err
					}
					left := time.Until(deadline)
					if r.Drained() {
						return nil
					}
					if left <= 0 {
						return errNotDrained
					}
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(min(drainPoll, left)):
					}
				}
			})
		},
	}
	cmd.Flags().StringVar(&queue, "queue", "", "queue to check, by its topology name (required; on SQS its queue name works too)")
	cmd.Flags().BoolVar(&withDLQ, "with-dlq", false, "also check the dead-letter queue the queue's spec declares")
	cmd.Flags().DurationVar(&wait, "wait", 0, "keep counting (every 5 s) until drained or this long has passed")
	return cmd
}
