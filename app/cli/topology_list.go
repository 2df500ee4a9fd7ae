package cli

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/config"
)

func (e *env) topologyListCmd() *cobra.Command {
	var files []string
	cmd := &cobra.Command{
		Use:   "list [-f FILE...]",
		Short: "Print each queue's real name on the configured broker (no connection)",
		Long: `list prints every queue of the topology files (dead-letter queues included) with the
name it has on the configured broker: the same name on the memory broker and RabbitMQ
(with its queue type, after rabbitmq.queue_type), the SQS queue name (dots become
dashes, sqs.queue_prefix in front, ".fifo" kept; decision 0018) on SQS, and the table
in postgres.schema on PostgreSQL. Without --file it lists the topologies built into the
binary (every spec's). It connects to nothing.`,
		Example: `  eventpipe topology list
  eventpipe topology list -f config/topology/stackup.yaml
  EVENTPIPE_BROKER=sqs EVENTPIPE_SQS_QUEUE_PREFIX=stage- eventpipe topology list -f config/topology/stackup.yaml`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tops, err := shippedTopologies()
			if len(files) > 0 {
				tops, err = loadTopologies(files)
			}
			if err != nil {
				return err
			}
			cfg, err := e.load()
			if err != nil {
				return err
			}
			if tops, err = deployed(cfg, tops); err != nil {
				return err
			}
			return printQueueNames(cmd.OutOrStdout(), cfg, tops)
		},
	}
	topologyFlags(cmd, &files)
	return cmd
}

// shippedTopologies are the topology files built into the binary
// (config/topology/*.yaml), in lexical order.
func shippedTopologies() ([]topology.Topology, error) {
	var out []topology.Topology
	for _, name := range config.TopologyNames() {
		data, err := config.TopologyFile(name)
		if err != nil {
			return nil, err
		}
		t, err := topology.Parse(data)
		if err != nil {
			return nil, fmt.Errorf("shipped topology %s: %w", name, err)
		}
		out = append(out, t)
	}
	return out, nil
}

// printQueueNames writes one line per queue of tops: its topology name, its
// name on cfg's broker and what it is.
func printQueueNames(out io.Writer, cfg config.Config, tops []topology.Topology) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintf(w, "SPEC\tQUEUE\tON %s\tKIND\n", brokerLabel(cfg.Broker.Kind))
	for _, t := range tops {
		dlqOf := map[string]string{}
		for _, q := range t.Queues {
			if q.DeadLetter != nil {
				dlqOf[q.DeadLetter.Queue] = q.Name
			}
		}
		for _, q := range t.AllQueues() {
			_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", t.Name, q.Name, app.NativeQueueName(cfg, q.Name), queueKind(cfg.Broker.Kind, q, dlqOf[q.Name]))
		}
	}
	return w.Flush()
}

func brokerLabel(kind string) string {
	switch kind {
	case config.KindRabbitMQ:
		return "RABBITMQ"
	case config.KindSQS:
		return "SQS"
	case config.KindPostgres:
		return "POSTGRESQL (TABLE)"
	}
	return "MEMORY"
}

// queueKind says what q is: its dead-letter role, FIFO, and on RabbitMQ its
// queue type.
func queueKind(kind string, q topology.Queue, deadLetterOf string) string {
	s := "queue"
	if deadLetterOf != "" {
		s = "dead-letter queue of " + deadLetterOf
	}
	if q.FIFO {
		s += ", FIFO"
	}
	if kind == config.KindRabbitMQ {
		typ := q.Type
		if typ == "" {
			typ = topology.Classic
		}
		s += ", " + typ
	}
	return s
}
