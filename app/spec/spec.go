// Package spec is the contract between the composition root and the specs it
// runs. A spec (handlers/<spec>) is a Module: it says whether a configuration
// enables it, which topology file it consumes and publishes on, which routes it
// validates for `eventpipe publish`, and it builds its Parts — routes,
// background workers, HTTP endpoints and servers — from the one set of shared
// dependencies (Deps) the root hands every spec.
//
// The root holds a list of modules and runs their parts generically, so adding
// a spec is one package under handlers/ and one entry in app/modules.go; the
// root's service names no spec.
package spec

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/eventpipe/eventpipe/app/auth"
	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/llm"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/config"
)

// Module is one spec as the root sees it. Every field but the optional ones
// must be set; the root calls Build only when Enabled says so.
type Module struct {
	// Name names the spec in logs, errors and the CLI ("interviews").
	Name string
	// Enabled reports whether cfg runs the spec.
	Enabled func(cfg config.Config) bool
	// Topology names the spec's topology file (config.TopologyFile), "" for
	// a spec without one.
	Topology string
	// Catalog returns the spec's routes for validation only (`eventpipe
	// publish` checks bodies against them); their handlers are never run.
	Catalog func() route.Set
	// Build builds the enabled spec from the shared dependencies. An error is
	// a configuration the spec cannot run with; the root reports it as a
	// *BuildError naming the spec.
	Build func(ctx context.Context, d Deps) (Parts, error)

	// FanoutTopics, optional, are topics every instance must receive in
	// full (on RabbitMQ, a queue per instance bound to the topic).
	FanoutTopics func(cfg config.Config) []string
	// Commands, optional, are the spec's own commands under `eventpipe`.
	Commands func(env CommandEnv) []*cobra.Command
}

// Deps is what the root builds once and hands every module.
type Deps struct {
	Config config.Config
	// Topology is the merged topology of the enabled specs.
	Topology topology.Topology
	// Publisher publishes queue names and "<exchange>/<routing-key>" topics
	// (routed by Topology's bindings where the broker does not route),
	// with a producer span per message.
	Publisher message.Publisher
	// Broker is the broker connection itself, for a spec that needs to
	// subscribe outside the router (the realtime fan-out bus).
	Broker broker.PubSub
	// DB is the PostgreSQL pool; nil when postgres.dsn is unset (the
	// embedded mode: stores are the memory twins).
	DB *pgxpool.Pool
	// Inbox is the processed-messages store: on DB when there is one, in
	// memory otherwise.
	Inbox inbox.Store
	// Outbox writes messages to publish after the business transaction
	// commits: the outbox table in the transaction (DB set, a relay
	// publishes), or the memory twin that publishes after the in-memory
	// commit (outbox.Unit).
	Outbox outbox.Writer
	// LLM is the OpenAI-compatible client's configuration (the llm
	// section), for specs that call a model.
	LLM llm.Config
	// Verifier verifies the JWTs of the admin endpoints' callers (the
	// principal is the token's sub and roles, decision 0017); nil when
	// admin.token_secret_env names no set variable and admin.token_jwks_url
	// is empty, and then a spec leaves its token-protected endpoints off.
	Verifier *auth.Verifier
	// Getenv reads the process's environment (secrets named by the
	// configuration).
	Getenv func(name string) string
	// Logger is the service's logger.
	Logger *slog.Logger
	// Registerer takes the spec's metrics (served on /metrics).
	Registerer prometheus.Registerer
	// Now is the clock.
	Now func() time.Time
}

// Parts is what a built spec gives the root to run.
type Parts struct {
	// Routes are consumed by the router, each with the one middleware chain;
	// their policies are adjusted to their queues' declarations.
	Routes route.Set
	// Workers run beside the router until the service drains: they are
	// stopped after intake stopped and in-flight handlers finished, before
	// the broker closes (relays, schedulers, sweepers, sample traffic).
	Workers []Worker
	// Endpoints are mounted on the admin HTTP server.
	Endpoints []Endpoint
	// Servers are HTTP servers of the spec's own, each on its own address.
	Servers []Server
	// Start, when set, runs before the router consumes anything (e.g. to
	// subscribe to a fan-out bus first).
	Start func(ctx context.Context) error
	// Close, when set, releases what Build acquired; it runs after
	// everything else stopped, and also when a later spec fails to build.
	Close func()
}

// Worker is a background loop of a spec. Run returns when ctx ends; an error
// it returns is logged.
type Worker struct {
	Name string
	Run  func(ctx context.Context) error
}

// Endpoint is a handler on the admin server under Pattern (http.ServeMux
// syntax).
type Endpoint struct {
	Pattern string
	Handler http.Handler
}

// Server is an HTTP server of a spec on an address of its own.
type Server struct {
	// Name names the server in logs and in Service.ServerAddr.
	Name string
	// Addr is host:port; port 0 picks a free port.
	Addr    string
	Handler http.Handler
	// BeforeShutdown, when set, ends long-lived requests (event streams)
	// before the server shuts down, which would otherwise wait for them.
	BeforeShutdown func()
	// Intake marks a server that takes work in (a gateway that enqueues):
	// serve's drain shuts it down first, before intake from the broker
	// stops, so that nothing is accepted after the drain began. Other
	// servers (event streams, APIs) shut down after the workers stopped.
	Intake bool
}

// CommandEnv is what a module's commands get from the command line.
type CommandEnv struct {
	// Load reads the configuration (--config and EVENTPIPE_*); a problem is
	// a *config.ValidationError or an I/O error.
	Load func() (config.Config, error)
	// Getenv reads the command's environment.
	Getenv func(name string) string
	// WithDB runs f with a pool on postgres.dsn and the schema
	// (postgres.schema) checked; without a DSN it is a usage error.
	WithDB func(ctx context.Context, f func(ctx context.Context, pool *pgxpool.Pool, schema string) error) error
}

// UsageError marks an error of a module's command that is the caller's
// (a bad flag value): the command line exits with its usage code.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// BuildError is a spec that could not be built from the configuration.
type BuildError struct {
	Spec string
	Err  error
}

func (e *BuildError) Error() string { return fmt.Sprintf("spec %s: %v", e.Spec, e.Err) }
func (e *BuildError) Unwrap() error { return e.Err }
