package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
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
		group      string
		ids        []string
		dryRun     bool
		rate       float64
		canary     bool
		canaryWait time.Duration
		progress   string
	)
	peek := &cobra.Command{
		Use:   "peek",
		Short: "Print dead letters as JSON lines, leaving them in the queue",
		Long: `peek prints up to --max dead letters as JSON lines (id, size, history, metadata,
body), read without taking them: a SELECT on PostgreSQL, the management API's
get (requeued in place) on RabbitMQ, receives made visible again at once on
SQS. What the broker still changes reading them (RabbitMQ's redelivered flag,
SQS's receive count) is printed on stderr; no attempt of a handler is spent
(decision 0029). A last line {"groups": …} counts them by reason and class.`,
		Example: `  eventpipe dlq peek --queue interview-completed-dlq
  EVENTPIPE_BROKER=sqs eventpipe dlq peek --queue dlq.ai.analyze.resume --max 50`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.withBroker(cmd, queue, func(b brokerSession) error {
				got, err := app.PeekDeadLetters(cmd.Context(), b.ps, b.queue, peekMax)
				if err != nil {
					return err
				}
				enc := json.NewEncoder(cmd.OutOrStdout())
				for _, v := range got.Letters {
					if err := enc.Encode(v); err != nil {
						return err
					}
				}
				if err := enc.Encode(map[string]any{"groups": app.GroupDeadLetters(got.Letters), "complete": got.Complete}); err != nil {
					return err
				}
				if got.Effects != "" {
					_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "note: %s\n", got.Effects)
				}
				return nil
			})
		},
	}
	redrive := &cobra.Command{
		Use:   "redrive",
		Short: "Move dead letters back to their source queue (or --to)",
		Long: `redrive moves dead letters back to the queue they came from (their history's
source queue) or to --to, keeping each message's id, body and metadata; the
dead letter is removed only after its copy is published. It stops after --max
messages (0 = until the queue stays empty for --wait).

--group and --id select dead letters (a group is a key or a reason as peek
prints them); the others are passed over once, each moved unchanged to the
back of the DLQ. --dry-run prints what would move where and changes nothing.
--canary moves one first and watches the DLQ for --canary-wait: when it comes
back the rest stay. --rate caps messages per second. Progress goes to stderr
as a bar on a terminal, else as JSON lines (--progress forces one).

Without --group or --id it goes in batches where the broker allows: on
RabbitMQ 100 copies published with pipelined confirms, then one ack for the
batch; a whole SQS DLQ that a redrive policy filled is moved by SQS itself (a
message move task; where the API lacks it, batches of ten received, sent and
deleted), reported as a count (decision 0029).`,
		Example: `  eventpipe dlq redrive --queue report-generate-dlq
  eventpipe dlq redrive --queue dlq.ai.analyze.resume --to ai.analyze.resume --max 10
  eventpipe dlq redrive --queue domain-events-dlq --group 3f2a9c01d4e5 --canary --rate 50 --dry-run`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.withBroker(cmd, queue, func(b brokerSession) error {
				out := cmd.OutOrStdout()
				bar := newProgress(cmd.ErrOrStderr(), progress)
				opts := app.RedriveOptions{
					To: b.resolve(to), Max: redriveMax, Idle: wait, IDs: ids, Group: group, DryRun: dryRun,
					Rate: rate, Canary: canary, CanaryWait: canaryWait, Principal: principal(e),
				}
				if !dryRun {
					if statter, ok := b.ps.(broker.QueueStatter); ok {
						if s, err := statter.QueueStats(cmd.Context(), b.queue); err == nil {
							bar.total = s.Total()
						}
					}
					opts.Progress = bar.update
				}
				done, err := app.Redrive(cmd.Context(), b.ps, b.pub, b.queue, opts)
				bar.finish()
				verb := "redrove"
				if dryRun {
					verb = "would redrive"
				}
				var n int64
				for _, r := range done {
					n += r.Count()
					line := fmt.Sprintf("%s %s to %s\n", verb, r.ID, r.To)
					if r.Moved > 0 {
						line = fmt.Sprintf("the broker moved %d message(s) to %s (SQS message move task)\n", r.Moved, r.To)
					}
					if _, werr := io.WriteString(out, line); werr != nil {
						return werr
					}
				}
				summary := "%d message(s) redriven from %s\n"
				if dryRun {
					summary = "%d message(s) would be redriven from %s (dry run: nothing changed)\n"
				}
				if _, werr := fmt.Fprintf(out, summary, n, b.queue); werr != nil {
					return werr
				}
				return err
			})
		},
	}
	for _, c := range []*cobra.Command{peek, redrive} {
		c.Flags().StringVarP(&queue, "queue", "q", "", "dead-letter queue, by its topology name (required; on SQS its queue name works too)")
	}
	// One variable each: registering a flag sets its variable to the
	// default, so a shared one left peek with redrive's 0 (nothing shown).
	peek.Flags().IntVar(&peekMax, "max", 10, "most messages to show")
	// A peek no longer waits for deliveries (it reads the queue); the flag
	// stays so that scripts keep working.
	var peekWait time.Duration
	peek.Flags().DurationVar(&peekWait, "wait", 5*time.Second, "ignored: a peek reads the queue without waiting")
	_ = peek.Flags().MarkDeprecated("wait", "a peek reads the queue without waiting for deliveries")
	redrive.Flags().DurationVar(&wait, "wait", 5*time.Second, "stop when no message arrives for this long")
	redrive.Flags().IntVar(&redriveMax, "max", 0, "most messages to move (0 = all)")
	redrive.Flags().StringVar(&to, "to", "", "queue to move them to (default: each one's source queue)")
	redrive.Flags().StringVar(&group, "group", "", "only the dead letters of this group: its key or reason, as dlq peek prints them")
	redrive.Flags().StringSliceVar(&ids, "id", nil, "only the dead letter with this message id (repeatable)")
	redrive.Flags().BoolVar(&dryRun, "dry-run", false, "print what would be moved where; change nothing")
	redrive.Flags().Float64Var(&rate, "rate", 0, "most messages per second (0 = no cap)")
	redrive.Flags().BoolVar(&canary, "canary", false, "move one first; stop if it comes back to the DLQ within --canary-wait")
	redrive.Flags().DurationVar(&canaryWait, "canary-wait", 10*time.Second, "how long to watch the canary")
	redrive.Flags().StringVar(&progress, "progress", "auto", "progress on stderr: auto (a bar on a terminal, else JSON lines), bar, json, none")
	cmd.AddCommand(peek, redrive)
	return cmd
}

