package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/spf13/cobra"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/config"
)

// gapReporter is implemented by brokers that cannot enforce every declared
// value natively; plan prints the gaps as notes (they are not drift).
type gapReporter interface {
	NativeGaps(t topology.Topology) []string
}

// errDrift makes `topology plan` exit 1 without an error line of its own: the
// diff printed above it is the message.
var errDrift = errors.New("the broker differs from the declared topology")

func (e *env) topologyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "topology",
		Short: "Plan, apply or export a spec's queues, exchanges, bindings and dead-letter queues",
		Long: `topology compiles a spec's broker-neutral topology file (config/topology/*.yaml) to the
configured broker: RabbitMQ exchanges, queues with their arguments, dead-letter exchanges and
queues, and bindings; SQS queues with their dead-letter queues, redrive policies and attributes.
The memory broker has nothing to provision; PostgreSQL gets one table per queue.`,
		Args: noArgs,
	}
	cmd.AddCommand(e.topologyPlanCmd(), e.topologyApplyCmd(), e.topologyExportCmd(), e.topologyListCmd())
	return cmd
}

func topologyFlags(cmd *cobra.Command, files *[]string) {
	cmd.Flags().StringArrayVarP(files, "file", "f", nil, "topology YAML file (repeatable), e.g. config/topology/stackup.yaml")
}

func loadTopologies(files []string) ([]topology.Topology, error) {
	if len(files) == 0 {
		return nil, usageError{errors.New("at least one --file is required")}
	}
	var out []topology.Topology
	for _, f := range files {
		t, err := topology.Load(f)
		if err != nil {
			return nil, usageError{fmt.Errorf("%s: %w", f, err)}
		}
		out = append(out, t)
	}
	return out, nil
}

// deployed applies the deployment's choices to the topologies read from files
// (app.DeployedTopology), as serve applies them to its own.
func deployed(cfg config.Config, tops []topology.Topology) ([]topology.Topology, error) {
	out := make([]topology.Topology, 0, len(tops))
	for _, t := range tops {
		d, err := app.DeployedTopology(cfg, t)
		if err != nil {
			return nil, usageError{err}
		}
		out = append(out, d)
	}
	return out, nil
}

// provisioner connects to the configured broker and returns what provisions
// it. Brokers without native objects provision their queues by initializing
// each subscription.
func (e *env) provisioner(ctx context.Context) (broker.PubSub, config.Config, error) {
	cfg, err := e.load()
	if err != nil {
		return nil, cfg, err
	}
	if cfg.Serve.ConnectTimeout == 0 {
		cfg.Serve.ConnectTimeout = publishConnectTimeout
	}
	ps, err := app.NewBroker(ctx, cfg, e.logger(cfg))
	return ps, cfg, err
}

func (e *env) topologyPlanCmd() *cobra.Command {
	var files []string
	cmd := &cobra.Command{
		Use:   "plan -f FILE...",
		Short: "Show how the live broker differs from the declared topology; exit 0 in sync, 1 on drift",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tops, err := loadTopologies(files)
			if err != nil {
				return err
			}
			ps, cfg, err := e.provisioner(cmd.Context())
			if err != nil {
				return err
			}
			defer func() { _ = ps.Close() }()
			if tops, err = deployed(cfg, tops); err != nil {
				return err
			}
			p, ok := ps.(broker.Provisioner)
			if !ok {
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s: queues are created on first use; nothing to plan\n", cfg.Broker.Kind)
				return err
			}
			drift := false
			for _, t := range tops {
				plan, err := p.Plan(cmd.Context(), t)
				if err != nil {
					return fmt.Errorf("plan %s: %w", t.Name, err)
				}
				plan.Sort()
				if err := printPlan(cmd.OutOrStdout(), cfg.Broker.Kind, t.Name, plan); err != nil {
					return err
				}
				if g, ok := ps.(gapReporter); ok {
					for _, gap := range g.NativeGaps(t) {
						if _, err := fmt.Fprintf(cmd.OutOrStdout(), "  note: %s\n", gap); err != nil {
							return err
						}
					}
				}
				drift = drift || !plan.InSync()
			}
			if drift {
				return errDrift
			}
			return nil
		},
	}
	topologyFlags(cmd, &files)
	return cmd
}

