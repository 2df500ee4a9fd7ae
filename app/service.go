// Package app is eventpipe's composition root: it turns a config.Config into a
// running service — the broker picked by broker.kind, the shared dependencies
// every spec gets (spec.Deps), the enabled specs' parts (modules.go lists the
// specs), the router with the one middleware chain, the admin HTTP server — and
// owns their start and graceful stop. It is the only package that imports both
// config and the broker adapters; this file names no spec.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/cenkalti/backoff/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/eventpipe/eventpipe/app/auth"
	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/routing"
	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/llm"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/spec"
	"github.com/eventpipe/eventpipe/app/telemetry"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/config"
	"github.com/eventpipe/eventpipe/middleware"
	"github.com/eventpipe/eventpipe/migrations"
)

// Service is eventpipe assembled from configuration. Build it with New, run it
// with Run; Run's return is the end of its life.
type Service struct {
	cfg    config.Config
	logger *slog.Logger
	broker broker.PubSub
	// publisher is broker with topic routing and a producer span per
	// message (telemetry).
	publisher      message.Publisher
	tracerShutdown func(context.Context) error
	db             *pgxpool.Pool // nil unless postgres.dsn is set
	router         *message.Router
	routes         route.Set
	registry       *prometheus.Registry
	admin          net.Listener // nil when admin.addr is ""
	// specs are the enabled specs' built parts, in Modules order.
	specs []builtSpec
	// inbox is the processed-messages store every spec shares.
	inbox inbox.Store
	// verifier verifies the admin endpoints' JWTs; nil when none is
	// configured.
	verifier *auth.Verifier
	// drain ends in-flight handlers' contexts; cancelled when the shutdown
	// timeout is over (middleware.Drain).
	drain       context.Context
	cancelDrain context.CancelFunc
	// running counts the handlers in flight, for the shutdown to wait for
	// the ones it cancelled.
	running middleware.Running
	// top is the enabled specs' topology; counts its queues' latest
	// counts (the queue gauges, the console).
	top    topology.Topology
	counts *queueCounts
	// consoleJobs runs the console's redrives; nil without an admin
	// server.
	consoleJobs *consoleJobs
}

// builtSpec is one enabled spec's parts and the listeners of its servers.
type builtSpec struct {
	name      string
	parts     spec.Parts
	listeners []net.Listener // parallel to parts.Servers
}

// New connects to the broker (retrying while it is unreachable, until ctx
// ends or serve.connect_timeout passes) and to the database when one is
// configured, builds the enabled specs and wires the router. Nothing is
// consumed before Run. A spec that cannot be built is a *spec.BuildError.
func New(ctx context.Context, cfg config.Config, logger *slog.Logger) (*Service, error) {
	return newService(ctx, cfg, logger, Modules())
}

