package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/publish"
	"github.com/eventpipe/eventpipe/config"
)

// errMemoryPublish refuses publish on the memory broker: the broker lives
// inside this one process, which consumes nothing, so the message would
// reach no one (a running serve has a memory broker of its own).
var errMemoryPublish = errors.New("broker.kind is memory: the in-process broker lives only as long as this command, " +
	"and nothing in it consumes, so the message would reach no one (nothing sent); publish to the broker a serve " +
	"process uses (EVENTPIPE_BROKER=rabbitmq, sqs or postgres), or let serve's own producers send on memory " +
	"(demo.enabled, <spec>.sample_traffic; make run)")

// publishConnectTimeout bounds how long the commands that talk to a broker
// wait for an unreachable one when serve.connect_timeout is 0 (serve's
// "forever"): the library's default.
const publishConnectTimeout = publish.DefaultConnectTimeout

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

The body is checked first against the strict JSON Schema of QUEUE's message types
(eventpipe catalog schemas: unknown fields refused, the error names the field's
path), then by the decoder of the route that consumes QUEUE; a body either would
reject is refused and nothing is sent. --raw skips the checks (for queues
eventpipe does not consume). The message id and trace id (x-trace-id) are the
body's where it carries them, unless --id and --metadata set them. Go services
do the same with package app/publish (README, "Use from Go").

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
			opts := []publish.Option{publish.WithID(id)}
			for _, kv := range metadataKVs {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return usageError{fmt.Errorf("--metadata %q: want key=value", kv)}
				}
				opts = append(opts, publish.WithMetadata(k, v))
			}
			if raw {
				opts = append(opts, publish.Raw())
			}

			cfg, err := e.load()
			if err != nil {
				return err
			}
			contract, err := publish.Load(cfg)
			if err != nil {
				return err
			}
			// Checked before any broker is contacted: a refused body fails
			// at once, whatever the broker's state.
			msg, err := contract.Message(cmd.Context(), topic, payload, opts...)
			if err != nil {
				return refusal(err)
			}
			if cfg.Broker.Kind == config.KindMemory {
				return usageError{errMemoryPublish}
			}
			pub, err := publish.Open(cmd.Context(), cfg, publish.Options{Logger: e.logger(cfg)})
			if err != nil {
				return err
			}
			defer func() { _ = pub.Close() }()
			if err := pub.Send(topic, msg); err != nil {
				return err
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

// refusal is the usage error of a body or topic the contract refuses.
func refusal(err error) error {
	var unknown *publish.UnknownTopicError
	if errors.As(err, &unknown) && !unknown.Unbound {
		return usageError{fmt.Errorf("%w; use --raw to publish anyway", err)}
	}
	var refused *publish.RefusedError
	if errors.As(err, &refused) || errors.As(err, &unknown) {
		return usageError{err}
	}
	return err
}
