package stackup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/spec"
	"github.com/eventpipe/eventpipe/config"
	"github.com/eventpipe/eventpipe/handlers/realtime"
	"github.com/eventpipe/eventpipe/handlers/realtime/pgnotify"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/core"
	"github.com/eventpipe/eventpipe/handlers/stackup/internalapi"
)

// Module is the StackUp Core ↔ AI contract with the roles stackup.roles
// names: core, ai-worker and realtime (the SSE server and its fan-out bus),
// without AWS adapters: stackup.processors real needs NewModule's.
var Module = NewModule(Adapters{})

// NewModule is Module with the AWS adapters the composition root passes.
func NewModule(a Adapters) spec.Module {
	return spec.Module{
		Name:         "stackup",
		Enabled:      func(c config.Config) bool { return c.StackUp.Enabled },
		Topology:     "stackup",
		Catalog:      CatalogRoutes,
		Build:        func(ctx context.Context, d spec.Deps) (spec.Parts, error) { return build(ctx, d, a) },
		FanoutTopics: fanoutTopics,
		Commands:     commands,
	}
}

// fanoutTopics are the topics every instance must receive: with the realtime
// role on RabbitMQ,
// every instance receives every notification on a queue of its own
// (decision 0012).
func fanoutTopics(cfg config.Config) []string {
	if realtimeEnabled(cfg) && realtimeFanout(cfg) == "rabbitmq" {
		return []string{realtime.FanoutTopic}
	}
	return nil
}

// build builds the spec. Core's state lives in PostgreSQL when the
// service has a database (requests go through the transactional outbox, a
// relay publishes them), else in memory (published after the in-memory
// commit).
func build(ctx context.Context, d spec.Deps, a Adapters) (spec.Parts, error) {
	c := d.Config.StackUp
	roles, err := ParseRoles(c.Roles)
	if err != nil {
		return spec.Parts{}, err
	}
	var parts spec.Parts
	deps := Deps{
		Topology:  d.Topology,
		Publisher: d.Publisher,
		Inbox:     d.Inbox,
		Outbox:    d.Outbox,
		AIQueues:  ParseQueues(c.AIQueues),
		Logger:    d.Logger,
		Retry: catalog.Retry{
			MaxAttempts: c.MaxAttempts,
			Backoff:     route.Backoff{Initial: c.BackoffInitial, Multiplier: 2, Max: c.BackoffMax, Jitter: 0.2},
		},
	}
	if roles.Realtime {
		srv, closeBus, err := newRealtime(ctx, d)
		if err != nil {
			return spec.Parts{}, err
		}
		deps.Sink = srv.Sink()
		parts.Start = srv.Start
		parts.Close = closeBus
		// No write timeout: streams are long; the handler sets a deadline
		// per write. Close ends the streams, which Shutdown would wait for.
		parts.Servers = []spec.Server{{Name: "realtime", Addr: d.Config.Realtime.Addr, Handler: srv.Handler(),
			BeforeShutdown: func() { _ = srv.Close() }}}
	}
	fail := func(err error) (spec.Parts, error) {
		if parts.Close != nil {
			parts.Close()
		}
		return spec.Parts{}, err
	}
	if roles.AIWorker {
		switch c.Processors {
		case ProcessorsReal:
			deps.Processors, err = NewRealProcessors(ctx, d, a)
		default:
			deps.Processors, err = NewProcessors(c.Processors, d.LLM)
		}
		if err != nil {
			return fail(err)
		}
		if c.Processors == ProcessorsSample && d.Logger != nil {
			d.Logger.Warn("stackup ai-worker: sample processors selected (stackup.processors=sample): stand-ins, no model, storage or GitHub; not for production")
		}
	}
	if d.DB != nil {
		if deps.Store, err = core.NewPostgres(d.DB, d.Config.Postgres.Schema); err != nil {
			return fail(err)
		}
	} else {
		deps.Store = core.NewMemory()
	}
	h, err := New(roles, deps)
	if err != nil {
		return fail(err)
	}
	if roles.Core {
		// Core's internal API (§10), when its key is set.
		internal, err := internalapi.Servers(d)
		if err != nil {
			return fail(err)
		}
		parts.Servers = append(parts.Servers, internal...)
	}
	parts.Routes = h.Routes()
	if c.SampleInterval > 0 {
		parts.Workers = []spec.Worker{{Name: "stackup sample traffic", Run: func(ctx context.Context) error {
			return SampleTraffic(ctx, h, c.SampleInterval, d.Logger)
		}}}
	}
	return parts, nil
}

// realtimeEnabled reports whether cfg runs the StackUp spec with the realtime
// role, which serves the SSE streams.
func realtimeEnabled(cfg config.Config) bool {
	if !cfg.StackUp.Enabled {
		return false
	}
	roles, err := ParseRoles(cfg.StackUp.Roles)
	return err == nil && roles.Realtime
}