func newService(ctx context.Context, cfg config.Config, logger *slog.Logger, modules []spec.Module) (*Service, error) {
	s := &Service{cfg: cfg, logger: logger, registry: prometheus.NewRegistry()}
	s.drain, s.cancelDrain = context.WithCancel(context.WithoutCancel(ctx))
	s.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	tp, tracerShutdown, err := telemetry.Setup(ctx, telemetry.Config{
		Exporter:    cfg.Telemetry.Exporter,
		Endpoint:    cfg.Telemetry.Endpoint,
		ServiceName: cfg.Telemetry.ServiceName,
		SampleRatio: cfg.Telemetry.SampleRatio,
	}, os.Stdout)
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	s.tracerShutdown = tracerShutdown

	top, err := SpecTopology(cfg)
	if err != nil {
		_ = tracerShutdown(ctx)
		return nil, err
	}
	// Before any connection: a token configuration serve refuses should
	// not wait for a broker first.
	if s.verifier, err = newVerifier(cfg, os.Getenv, logger); err != nil {
		_ = tracerShutdown(ctx)
		return nil, err
	}
	// The database first: the broker keeps RabbitMQ's attempt ledger in it.
	if cfg.Postgres.DSN != "" {
		if s.db, err = openDatabase(ctx, cfg, logger); err != nil {
			s.closeVerifier()
			_ = tracerShutdown(ctx)
			return nil, err
		}
	}
	ps, err := newBroker(ctx, cfg, logger, s.db)
	if err != nil {
		if s.db != nil {
			s.db.Close()
		}
		s.closeVerifier()
		_ = tracerShutdown(ctx)
		return nil, err
	}
	s.broker = ps
	// The queue gauges and the console count through the broker, at most
	// every few seconds.
	s.top = top
	s.counts = newQueueCounts(ps, top, cfg.Broker.Kind, logger)
	s.registry.MustRegister(s.counts)
	for _, q := range uncountedCrashQueues(cfg, top) {
		logger.Warn("a message that kills its consumer every time is redelivered forever on this queue: it is an ordered (FIFO) classic RabbitMQ queue, whose crash redeliveries only the attempt ledger in PostgreSQL counts, and postgres.dsn is not set; set rabbitmq.queue_type: quorum (the broker counts them) or postgres.dsn",
			slog.String("queue", q))
	}
	routed, err := NewPublisher(cfg, ps, top)
	if err != nil {
		s.closeResources()
		return nil, err
	}
	s.publisher = middleware.TracingPublisher(routed, tp, middleware.MessagingSystem(cfg.Broker.Kind))
	deps, err := s.sharedDeps(top)
	if err != nil {
		s.closeResources()
		return nil, err
	}
	s.inbox = deps.Inbox
	if err := s.buildSpecs(ctx, deps, modules); err != nil {
		s.closeResources()
		return nil, err
	}

	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: cfg.Serve.ShutdownTimeout}, watermillLogger(logger))
	if err != nil {
		s.closeResources()
		return nil, fmt.Errorf("router: %w", err)
	}
	chain := middleware.Deps{
		Logger:    logger,
		Metrics:   middleware.NewMetrics(s.registry),
		Publisher: s.publisher,
		NackDelay: NacksWithDelay(ps),
		Tracer:    tp,
		Drain:     s.drain,
		Running:   &s.running,
		// A crash-looped message that was processed is acked, not
		// dead-lettered.
		Inbox: s.inbox,
		// messaging.system on every consumer span.
		MessagingSystem: cfg.Broker.Kind,
	}
	// The router closes a handler's subscriber when it stops; the broker is
	// shared by every route and by the handlers still draining, so the
	// router gets one it cannot close (closeResources closes the broker last).
	sub := unclosable{ps}
	for _, r := range s.routes {
		if limit := cfg.Serve.MaxConcurrency; limit > 0 && (r.Concurrency == 0 || r.Concurrency > limit) {
			r.Concurrency = limit
		}
		if err := AddRoute(router, sub, chain, r); err != nil {
			s.closeResources()
			return nil, err
		}
	}
	s.router = router

	if cfg.Admin.Addr != "" {
		l, err := net.Listen("tcp", cfg.Admin.Addr)
		if err != nil {
			s.closeResources()
			return nil, fmt.Errorf("admin: listen on %s: %w", cfg.Admin.Addr, err)
		}
		s.admin = l
	}
	return s, nil
}

