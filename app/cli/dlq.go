package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/spf13/cobra"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/config"
)

func (e *env) dlqCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Inspect and redrive dead-letter queues",
		Long: `dlq works on a dead-letter queue of the configured broker. A dead letter made by
eventpipe carries its history (reason, error class, attempts, first and last
failure, source queue, trace id) in the x-dead-letter metadata value; one the
broker moved on its own (a redrive policy, a delivery limit) carries none.

--queue and --to take a queue's name in its spec's topology
(dlq.ai.analyze.resume); on SQS, where that queue is dlq-ai-analyze-resume
(with sqs.queue_prefix in front), the SQS name is accepted too.`,
	}
	var (
		queue      string
		peekMax    int
		redriveMax int
		wait       time.Duration
		to         string
	)
	peek := &cobra.Command{
		Use:   "peek",
		Short: "Print dead letters as JSON lines, leaving them in the queue",
		Example: `  eventpipe dlq peek --queue interview-completed-dlq
  EVENTPIPE_BROKER=sqs eventpipe dlq peek --queue dlq.ai.analyze.resume --max 50`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.withBroker(cmd, queue, func(b brokerSession) error {
				views, err := app.PeekDeadLetters(cmd.Context(), b.ps, b.queue, peekMax, wait)
				enc := json.NewEncoder(cmd.OutOrStdout())
				for _, v := range views {
					if err := enc.Encode(v); err != nil {
						return err
					}
				}
				return err
			})
		},
	}
	redrive := &cobra.Command{
		Use:   "redrive",
		Short: "Move dead letters back to their source queue (or --to)",
		Long: `redrive moves dead letters back to the queue they came from (their history's
source queue) or to --to, keeping each message's id, body and metadata; the
dead letter is removed only after its copy is published. It stops after --max
messages (0 = until the queue stays empty for --wait).`,
		Example: `  eventpipe dlq redrive --queue report-generate-dlq
  eventpipe dlq redrive --queue dlq.ai.analyze.resume --to ai.analyze.resume --max 10`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.withBroker(cmd, queue, func(b brokerSession) error {
				done, err := app.RedriveDeadLetters(cmd.Context(), b.ps, b.pub, b.queue, b.resolve(to), redriveMax, wait)
				for _, r := range done {
					if _, werr := fmt.Fprintf(cmd.OutOrStdout(), "redrove %s to %s\n", r.ID, r.To); werr != nil {
						return werr
					}
				}
				if _, werr := fmt.Fprintf(cmd.OutOrStdout(), "%d message(s) redriven from %s\n", len(done), b.queue); werr != nil {
					return werr
				}
				return err
			})
		},
	}
	for _, c := range []*cobra.Command{peek, redrive} {
		c.Flags().StringVarP(&queue, "queue", "q", "", "dead-letter queue, by its topology name (required; on SQS its queue name works too)")
		c.Flags().DurationVar(&wait, "wait", 5*time.Second, "stop when no message arrives for this long")
	}
	// One variable each: registering a flag sets its variable to the
	// default, so a shared one left peek with redrive's 0 (nothing shown).
	peek.Flags().IntVar(&peekMax, "max", 10, "most messages to show")
	redrive.Flags().IntVar(&redriveMax, "max", 0, "most messages to move (0 = all)")
	redrive.Flags().StringVar(&to, "to", "", "queue to move them to (default: each one's source queue)")
	cmd.AddCommand(peek, redrive)
	return cmd
}

// brokerSession is a connected broker and the service's publisher on it.
type brokerSession struct {
	ps  broker.PubSub
	pub message.Publisher
	// top is the enabled specs' topology.
	top topology.Topology
	// queue is the command's --queue, by its topology name (resolve).
	queue string
}

// queueNamer is implemented by brokers whose queue names differ from the
// topology's (SQS: ai.analyze.resume is the queue ai-analyze-resume, with
// sqs.queue_prefix in front): TopicOf maps a broker queue name back to the
// topology name, among the names the broker knows.
type queueNamer interface {
	TopicOf(queue string) (topic string, ok bool)
}

// resolve returns the topology name of a queue given on the command line: a
// name of the enabled specs' topology as it is, else — where the broker
// names queues otherwise — the topology queue whose broker name it is (one at
// most: the broker refuses two topology queues with one name), else the name
// as given.
func (b brokerSession) resolve(queue string) string {
	if queue == "" {
		return ""
	}
	if _, ok := b.top.Queue(queue); ok {
		return queue
	}
	if n, ok := b.ps.(queueNamer); ok {
		if topic, ok := n.TopicOf(queue); ok {
			return topic
		}
	}
	return queue
}

// withBroker connects to the configured broker for one command on queue.
func (e *env) withBroker(cmd *cobra.Command, queue string, f func(brokerSession) error) error {
	if queue == "" {
		return usageError{errors.New("--queue is required")}
	}
	cfg, err := e.load()
	if err != nil {
		return err
	}
	if cfg.Broker.Kind == config.KindMemory {
		return usageError{errors.New("the memory broker lives inside its serve process: its queues cannot be reached from another one (choose broker.kind rabbitmq, sqs or postgres)")}
	}
	if cfg.Serve.ConnectTimeout == 0 {
		cfg.Serve.ConnectTimeout = publishConnectTimeout
	}
	top, err := app.SpecTopology(cfg)
	if err != nil {
		return err
	}
	ps, err := app.NewBroker(cmd.Context(), cfg, e.logger(cfg))
	if err != nil {
		return err
	}
	defer func() { _ = ps.Close() }()
	pub, err := app.NewPublisher(cfg, ps, top)
	if err != nil {
		return err
	}
	b := brokerSession{ps: ps, pub: pub, top: top}
	b.queue = b.resolve(queue)
	return f(b)
}