// realtimeFanout is the bus that carries events between instances
// (decision 0012).
func realtimeFanout(cfg config.Config) string {
	if f := cfg.Realtime.Fanout; f != "auto" {
		return f
	}
	switch cfg.Broker.Kind {
	case config.KindRabbitMQ:
		return "rabbitmq"
	case config.KindSQS, config.KindPostgres:
		return "postgres"
	}
	return "none" // memory: every subscription gets every notification
}

// newRealtime builds the RealTime server and its bus; closeBus releases the
// bus.
func newRealtime(ctx context.Context, d spec.Deps) (srv *realtime.Server, closeBus func(), err error) {
	c := d.Config.Realtime
	secret := d.Getenv(c.TokenSecretEnv)
	if len(secret) < realtime.MinSecretLen {
		return nil, nil, fmt.Errorf("realtime: $%s must hold a token secret of at least %d bytes", c.TokenSecretEnv, realtime.MinSecretLen)
	}
	var bus realtime.Bus
	closeBus = func() {}
	switch realtimeFanout(d.Config) {
	case "rabbitmq":
		bus = realtime.WatermillBus{Publisher: d.Broker, Subscriber: d.Broker, Logger: d.Logger}
	case "postgres":
		b, err := pgnotify.New(ctx, pgnotify.Config{DSN: d.Config.Postgres.DSN, Channel: c.NotifyChannel, Logger: d.Logger})
		if err != nil {
			return nil, nil, err
		}
		bus, closeBus = b, b.Close
	}
	var origins []string
	for _, o := range strings.Split(c.AllowedOrigins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			origins = append(origins, o)
		}
	}
	srv, err = realtime.New(realtime.Config{
		Verifier:       realtime.HMACVerifier{Secret: []byte(secret)},
		Bus:            bus,
		Registerer:     d.Registerer,
		Logger:         d.Logger,
		WindowSize:     c.Window,
		WindowBytes:    c.WindowBytes,
		WindowTTL:      c.WindowTTL,
		ClientBuffer:   c.ClientBuffer,
		Heartbeat:      c.Heartbeat,
		MaxDataBytes:   c.MaxDataBytes,
		AllowedOrigins: origins,
	})
	if err != nil {
		closeBus()
		return nil, nil, err
	}
	return srv, closeBus, nil
}

// commands are the spec's own: `eventpipe realtime token` and `eventpipe
// stackup github-token set`.
func commands(env spec.CommandEnv) []*cobra.Command {
	cmd := &cobra.Command{
		Use:   "realtime",
		Short: "Tools for the StackUp RealTime SSE server",
	}
	var (
		user      int64
		sessions  []int64
		documents []int64
		ttl       time.Duration
	)
	token := &cobra.Command{
		Use:   "token",
		Short: "Mint a bearer token for the SSE streams (what Core does for a signed-in user)",
		Long: `token prints a bearer token for the realtime SSE streams, signed with the secret in
the environment variable named by realtime.token_secret_env: the user's own
channel, plus the sessions and documents listed, until --ttl from now.`,
		Example: `  eventpipe realtime token --user 1 --session 7 --ttl 15m
  curl -N -H "Authorization: Bearer $(eventpipe realtime token --user 1 --session 7)" \
    http://127.0.0.1:8080/realtime/sessions/7`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if user <= 0 {
				return spec.UsageError{Err: errors.New("--user is required")}
			}
			if ttl <= 0 {
				return spec.UsageError{Err: errors.New("--ttl must be more than 0s")}
			}
			cfg, err := env.Load()
			if err != nil {
				return err
			}
			secret := env.Getenv(cfg.Realtime.TokenSecretEnv)
			if len(secret) < realtime.MinSecretLen {
				return spec.UsageError{Err: fmt.Errorf("$%s must hold a token secret of at least %d bytes", cfg.Realtime.TokenSecretEnv, realtime.MinSecretLen)}
			}
			tok, err := realtime.MintToken([]byte(secret), realtime.Claims{
				UserID:    user,
				Sessions:  sessions,
				Documents: documents,
				Expires:   time.Now().Add(ttl).Unix(),
			})
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), tok)
			return err
		},
	}
	token.Flags().Int64Var(&user, "user", 0, "user id (the token's subject; required)")
	token.Flags().Int64SliceVar(&sessions, "session", nil, "a session id the user may watch (repeatable)")
	token.Flags().Int64SliceVar(&documents, "document", nil, "a document id the user may watch (repeatable)")
	token.Flags().DurationVar(&ttl, "ttl", 15*time.Minute, "how long the token is valid")
	cmd.AddCommand(token)
	return append([]*cobra.Command{cmd}, internalapi.Commands(env)...)
}