// openDatabase opens the pool and applies the migrations when
// postgres.migrate is on. While the database cannot be reached (it is
// starting, restarting, or the network is down) it logs and retries with
// exponential backoff (capped at 10 s between tries) until ctx ends or
// serve.connect_timeout passes (0 = no limit), as NewBroker does for the
// broker; any other error (a refused login, a failed migration) ends it at
// once.
func openDatabase(ctx context.Context, cfg config.Config, logger *slog.Logger) (*pgxpool.Pool, error) {
	pool, err := pgxpool.New(ctx, cfg.Postgres.DSN)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if !cfg.Postgres.Migrate {
		return pool, nil
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 500 * time.Millisecond
	b.MaxInterval = 10 * time.Second
	applied, err := backoff.Retry(ctx, func() ([]migrations.Result, error) {
		applied, err := migrations.Up(ctx, pool, cfg.Postgres.Schema)
		if err != nil && !unreachable(err) {
			return nil, backoff.Permanent(err)
		}
		return applied, err
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(cfg.Serve.ConnectTimeout),
		backoff.WithNotify(func(err error, next time.Duration) {
			logger.Warn("database unreachable, retrying", slog.Duration("retry_in", next.Round(time.Millisecond)), slog.Any("error", err))
		}))
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: migrate schema %s: %w", cfg.Postgres.Schema, err)
	}
	for _, m := range applied {
		logger.Info("migration applied", slog.String("schema", cfg.Postgres.Schema), slog.Int64("version", m.Version), slog.String("name", m.Name))
	}
	return pool, nil
}

// sharedDeps decides once what every spec shares: with a database, the inbox
// and the outbox are its tables (the outbox row commits with the business
// change, a relay publishes it); without one, their memory twins (published
// right after the in-memory commit). Either way what is written is held to
// the strict JSON Schemas first (strictOutgoing).
func (s *Service) sharedDeps(top topology.Topology) (spec.Deps, error) {
	d := spec.Deps{
		Config:    s.cfg,
		Topology:  top,
		Publisher: s.publisher,
		Broker:    s.broker,
		DB:        s.db,
		LLM: llm.Config{
			BaseURL:   s.cfg.LLM.BaseURL,
			Model:     s.cfg.LLM.Model,
			APIKeyEnv: s.cfg.LLM.APIKeyEnv,
			Timeout:   s.cfg.LLM.Timeout,
		},
		Verifier:   s.verifier,
		Getenv:     os.Getenv,
		Logger:     s.logger,
		Registerer: s.registry,
		Now:        time.Now,
	}
	check, err := strictOutgoing(top)
	if err != nil {
		return spec.Deps{}, err
	}
	if s.db == nil {
		d.Inbox, d.Outbox = inbox.NewMemory(), outbox.Checked(outbox.AfterCommit{Publisher: s.publisher}, check)
		return d, nil
	}
	ib, err := inbox.NewPostgres(s.db, s.cfg.Postgres.Schema)
	if err != nil {
		return spec.Deps{}, err
	}
	d.Inbox, d.Outbox = ib, outbox.Checked(outbox.TxWriter{Table: outbox.Table{Schema: s.cfg.Postgres.Schema}}, check)
	return d, nil
}

// buildSpecs builds every enabled spec, opens its servers' listeners and
// collects its routes, each route's policy adjusted to its queue's declaration
// in the topology.
func (s *Service) buildSpecs(ctx context.Context, d spec.Deps, modules []spec.Module) error {
	for _, m := range modules {
		if !m.Enabled(s.cfg) {
			continue
		}
		parts, err := m.Build(ctx, d)
		if err != nil {
			return &spec.BuildError{Spec: m.Name, Err: err}
		}
		b := builtSpec{name: m.Name, parts: parts}
		s.specs = append(s.specs, b) // closed by closeResources from here on
		for _, srv := range parts.Servers {
			l, err := net.Listen("tcp", srv.Addr)
			if err != nil {
				return fmt.Errorf("spec %s: %s: listen on %s: %w", m.Name, srv.Name, srv.Addr, err)
			}
			s.specs[len(s.specs)-1].listeners = append(s.specs[len(s.specs)-1].listeners, l)
		}
		for _, r := range parts.Routes {
			if q, ok := d.Topology.Queue(r.Queue); ok {
				p, err := r.EffectivePolicy().ForQueue(q)
				if err != nil {
					return &spec.BuildError{Spec: m.Name, Err: fmt.Errorf("route %s: %w", r.Name, err)}
				}
				r.Policy = p
			}
			if err := checkInboxTTL(s.cfg.Inbox.TTL, r, d.Topology); err != nil {
				return &spec.BuildError{Spec: m.Name, Err: err}
			}
			s.routes = append(s.routes, r)
		}
	}
	return nil
}

// checkInboxTTL refuses an inbox.ttl that a redelivery of r could outlive: a
// marker deleted before the last redelivery of its message lets that
// redelivery take effect a second time. The window is every attempt's
// handler timeout plus the longest wait before the next one (the backoff cap,
// or the queue's visibility timeout when the broker redelivers).
func checkInboxTTL(ttl time.Duration, r route.Route, top topology.Topology) error {
	p := r.EffectivePolicy()
	wait := p.Backoff.Max
	if q, ok := top.Queue(r.Queue); ok {
		wait = max(wait, q.VisibilityTimeout)
	}
	window := time.Duration(p.MaxAttempts) * (r.EffectiveTimeout() + wait)
	if ttl <= window {
		return fmt.Errorf("route %s: inbox.ttl %s does not outlive its redelivery window %s (%d attempts × (timeout %s + wait %s)): raise inbox.ttl",
			r.Name, ttl, window, p.MaxAttempts, r.EffectiveTimeout(), wait)
	}
	return nil
}

// AddRoute adds r to router, consuming from sub up to r.Concurrency messages
// at once (broker.Concurrently), with the one middleware chain
// (middleware.Chain) and the route's policy.
func AddRoute(router *message.Router, sub message.Subscriber, deps middleware.Deps, r route.Route) error {
	policy := r.EffectivePolicy()
	if err := policy.Validate(); err != nil {
		return fmt.Errorf("route %s: policy: %w", r.Name, err)
	}
	if r.Concurrency < 0 {
		return fmt.Errorf("route %s: concurrency %d is below 0", r.Name, r.Concurrency)
	}
	router.AddConsumerHandler(r.Name, r.Queue, broker.Concurrently(sub, r.Concurrency), r.Handle).AddMiddleware(middleware.Chain(deps, r)...)
	return nil
}

// unclosable is a subscriber whose Close does nothing: the router's handlers
// close their subscriber as they stop, which would close the shared broker
// under the handlers still running and the publishes they still make.
type unclosable struct{ message.Subscriber }

// Close does nothing; the service closes the broker after the drain.
func (unclosable) Close() error { return nil }

// NacksWithDelay reports whether ps delays nacked messages itself
// (broker.NackDelayer), for middleware.Deps.
func NacksWithDelay(ps broker.PubSub) bool {
	nd, ok := ps.(broker.NackDelayer)
	return ok && nd.NacksWithDelay()
}

// NewPublisher returns the publisher handlers and producers use on ps: topics
// "<exchange>/<routing-key>" are routed by top's bindings (natively on
// RabbitMQ), queue names go straight to the queue.
func NewPublisher(cfg config.Config, ps message.Publisher, top topology.Topology) (message.Publisher, error) {
	if len(top.Exchanges) == 0 {
		return ps, nil
	}
	if cfg.Broker.Kind == config.KindRabbitMQ {
		return routing.NewNative(ps, top)
	}
	return routing.New(ps, top)
}

// Publisher is the service's broker, for producers running beside the router.
func (s *Service) Publisher() message.Publisher { return s.publisher }

// ServerAddr is the address the spec server named name listens on ("" when
// no enabled spec runs one by that name).
func (s *Service) ServerAddr(name string) string {
	for _, b := range s.specs {
		for i, srv := range b.parts.Servers {
			if srv.Name == name && i < len(b.listeners) {
				return b.listeners[i].Addr().String()
			}
		}
	}
	return ""
}

// AdminAddr is the address the admin server listens on ("" when disabled).
func (s *Service) AdminAddr() string {
	if s.admin == nil {
		return ""
	}
	return s.admin.Addr().String()
}

// cancelledHandlerGrace is how long shutdown waits for the handlers it
// cancelled at serve.shutdown_timeout to return and settle their messages.
const cancelledHandlerGrace = 5 * time.Second

// Run consumes until ctx ends, then drains in order: intake stops — the
// specs' intake servers (gateways) first, then the router's — and in-flight
// messages finish (up to serve.shutdown_timeout); then the specs' workers
// stop; then the other HTTP servers, the broker and the database close. It
// returns nil after a clean shutdown, also when handlers still running at
// the shutdown timeout were cancelled (logged; their messages are nacked and
// delivered again), and an error when a cancelled handler does not return.
func (s *Service) Run(ctx context.Context) error {
	servers, err := s.startServers(ctx)
	if err != nil {
		s.closeResources()
		return err
	}

	// The router runs on a context that shutdown does not cancel: cancelling
	// it would cancel the in-flight messages too. Shutdown closes it instead.
	routerErr := make(chan error, 1)
	go func() { routerErr <- s.router.Run(context.WithoutCancel(ctx)) }()

	select {
	case <-s.router.Running():
		s.logger.Info("eventpipe running",
			slog.String("broker", s.cfg.Broker.Kind),
			slog.Any("queues", s.routes.Queues()))
	case err := <-routerErr:
		servers.shutdown()
		s.closeResources()
		return fmt.Errorf("router: %w", err)
	}

	// One group for every spec's workers. They stop after the router
	// drained, before the broker closes, so a relay's last batch is
	// published or left for the next relay, never cut mid-way.
	workersCtx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	var workers errgroup.Group
	for _, w := range s.workers() {
		workers.Go(func() error {
			if err := w.Run(workersCtx); err != nil && workersCtx.Err() == nil {
				s.logger.Error("worker stopped", slog.String("worker", w.Name), slog.Any("error", err))
			}
			return nil
		})
	}

	var runErr error
	select {
	case <-ctx.Done():
		s.logger.Info("shutting down: stopping intake, finishing in-flight messages",
			slog.Duration("timeout", s.cfg.Serve.ShutdownTimeout))
		// The specs' gateways first: what they accept after this would be
		// enqueued behind a router that no longer consumes.
		servers.shutdownIntake()
		// Close stops intake and waits up to serve.shutdown_timeout for the
		// in-flight handlers, whose contexts live on until then (their
		// publishes still go out: the broker stays open).
		timedOut := s.router.Close() != nil
		if timedOut {
			s.logger.Warn("shutdown timeout passed with messages still being handled: cancelling their handlers; the messages go back to their queues and are delivered again",
				slog.Int64("handlers", s.running.Count()), slog.Duration("timeout", s.cfg.Serve.ShutdownTimeout))
		}
		s.cancelDrain()
		if timedOut {
			// Their nacks (and the broker's redelivery) need the broker
			// open: it closes only once they returned, or after the grace.
			grace, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelledHandlerGrace)
			if !s.running.Wait(grace) {
				runErr = fmt.Errorf("shutdown: %d handler(s) still running %s after their cancellation (a handler that ignores its context); their messages are redelivered once the broker sees this process gone",
					s.running.Count(), cancelledHandlerGrace)
			}
			cancel()
		}
		if err := <-routerErr; err != nil && runErr == nil {
			runErr = fmt.Errorf("router: %w", err)
		}
	case err := <-routerErr:
		// Every handler stopped on its own (e.g. a subscription ended).
		if err != nil {
			runErr = fmt.Errorf("router: %w", err)
		} else {
			runErr = errors.New("router stopped unexpectedly")
		}
	}

	stopWorkers()
	_ = workers.Wait()
	servers.shutdown()
	s.closeResources()
	if runErr == nil {
		s.logger.Info("eventpipe stopped cleanly")
	}
	return runErr
}

