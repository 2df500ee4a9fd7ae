// Package app is eventpipe's composition root: it turns a config.Config into a
// running service — the broker picked by broker.kind, the router with the one
// middleware chain, the enabled routes, the admin HTTP server — and owns their
// start and graceful stop. It is the only package that imports both config and
// the broker adapters.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/telemetry"
	"github.com/eventpipe/eventpipe/config"
	"github.com/eventpipe/eventpipe/handlers/booking"
	"github.com/eventpipe/eventpipe/handlers/demo"
	"github.com/eventpipe/eventpipe/handlers/disputes"
	"github.com/eventpipe/eventpipe/handlers/interviews"
	"github.com/eventpipe/eventpipe/handlers/joinlink"
	"github.com/eventpipe/eventpipe/handlers/realtime"
	"github.com/eventpipe/eventpipe/handlers/stackup"
	stackuprt "github.com/eventpipe/eventpipe/handlers/stackup/realtime"
	"github.com/eventpipe/eventpipe/middleware"
	"github.com/eventpipe/eventpipe/migrations"
)

// Service is eventpipe assembled from configuration. Build it with New, run it
// with Run; Run's return is the end of its life.
type Service struct {
	cfg    config.Config
	logger *slog.Logger
	broker broker.PubSub
	// publisher is broker with a producer span per message (telemetry).
	publisher      message.Publisher
	tracerShutdown func(context.Context) error
	db             *pgxpool.Pool // nil unless postgres.dsn is set
	router         *message.Router
	routes         route.Set
	registry       *prometheus.Registry
	admin          net.Listener // nil when admin.addr is ""
	// interviews is the interviews spec's store; nil when the spec is off.
	interviews interviews.Store
	// stackup is the StackUp contract's roles; nil when the spec is off.
	stackup *stackup.Handlers
	// disputes is the disputes spec's state; nil when the spec is off.
	disputes *disputesSpec
	// booking and joinlink are those specs' state; nil when off.
	booking  *bookingSpec
	joinlink *joinlinkSpec
	// realtime is the SSE server of the stackup realtime role; nil when off.
	realtime         *realtime.Server
	realtimeLn       net.Listener
	closeRealtimeBus func()
}