func (e *env) topologyApplyCmd() *cobra.Command {
	var files []string
	cmd := &cobra.Command{
		Use:   "apply -f FILE...",
		Short: "Create what is missing and fix what can change in place; never deletes a queue",
		Long: `apply is idempotent: it creates missing exchanges, queues, dead-letter queues and bindings,
and changes attributes the broker allows to change in place (SQS). It never deletes or recreates a
queue; a live queue whose arguments conflict with the declaration (RabbitMQ PRECONDITION_FAILED) is
reported with the argument, both values and what to do, and apply exits 1.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tops, err := loadTopologies(files)
			if err != nil {
				return err
			}
			ps, cfg, err := e.provisioner(cmd.Context())
			if err != nil {
				return err
			}
			defer func() { _ = ps.Close() }()
			if tops, err = deployed(cfg, tops); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			p, ok := ps.(broker.Provisioner)
			if !ok {
				return initializeQueues(cmd.Context(), out, ps, cfg.Broker.Kind, tops)
			}
			unresolvedAny := false
			for _, t := range tops {
				unresolved, err := p.Apply(cmd.Context(), t)
				if err != nil {
					return fmt.Errorf("apply %s: %w", t.Name, err)
				}
				unresolved.Sort()
				if unresolved.InSync() {
					if _, err := fmt.Fprintf(out, "%s: %s applied\n", cfg.Broker.Kind, t.Name); err != nil {
						return err
					}
					continue
				}
				unresolvedAny = true
				if err := printPlan(out, cfg.Broker.Kind, t.Name+" (left as is)", unresolved); err != nil {
					return err
				}
			}
			if unresolvedAny {
				return errors.New("some declared objects conflict with the live broker; see above")
			}
			return nil
		},
	}
	topologyFlags(cmd, &files)
	return cmd
}

// initializeQueues provisions brokers whose queues are plain tables or
// in-process channels: one SubscribeInitialize per queue.
func initializeQueues(_ context.Context, out io.Writer, ps broker.PubSub, kind string, tops []topology.Topology) error {
	si, ok := ps.(message.SubscribeInitializer)
	for _, t := range tops {
		if ok {
			for _, q := range t.AllQueues() {
				if err := si.SubscribeInitialize(q.Name); err != nil {
					return fmt.Errorf("initialize %s: %w", q.Name, err)
				}
			}
		}
		if _, err := fmt.Fprintf(out, "%s: %s applied (%d queues)\n", kind, t.Name, len(t.AllQueues())); err != nil {
			return err
		}
	}
	return nil
}

func printPlan(w io.Writer, kind, name string, plan topology.Plan) error {
	_, err := fmt.Fprintf(w, "%s: %s\n%s", kind, name, plan.String())
	return err
}

func (e *env) topologyExportCmd() *cobra.Command {
	var (
		files         []string
		format, vhost string
	)
	cmd := &cobra.Command{
		Use:   "export -f FILE... [--format rabbitmq-definitions|asyncapi]",
		Short: "Print a RabbitMQ definitions.json (rabbitmqctl import_definitions) or an AsyncAPI 3.0 document of the topology",
		Long: `export prints the queues as this deployment declares them: with rabbitmq.queue_type
(EVENTPIPE_RABBITMQ_QUEUE_TYPE) set to classic or quorum, every queue and dead-letter queue is of
that type, as serve and topology apply declare them.

--format asyncapi prints an AsyncAPI 3.0 document of the topologies and their specs' message
catalogs: a channel per queue and dead-letter queue (AMQP and SQS bindings, SQS names with
sqs.queue_prefix), a channel per exchange routing key, send and receive operations, and every
message with its JSON Schema payload and its headers (eventpipe catalog schemas writes the
schemas alone).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "rabbitmq-definitions" && format != "asyncapi" {
				return usageError{fmt.Errorf("--format %q: want rabbitmq-definitions or asyncapi", format)}
			}
			tops, err := loadTopologies(files)
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
			name := tops[0].Name
			if len(tops) > 1 {
				name = "eventpipe"
			}
			merged, err := topology.Merge(name, tops...)
			if err != nil {
				return usageError{err}
			}
			var data []byte
			if format == "asyncapi" {
				data, err = app.ExportAsyncAPI(cfg, tops, Version, vhost)
				if err != nil {
					return usageError{err}
				}
				_, err = cmd.OutOrStdout().Write(data)
				return err
			}
			data, err = app.ExportDefinitions(merged, vhost)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(append(data, '\n'))
			return err
		},
	}
	topologyFlags(cmd, &files)
	cmd.Flags().StringVar(&format, "format", "rabbitmq-definitions", "output format: rabbitmq-definitions or asyncapi")
	cmd.Flags().StringVar(&vhost, "vhost", "/", "RabbitMQ virtual host of the exchanges and queues")
	return cmd
}