// workers are the enabled specs' workers, plus the database's (outbox relay,
// retention, inbox cleanup) when outbox.relay is on. The inbox is cleaned
// whatever the relay does (StackUp §6: processed_messages rows older than
// 24 h go), by the relay's workers or by a janitor of its own.
func (s *Service) workers() []spec.Worker {
	var ws []spec.Worker
	relay := s.db != nil && s.cfg.Outbox.Relay
	if relay {
		ws = append(ws, spec.Worker{Name: "outbox relay", Run: func(ctx context.Context) error {
			return RunOutbox(ctx, s.cfg, s.db, s.publisher, s.registry, s.logger)
		}})
	}
	if !relay && s.inbox != nil {
		// Without the relay's workers (the embedded mode's inbox in memory,
		// or a database whose relay runs elsewhere) the inbox would grow
		// with every message handled.
		janitor := inbox.Janitor{Store: s.inbox, TTL: s.cfg.Inbox.TTL, Logger: s.logger}
		ws = append(ws, spec.Worker{Name: "inbox janitor", Run: janitor.Run})
	}
	for _, b := range s.specs {
		ws = append(ws, b.parts.Workers...)
	}
	if s.consoleJobs != nil {
		// Stopped with the workers: before the broker closes.
		ws = append(ws, spec.Worker{Name: "console actions", Run: s.consoleJobs.Run})
	}
	return ws
}