// New connects to the broker (retrying while it is unreachable, until ctx
// ends or serve.connect_timeout passes) and to the database when one is
// configured, and wires the router. Nothing is consumed before Run.
func New(ctx context.Context, cfg config.Config, logger *slog.Logger) (*Service, error) {
	s := &Service{cfg: cfg, logger: logger, registry: prometheus.NewRegistry()}
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
	ps, err := NewBroker(ctx, cfg, logger)
	if err != nil {
		_ = tracerShutdown(ctx)
		return nil, err
	}
	s.broker = ps
	routed, err := NewPublisher(cfg, ps, top)
	if err != nil {
		s.closeResources()
		return nil, err
	}
	s.publisher = middleware.TracingPublisher(routed, tp)

	if cfg.Postgres.DSN != "" {
		pool, err := pgxpool.New(ctx, cfg.Postgres.DSN)
		if err != nil {
			s.closeResources()
			return nil, fmt.Errorf("postgres: %w", err)
		}
		s.db = pool
		if cfg.Postgres.Migrate {
			applied, err := migrations.Up(ctx, pool, cfg.Postgres.Schema)
			if err != nil {
				s.closeResources()
				return nil, fmt.Errorf("postgres: migrate schema %s: %w", cfg.Postgres.Schema, err)
			}
			for _, m := range applied {
				logger.Info("migration applied", slog.String("schema", cfg.Postgres.Schema), slog.Int64("version", m.Version), slog.String("name", m.Name))
			}
		}
	}

	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: cfg.Serve.ShutdownTimeout}, watermillLogger(logger))
	if err != nil {
		s.closeResources()
		return nil, fmt.Errorf("router: %w", err)
	}
	deps := middleware.Deps{
		Logger:    logger,
		Metrics:   middleware.NewMetrics(s.registry),
		Publisher: s.publisher,
		NackDelay: NacksWithDelay(ps),
		Tracer:    tp,
	}
	if cfg.Interviews.Enabled {
		if s.interviews, err = newInterviewsStore(cfg, s.db); err != nil {
			s.closeResources()
			return nil, err
		}
	}
	if realtimeEnabled(cfg) {
		if s.realtime, s.closeRealtimeBus, err = newRealtime(ctx, cfg, ps, s.registry, logger); err != nil {
			s.closeResources()
			return nil, err
		}
		if s.realtimeLn, err = net.Listen("tcp", cfg.Realtime.Addr); err != nil {
			s.closeResources()
			return nil, fmt.Errorf("realtime: listen on %s: %w", cfg.Realtime.Addr, err)
		}
	}
	if cfg.StackUp.Enabled {
		var sink stackuprt.Sink
		if s.realtime != nil {
			sink = s.realtime.Sink()
		}
		if s.stackup, err = newStackUp(cfg, top, s.publisher, s.db, sink, logger); err != nil {
			s.closeResources()
			return nil, fmt.Errorf("spec stackup: %w", err)
		}
	}
	if cfg.Disputes.Enabled {
		if s.disputes, err = newDisputes(cfg, s.db, s.publisher, logger); err != nil {
			s.closeResources()
			return nil, err
		}
	}
	if cfg.Booking.Enabled {
		if s.booking, err = newBooking(cfg, s.db); err != nil {
			s.closeResources()
			return nil, err
		}
	}
	if cfg.JoinLink.Enabled {
		if s.joinlink, err = newJoinLink(cfg, s.db, logger); err != nil {
			s.closeResources()
			return nil, err
		}
	}
	s.routes, err = buildRoutes(specDeps{cfg: cfg, publisher: s.publisher, logger: logger, interviews: s.interviews, stackup: s.stackup, disputes: s.disputes, booking: s.booking, joinlink: s.joinlink}, top)
	if err != nil {
		s.closeResources()
		return nil, err
	}
	for _, r := range s.routes {
		if err := AddRoute(router, ps, deps, r); err != nil {
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

// AddRoute adds r to router, consuming from sub, with the one middleware
// chain (middleware.Chain) and the route's policy.
func AddRoute(router *message.Router, sub message.Subscriber, deps middleware.Deps, r route.Route) error {
	policy := r.EffectivePolicy()
	if err := policy.Validate(); err != nil {
		return fmt.Errorf("route %s: policy: %w", r.Name, err)
	}
	router.AddConsumerHandler(r.Name, r.Queue, sub, r.Handle).AddMiddleware(middleware.Chain(deps, r)...)
	return nil
}

// NacksWithDelay reports whether ps delays nacked messages itself
// (broker.NackDelayer), for middleware.Deps.
func NacksWithDelay(ps broker.PubSub) bool {
	nd, ok := ps.(broker.NackDelayer)
	return ok && nd.NacksWithDelay()
}

// Publisher is the service's broker, for producers running beside the router.
func (s *Service) Publisher() message.Publisher { return s.publisher }

// RealtimeAddr is the address the realtime SSE server listens on ("" when
// the stackup realtime role is off).
func (s *Service) RealtimeAddr() string {
	if s.realtimeLn == nil {
		return ""
	}
	return s.realtimeLn.Addr().String()
}

// AdminAddr is the address the admin server listens on ("" when disabled).
func (s *Service) AdminAddr() string {
	if s.admin == nil {
		return ""
	}
	return s.admin.Addr().String()
}

// Run consumes until ctx ends, then shuts down gracefully: intake stops,
// in-flight messages finish (up to serve.shutdown_timeout), then the broker
// and database are closed. It returns nil after a clean shutdown.
func (s *Service) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()

	var adminSrv *http.Server
	if s.admin != nil {
		adminSrv = &http.Server{Handler: s.adminHandler(), ReadHeaderTimeout: 5 * time.Second}
		wg.Go(func() {
			if err := adminSrv.Serve(s.admin); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.logger.Error("admin server stopped", slog.Any("error", err))
			}
		})
		s.logger.Info("admin server listening", slog.String("addr", s.AdminAddr()))
	}

	var realtimeSrv *http.Server
	if s.realtime != nil {
		// Subscribed to the fan-out bus before the router consumes anything.
		if err := s.realtime.Start(ctx); err != nil {
			s.shutdownAdmin(adminSrv)
			s.closeResources()
			return fmt.Errorf("realtime: %w", err)
		}
		// No WriteTimeout: streams are long; the handler sets a deadline
		// per write.
		realtimeSrv = &http.Server{Handler: s.realtime.Handler(), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute}
		wg.Go(func() {
			if err := realtimeSrv.Serve(s.realtimeLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.logger.Error("realtime server stopped", slog.Any("error", err))
			}
		})
		s.logger.Info("realtime SSE server listening", slog.String("addr", s.realtimeLn.Addr().String()))
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
		s.shutdownRealtime(realtimeSrv)
		s.shutdownAdmin(adminSrv)
		s.closeResources()
		return fmt.Errorf("router: %w", err)
	}

	if s.cfg.Demo.Enabled {
		wg.Go(func() { demo.Produce(ctx, s.publisher, s.cfg.Demo.Interval, s.logger) })
	}
	if s.stackup != nil && s.cfg.StackUp.SampleInterval > 0 {
		wg.Go(func() {
			if err := stackup.SampleTraffic(ctx, s.stackup, s.cfg.StackUp.SampleInterval, s.logger); err != nil {
				s.logger.Warn("stackup sample traffic not started", slog.Any("error", err))
			}
		})
	}
	if s.cfg.Interviews.Enabled && s.cfg.Interviews.SampleTraffic {
		wg.Go(func() {
			producer := interviews.NewProducer(s.publisher, s.logger)
			if _, err := interviews.SampleTraffic(ctx, s.interviews, producer, s.logger); err != nil {
				s.logger.Error("interviews sample traffic", slog.Any("error", err))
			}
		})
	}
	if s.disputes != nil && s.cfg.Disputes.SampleTraffic {
		wg.Go(func() {
			if err := disputes.SampleTraffic(ctx, s.disputes.store, s.disputes.objects, s.publisher, s.logger); err != nil {
				s.logger.Error("disputes sample traffic", slog.Any("error", err))
			}
		})
	}
	// The database workers stop before the broker closes, so the relay's last
	// batch is published or left for the next relay, never cut mid-way.
	var workers sync.WaitGroup
	workersCtx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	if s.db != nil && s.cfg.Outbox.Relay {
		workers.Go(func() { s.runDatabaseWorkers(workersCtx) })
	}
	if s.booking != nil && s.cfg.Booking.SampleTraffic {
		wg.Go(func() {
			p := booking.Producer{Publisher: s.publisher, Logger: s.logger}
			if err := booking.SampleTraffic(ctx, p, s.booking.store, s.logger); err != nil {
				s.logger.Error("booking sample traffic", slog.Any("error", err))
			}
		})
	}
	if s.joinlink != nil {
		// The dispatcher publishes: it stops with the workers, before the
		// broker closes.
		if s.cfg.JoinLink.EnableScheduler {
			workers.Go(func() {
				d := &joinlink.Dispatcher{Schedules: s.joinlink.schedules, Publisher: s.publisher, Interval: s.cfg.JoinLink.DispatchInterval, Logger: s.logger}
				_ = d.Run(workersCtx)
			})
		}
		if s.cfg.JoinLink.EnableFallbackCron {
			workers.Go(func() { _ = s.joinlink.service.RunFallback(workersCtx, joinlink.FallbackInterval) })
		}
		if s.cfg.JoinLink.SampleTraffic {
			wg.Go(func() {
				if err := joinlink.SampleTraffic(ctx, s.joinlink.service, s.logger); err != nil {
					s.logger.Error("joinlink sample traffic", slog.Any("error", err))
				}
			})
		}
	}

	var runErr error
	select {
	case <-ctx.Done():
		s.logger.Info("shutting down: stopping intake, finishing in-flight messages",
			slog.Duration("timeout", s.cfg.Serve.ShutdownTimeout))
		if err := s.router.Close(); err != nil {
			runErr = fmt.Errorf("router close: %w", err)
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
	workers.Wait()
	s.shutdownRealtime(realtimeSrv)
	s.shutdownAdmin(adminSrv)
	s.closeResources()
	if runErr == nil {
		s.logger.Info("eventpipe stopped cleanly")
	}
	return runErr
}

// runDatabaseWorkers runs RunOutbox until ctx ends.
func (s *Service) runDatabaseWorkers(ctx context.Context) {
	if err := RunOutbox(ctx, s.cfg, s.db, s.publisher, s.registry, s.logger); err != nil {
		s.logger.Error("outbox relay stopped", slog.Any("error", err))
	}
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

// shutdownRealtime ends the SSE streams (Shutdown would wait for them
// forever), then the server.
func (s *Service) shutdownRealtime(srv *http.Server) {
	if s.realtime == nil {
		return
	}
	_ = s.realtime.Close()
	if srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
}

func (s *Service) shutdownAdmin(srv *http.Server) {
	if srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
}

func (s *Service) closeResources() {
	if s.realtimeLn != nil {
		_ = s.realtimeLn.Close()
	}
	if s.closeRealtimeBus != nil {
		defer s.closeRealtimeBus()
	}
	if err := s.broker.Close(); err != nil {
		s.logger.Warn("broker close", slog.Any("error", err))
	}
	if s.db != nil {
		s.db.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.tracerShutdown(ctx); err != nil {
		s.logger.Warn("tracer shutdown", slog.Any("error", err))
	}
}
