package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/spf13/cobra"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/msgctx"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/config"
)

// errMemoryPublish refuses publish on the memory broker: the broker lives
// inside this one process, which consumes nothing, so the message would
// reach no one (a running serve has a memory broker of its own).
var errMemoryPublish = errors.New("broker.kind is memory: the in-process broker lives only as long as this command, " +
	"and nothing in it consumes, so the message would reach no one (nothing sent); publish to the broker a serve " +
	"process uses (EVENTPIPE_BROKER=rabbitmq, sqs or postgres), or let serve's own producers send on memory " +
	"(demo.enabled, <spec>.sample_traffic; make run)")

// publishConnectTimeout bounds how long publish waits for an unreachable
// broker when serve.connect_timeout is 0 (serve's "forever").
const publishConnectTimeout = 15 * time.Second

func (e *env) publishCmd() *cobra.Command {
	var (
		topic, body, file, id string
		metadataKVs           []string
		raw                   bool
	)
	cmd := &cobra.Command{
		Use:   "publish --topic QUEUE (--body JSON | --file PATH | --file -)",
		Short: "Publish one message to a queue on the configured broker",
		Long: `publish sends one message to QUEUE on the configured broker and prints its id.

The body is checked first by the decoder of the route that consumes QUEUE; a body
that route would reject is refused and nothing is sent. --raw skips the check
(for queues eventpipe does not consume). A trace id is added (x-trace-id) unless
--metadata sets one.

On the memory broker (the default) publish refuses: that broker lives inside one
process, and this one consumes nothing.`,
		Example: `  EVENTPIPE_BROKER=rabbitmq eventpipe publish --topic demo.greetings --body '{"name":"Ada"}'
  EVENTPIPE_BROKER=rabbitmq eventpipe publish -t demo.greetings -f greeting.json -m x-trace-id=abc123`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if topic == "" {
				return usageError{errors.New("--topic is required")}
			}
			payload, err := e.readBody(body, file)
			if err != nil {
				return usageError{err}
			}
			msg := message.NewMessage(id, payload)
			for _, kv := range metadataKVs {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return usageError{fmt.Errorf("--metadata %q: want key=value", kv)}
				}
				msg.Metadata.Set(k, v)
			}

			cfg, err := e.load()
			if err != nil {
				return err
			}
			top, err := app.SpecTopology(cfg)
			if err != nil {
				return err
			}
			var consumer route.Route
			if !raw {
				if consumer, err = validateBody(top, topic, payload); err != nil {
					return err
				}
			}
			// The ids the body carries, unless given: the transport's must
			// agree with them (consumers deduplicate and trace on them).
			if id == "" && consumer.MessageID != nil {
				id = consumer.MessageID(payload)
			}
			if msg.Metadata.Get(metadata.TraceIDKey) == "" && consumer.TraceID != nil {
				if tid := consumer.TraceID(message.NewMessage("", payload)); tid != "" {
					msg.Metadata.Set(metadata.TraceIDKey, tid)
				}
			}
			if id == "" {
				id = watermill.NewUUID()
			}
			msg.UUID = id
			if msg.Metadata.Get(metadata.TraceIDKey) == "" {
				msg.Metadata.Set(metadata.TraceIDKey, msgctx.NewTraceID())
			}
			if cfg.Broker.Kind == config.KindMemory {
				return usageError{errMemoryPublish}
			}
			if cfg.Serve.ConnectTimeout == 0 {
				cfg.Serve.ConnectTimeout = publishConnectTimeout
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
			if err := pub.Publish(topic, msg); err != nil {
				return fmt.Errorf("publish to %s: %w", topic, err)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "published %s to %s on %s (trace %s)\n",
				msg.UUID, topic, cfg.Broker.Kind, msg.Metadata.Get(metadata.TraceIDKey))
			return err
		},
	}
	f := cmd.Flags()
	f.StringVarP(&topic, "topic", "t", "", `queue, or "<exchange>/<routing-key>" of an enabled spec, to publish to (required)`)
	f.StringVarP(&body, "body", "b", "", "message body")
	f.StringVarP(&file, "file", "f", "", "read the body from a file (- for standard input)")
	f.StringArrayVarP(&metadataKVs, "metadata", "m", nil, "metadata key=value (repeatable)")
	f.StringVar(&id, "id", "", "message id (default: a new UUID)")
	f.BoolVar(&raw, "raw", false, "skip the route's body check")
	return cmd
}

func (e *env) readBody(body, file string) ([]byte, error) {
	switch {
	case body != "" && file != "":
		return nil, errors.New("give either --body or --file, not both")
	case body != "":
		return []byte(body), nil
	case file == "-":
		return io.ReadAll(e.stdin)
	case file != "":
		return os.ReadFile(file)
	default:
		return nil, errors.New("a body is required: --body JSON or --file PATH")
	}
}

// validateBody checks payload the way the consumers of topic will: the route
// of the queue, or of every queue an "<exchange>/<routing-key>" topic reaches
// by top's bindings. Nothing is sent when one refuses it.
func validateBody(top topology.Topology, topic string, payload []byte) (route.Route, error) {
	queues := []string{topic}
	if exchange, key, routed := strings.Cut(topic, "/"); routed && exchange != "" {
		queues = top.Route(exchange, key)
		if len(queues) == 0 {
			return route.Route{}, usageError{fmt.Errorf("no queue of the enabled specs is bound to exchange %q for routing key %q (is the spec enabled?); nothing sent", exchange, key)}
		}
	} else if routed {
		queues = []string{key}
	}
	var first route.Route
	for i, q := range queues {
		r, err := app.Catalog().ByQueue(q)
		if err != nil {
			return route.Route{}, usageError{fmt.Errorf("%w; use --raw to publish anyway", err)}
		}
		if err := r.Validate(payload); err != nil {
			return route.Route{}, usageError{fmt.Errorf("body refused by route %s, nothing sent: %w", r.Name, err)}
		}
		if i == 0 {
			first = r
		}
	}
	return first, nil
}