// RunOutbox runs, until ctx ends, what the database needs in the background:
// the outbox relay publishing to pub (outbox.* settings), the retention of
// published rows, and the cleanup of inbox markers older than inbox.ttl. serve
// runs it when outbox.relay is on; `eventpipe relay` runs it alone. reg may be
// nil.
func RunOutbox(ctx context.Context, cfg config.Config, pool *pgxpool.Pool, pub message.Publisher, reg prometheus.Registerer, logger *slog.Logger) error {
	store, err := inbox.NewPostgres(pool, cfg.Postgres.Schema)
	if err != nil {
		return err
	}
	return outbox.RunWorkers(ctx, pool, pub, outbox.WorkersConfig{
		Relay: outbox.RelayConfig{
			Schema:       cfg.Postgres.Schema,
			BatchSize:    cfg.Outbox.BatchSize,
			PollInterval: cfg.Outbox.PollInterval,
			MaxAttempts:  cfg.Outbox.MaxAttempts,
			Registerer:   reg,
		},
		Retention: cfg.Outbox.Retention,
		Inbox:     store,
		InboxTTL:  cfg.Inbox.TTL,
	}, logger)
}

// runningServers are the HTTP servers Run started.
type runningServers struct {
	wait    func() error
	servers []*http.Server
	// before[i] runs before servers[i] shuts down; nil for none.
	before []func()
	// intake[i] marks servers[i] as a spec.Server.Intake; down[i] that it
	// was shut down.
	intake, down []bool
}