// principal names the operator of a command in logs and edit records: the
// USER of the environment, else "cli".
func principal(e *env) string {
	for _, kv := range e.environ {
		if u, ok := strings.CutPrefix(kv, "USER="); ok && u != "" {
			return "cli:" + u
		}
	}
	return "cli"
}

// progress reports a redrive's progress on w: a bar redrawn in place on a
// terminal, JSON lines otherwise.
type progress struct {
	w     io.Writer
	mode  string
	total int64
	last  time.Time
	drawn bool
}

func newProgress(w io.Writer, mode string) *progress {
	if mode == "auto" {
		mode = "json"
		if f, ok := w.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				mode = "bar"
			}
		}
	}
	return &progress{w: w, mode: mode}
}

func (p *progress) update(r app.RedriveProgress) {
	switch p.mode {
	case "json":
		_ = json.NewEncoder(p.w).Encode(map[string]any{"done": r.Done, "skipped": r.Skipped, "total": p.total, "id": r.Last.ID, "to": r.Last.To,
			"rate_per_s": rate(r)})
	case "bar":
		if time.Since(p.last) < 100*time.Millisecond && int64(r.Done) != p.total {
			return
		}
		p.last = time.Now()
		const width = 30
		filled := width
		of := "?"
		if p.total > 0 {
			filled = min(width, int(int64(width*r.Done)/p.total))
			of = strconv.FormatInt(p.total, 10)
		}
		_, _ = fmt.Fprintf(p.w, "\r[%s%s] %d/%s  %.1f/s  skipped %d", strings.Repeat("#", filled), strings.Repeat(".", width-filled), r.Done, of, rate(r), r.Skipped)
		p.drawn = true
	}
}

func (p *progress) finish() {
	if p.drawn {
		_, _ = fmt.Fprintln(p.w)
	}
}

func rate(r app.RedriveProgress) float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Done) / r.Elapsed.Seconds()
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