// startServers starts the admin server and the specs' servers, after each
// spec's Start hook, so that nothing is consumed before a spec is ready.
func (s *Service) startServers(ctx context.Context) (*runningServers, error) {
	var g errgroup.Group
	rs := &runningServers{wait: g.Wait}
	serve := func(name string, srv *http.Server, l net.Listener, before func(), intake bool) {
		rs.servers, rs.before = append(rs.servers, srv), append(rs.before, before)
		rs.intake, rs.down = append(rs.intake, intake), append(rs.down, false)
		g.Go(func() error {
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.logger.Error("http server stopped", slog.String("server", name), slog.Any("error", err))
			}
			return nil
		})
		s.logger.Info("http server listening", slog.String("server", name), slog.String("addr", l.Addr().String()))
	}
	if s.admin != nil {
		serve("admin", &http.Server{Handler: s.adminHandler(), ReadHeaderTimeout: 5 * time.Second}, s.admin, nil, false)
	}
	for _, b := range s.specs {
		if b.parts.Start != nil {
			if err := b.parts.Start(ctx); err != nil {
				rs.shutdown()
				return nil, fmt.Errorf("spec %s: start: %w", b.name, err)
			}
		}
		for i, srv := range b.parts.Servers {
			// No WriteTimeout: a spec's server may stream; handlers set
			// their own deadlines per write.
			serve(srv.Name, &http.Server{Handler: srv.Handler, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute},
				b.listeners[i], srv.BeforeShutdown, srv.Intake)
		}
	}
	return rs, nil
}

// shutdownIntake ends the intake servers (spec.Server.Intake), as shutdown
// does.
func (rs *runningServers) shutdownIntake() {
	for i := range rs.servers {
		if rs.intake[i] {
			rs.shutdownOne(i)
		}
	}
}

// shutdown ends every server still running, the intake servers first.
func (rs *runningServers) shutdown() {
	rs.shutdownIntake()
	for i := range rs.servers {
		rs.shutdownOne(i)
	}
	_ = rs.wait()
}

// closeVerifier stops the verifier's key-set refreshes.
func (s *Service) closeVerifier() {
	if s.verifier != nil {
		s.verifier.Close()
	}
}

// shutdownOne ends servers[i] once, after its BeforeShutdown hook, waiting at
// most 5 s for its requests.
func (rs *runningServers) shutdownOne(i int) {
	if rs.down[i] {
		return
	}
	rs.down[i] = true
	if rs.before[i] != nil {
		rs.before[i]()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = rs.servers[i].Shutdown(ctx)
	cancel()
}

func (s *Service) closeResources() {
	s.cancelDrain()
	for _, b := range s.specs {
		for _, l := range b.listeners {
			_ = l.Close()
		}
	}
	if s.admin != nil {
		_ = s.admin.Close()
	}
	if err := s.broker.Close(); err != nil {
		s.logger.Warn("broker close", slog.Any("error", err))
	}
	for i := len(s.specs) - 1; i >= 0; i-- {
		if c := s.specs[i].parts.Close; c != nil {
			c()
		}
	}
	if c, ok := s.inbox.(interface{ Close() }); ok {
		c.Close()
	}
	if s.db != nil {
		s.db.Close()
	}
	s.closeVerifier()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.tracerShutdown(ctx); err != nil {
		s.logger.Warn("tracer shutdown", slog.Any("error", err))
	}
}

// unreachable reports whether err says the database could not be reached or
// is not taking connections now (starting up, shutting down, too many
// connections): worth another try, unlike a refused login or a failed
// statement.
func unreachable(err error) bool {
	var ce *pgconn.ConnectError
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe):
		// 08: connection exception; 57P01..57P03: admin shutdown, crash
		// shutdown, cannot connect now; 53300: too many connections.
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03" || pe.Code == "53300"
	case errors.As(err, &ce):
		var inner *pgconn.PgError
		if errors.As(ce.Unwrap(), &inner) {
			return unreachable(inner)
		}
		return true // dial, TLS, DNS: the network
	default:
		return pgconn.Timeout(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
	}
}
