package app

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/routing"
	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/llm"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/config"
	"github.com/eventpipe/eventpipe/handlers/booking"
	"github.com/eventpipe/eventpipe/handlers/demo"
	"github.com/eventpipe/eventpipe/handlers/disputes"
	"github.com/eventpipe/eventpipe/handlers/interviews"
	"github.com/eventpipe/eventpipe/handlers/joinlink"
	"github.com/eventpipe/eventpipe/handlers/stackup"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/core"
	stackuprt "github.com/eventpipe/eventpipe/handlers/stackup/realtime"
)

// spec is one of the specs eventpipe runs: whether the configuration enables
// it, the topology it consumes and publishes on (config/topology/<name>.yaml,
// "" for none), and its routes.
type spec struct {
	name    string
	enabled func(config.Config) bool
	// topology names the shipped topology file; "" for none.
	topology string
	routes   func(d specDeps) (route.Set, error)
	// catalog returns the routes for validation only (`eventpipe publish`):
	// their handlers are never run.
	catalog func() route.Set
}

// specDeps is what a spec's handlers are built from.
type specDeps struct {
	cfg       config.Config
	publisher message.Publisher
	logger    *slog.Logger
	// interviews is the interviews spec's store (newInterviewsStore); nil
	// when the spec is off.
	interviews interviews.Store
	// stackup is the StackUp contract's built roles (newStackUp); nil when
	// the spec is off.
	stackup *stackup.Handlers
	// disputes is the disputes spec's store, inbox and object store
	// (newDisputes); nil when the spec is off.
	disputes *disputesSpec
	// booking and joinlink are those specs' state; nil when off.
	booking  *bookingSpec
	joinlink *joinlinkSpec
}

// specs lists every spec this binary knows, in the order their routes are
// added. A new spec adds itself here (see ARCHITECTURE.md).
func specs() []spec {
	return []spec{
		{
			name:    "demo",
			enabled: func(c config.Config) bool { return c.Demo.Enabled },
			routes: func(d specDeps) (route.Set, error) {
				return demo.Handlers{Publisher: d.publisher, Logger: d.logger}.Routes(), nil
			},
			catalog: func() route.Set { return demo.Handlers{}.Routes() },
		},
		{
			name:     "interviews",
			enabled:  func(c config.Config) bool { return c.Interviews.Enabled },
			topology: "interviews",
			routes: func(d specDeps) (route.Set, error) {
				gen, err := interviewsGenerator(d.cfg, d.logger)
				if err != nil {
					return nil, err
				}
				return interviews.Handlers{
					Store:      d.interviews,
					Publisher:  d.publisher,
					Generator:  gen,
					Logger:     d.logger,
					StaleClaim: d.cfg.Interviews.StaleClaim,
				}.Routes(), nil
			},
			catalog: func() route.Set { return interviews.Handlers{}.Routes() },
		},
		{
			name:     "stackup",
			enabled:  func(c config.Config) bool { return c.StackUp.Enabled },
			topology: "stackup",
			routes:   func(d specDeps) (route.Set, error) { return d.stackup.Routes(), nil },
			catalog:  stackup.CatalogRoutes,
		},
		{
			name:     "disputes",
			enabled:  func(c config.Config) bool { return c.Disputes.Enabled },
			topology: "disputes",
			routes: func(d specDeps) (route.Set, error) {
				h := disputes.Handlers{
					Store:        d.disputes.store,
					Inbox:        d.disputes.inbox,
					Logger:       d.logger,
					AMLThreshold: d.cfg.Disputes.AMLThreshold,
					DefaultTAT:   d.cfg.Disputes.DefaultTAT,
				}
				// Only when set: a nil *MemoryObjects in the interface
				// would count as an object store.
				if d.disputes.objects != nil {
					h.Objects = d.disputes.objects
				}
				return h.Routes(), nil
			},
			catalog: disputes.Catalog,
		},
		{
			name:     "booking",
			enabled:  func(c config.Config) bool { return c.Booking.Enabled },
			topology: "booking",
			routes: func(d specDeps) (route.Set, error) {
				return booking.Handlers{Store: d.booking.store, Inbox: d.booking.inbox, Logger: d.logger}.Routes(), nil
			},
			catalog: booking.Catalog,
		},
		{
			name:     "joinlink",
			enabled:  func(c config.Config) bool { return c.JoinLink.Enabled },
			topology: "joinlink",
			routes: func(d specDeps) (route.Set, error) {
				return joinlink.Handlers{Service: d.joinlink.service, Logger: d.logger}.Routes(), nil
			},
			catalog: joinlink.Catalog,
		},
	}
}

// newInterviewsStore returns the interviews spec's store: PostgreSQL when
// postgres.dsn is set (db non-nil), with report requests written to the
// transactional outbox in the settlement's transaction (a relay publishes
// them: serve's when outbox.relay is on, or `eventpipe relay`); the memory
// store otherwise (the embedded mode: nothing survives a restart).
func newInterviewsStore(cfg config.Config, db *pgxpool.Pool) (interviews.Store, error) {
	if db == nil {
		return interviews.NewMemory(), nil
	}
	store, err := interviews.NewPostgres(db, cfg.Postgres.Schema, interviews.PostgresOptions{Outbox: true})
	if err != nil {
		return nil, fmt.Errorf("interviews: %w", err)
	}
	return store, nil
}

// interviewsGenerator returns the report generator: the LLM client from the
// llm section. Without an API key it is an error, except with
// interviews.sample_traffic, where the built-in sample generator stands in
// so that `make run` needs no account.
func interviewsGenerator(cfg config.Config, logger *slog.Logger) (interviews.ReportGenerator, error) {
	client, err := llm.New(llm.Config{
		BaseURL:   cfg.LLM.BaseURL,
		Model:     cfg.LLM.Model,
		APIKeyEnv: cfg.LLM.APIKeyEnv,
		Timeout:   cfg.LLM.Timeout,
	})
	if err != nil {
		if cfg.Interviews.SampleTraffic {
			logger.Warn("interviews: no LLM configured, reports come from the sample generator",
				slog.String("api_key_env", cfg.LLM.APIKeyEnv), slog.Any("reason", err))
			return interviews.SampleGenerator{}, nil
		}
		return nil, fmt.Errorf("interviews: %w", err)
	}
	return interviews.LLMGenerator{Client: client}, nil
}

// SpecTopology merges the topologies of the specs cfg enables. It has no
// queues when none of them declares a topology.
func SpecTopology(cfg config.Config) (topology.Topology, error) {
	var tops []topology.Topology
	for _, s := range specs() {
		if s.topology == "" || !s.enabled(cfg) {
			continue
		}
		data, err := config.TopologyFile(s.topology)
		if err != nil {
			return topology.Topology{}, err
		}
		t, err := topology.Parse(data)
		if err != nil {
			return topology.Topology{}, fmt.Errorf("spec %s: %w", s.name, err)
		}
		tops = append(tops, t)
	}
	if len(tops) == 0 {
		return topology.Topology{Name: "none"}, nil
	}
	return topology.Merge("eventpipe", tops...)
}

// NewPublisher returns the publisher handlers and producers use on ps: topics
// "<exchange>/<routing-key>" are routed by top's bindings (natively on
// RabbitMQ), queue names go straight to the queue.
func NewPublisher(cfg config.Config, ps broker.PubSub, top topology.Topology) (message.Publisher, error) {
	if len(top.Exchanges) == 0 {
		return ps, nil
	}
	if cfg.Broker.Kind == config.KindRabbitMQ {
		return routing.NewNative(ps, top)
	}
	return routing.New(ps, top)
}

// buildRoutes returns the routes of the specs cfg enables, each with its
// policy adjusted to its queue's declaration in top.
func buildRoutes(d specDeps, top topology.Topology) (route.Set, error) {
	var set route.Set
	for _, s := range specs() {
		if !s.enabled(d.cfg) {
			continue
		}
		rs, err := s.routes(d)
		if err != nil {
			return nil, fmt.Errorf("spec %s: %w", s.name, err)
		}
		for _, r := range rs {
			if q, ok := top.Queue(r.Queue); ok {
				p, err := r.EffectivePolicy().ForQueue(q)
				if err != nil {
					return nil, fmt.Errorf("spec %s: route %s: %w", s.name, r.Name, err)
				}
				r.Policy = p
			}
			set = append(set, r)
		}
	}
	return set, nil
}

// Catalog returns every route this binary knows, enabled or not. `eventpipe
// publish` validates bodies against it; its handlers must not be run.
func Catalog() route.Set {
	var set route.Set
	for _, s := range specs() {
		set = append(set, s.catalog()...)
	}
	return set
}

// newStackUp builds the StackUp roles cfg enables. Core's state, the inbox and
// the outbox live in PostgreSQL when postgres.dsn is set (db non-nil; the relay
// publishes the requests after commit), else in memory (published after the
// in-memory commit). pub must route "<exchange>/<key>" topics (NewPublisher).
//
// sink, when not nil, receives the realtime notifications (the SSE server).
func newStackUp(cfg config.Config, top topology.Topology, pub message.Publisher, db *pgxpool.Pool, sink stackuprt.Sink, logger *slog.Logger) (*stackup.Handlers, error) {
	c := cfg.StackUp
	roles, err := stackup.ParseRoles(c.Roles)
	if err != nil {
		return nil, err
	}
	d := stackup.Deps{
		Topology:  top,
		Publisher: pub,
		Sink:      sink,
		AIQueues:  stackup.ParseQueues(c.AIQueues),
		Logger:    logger,
		Retry: catalog.Retry{
			MaxAttempts: c.MaxAttempts,
			Backoff:     route.Backoff{Initial: c.BackoffInitial, Multiplier: 2, Max: c.BackoffMax, Jitter: 0.2},
		},
	}
	if roles.AIWorker {
		d.Processors, err = stackup.NewProcessors(c.Processors, llm.Config{
			BaseURL:   cfg.LLM.BaseURL,
			Model:     cfg.LLM.Model,
			APIKeyEnv: cfg.LLM.APIKeyEnv,
			Timeout:   cfg.LLM.Timeout,
		})
		if err != nil {
			return nil, err
		}
	}
	if db != nil {
		store, err := core.NewPostgres(db, cfg.Postgres.Schema)
		if err != nil {
			return nil, err
		}
		ib, err := inbox.NewPostgres(db, cfg.Postgres.Schema)
		if err != nil {
			return nil, err
		}
		d.Store, d.Inbox, d.Outbox = store, ib, core.PostgresOutbox{Schema: cfg.Postgres.Schema}
	} else {
		d.Store, d.Inbox, d.Outbox = core.NewMemory(), inbox.NewMemory(), core.AfterCommit{Publisher: pub}
	}
	return stackup.New(roles, d)
}

// disputesSpec is the disputes spec's state (newDisputes).
type disputesSpec struct {
	store disputes.Store
	inbox inbox.Store
	// objects backs the ingest-worker; nil (no ingest-worker route) unless
	// disputes.sample_traffic: there is no S3 client yet.
	objects *disputes.MemoryObjects
}

// newDisputes returns the disputes spec's store and inbox: PostgreSQL when
// postgres.dsn is set (db non-nil), events written to the transactional
// outbox in the business transaction (a relay publishes them: serve's when
// outbox.relay is on, or `eventpipe relay`); in memory otherwise, events
// published through pub right after the in-memory commit.
func newDisputes(cfg config.Config, db *pgxpool.Pool, pub message.Publisher, logger *slog.Logger) (*disputesSpec, error) {
	d := &disputesSpec{}
	if cfg.Disputes.SampleTraffic {
		d.objects = disputes.NewMemoryObjects()
	}
	if db == nil {
		d.store = disputes.NewMemory(disputes.MemoryOptions{Publisher: pub, Logger: logger})
		d.inbox = inbox.NewMemory()
		return d, nil
	}
	store, err := disputes.NewPostgres(db, cfg.Postgres.Schema, "")
	if err != nil {
		return nil, fmt.Errorf("disputes: %w", err)
	}
	ib, err := inbox.NewPostgres(db, cfg.Postgres.Schema)
	if err != nil {
		return nil, fmt.Errorf("disputes: %w", err)
	}
	d.store, d.inbox = store, ib
	return d, nil
}

// bookingSpec is the booking spec's state (newBooking).
type bookingSpec struct {
	store booking.Store
	inbox inbox.Store
}

// newBooking returns the booking spec's store and inbox: PostgreSQL when
// postgres.dsn is set (db non-nil), in memory otherwise. The producers publish
// straight to the queue (no business row, so no outbox).
func newBooking(cfg config.Config, db *pgxpool.Pool) (*bookingSpec, error) {
	if db == nil {
		return &bookingSpec{store: booking.NewMemory(), inbox: inbox.NewMemory()}, nil
	}
	store, err := booking.NewPostgres(db, cfg.Postgres.Schema)
	if err != nil {
		return nil, fmt.Errorf("booking: %w", err)
	}
	ib, err := inbox.NewPostgres(db, cfg.Postgres.Schema)
	if err != nil {
		return nil, fmt.Errorf("booking: %w", err)
	}
	return &bookingSpec{store: store, inbox: ib}, nil
}

// joinlinkSpec is the join-link spec's state (newJoinLink).
type joinlinkSpec struct {
	service   *joinlink.Service
	schedules joinlink.DueSchedules
	// api is the admin API; nil when joinlink.admin_token_env names an
	// unset variable.
	api *joinlink.API
}

// newJoinLink returns the join-link spec's store and schedules: PostgreSQL
// when postgres.dsn is set, in memory otherwise. bulkRegister is the
// in-memory fake: there is no online-session client yet.
func newJoinLink(cfg config.Config, db *pgxpool.Pool, logger *slog.Logger) (*joinlinkSpec, error) {
	d := &joinlinkSpec{}
	var store joinlink.Store
	if db == nil {
		store, d.schedules = joinlink.NewMemory(), joinlink.NewMemorySchedules()
	} else {
		s, err := joinlink.NewPostgres(db, cfg.Postgres.Schema)
		if err != nil {
			return nil, fmt.Errorf("joinlink: %w", err)
		}
		sch, err := joinlink.NewPostgresSchedules(db, cfg.Postgres.Schema)
		if err != nil {
			return nil, fmt.Errorf("joinlink: %w", err)
		}
		store, d.schedules = s, sch
	}
	d.service = &joinlink.Service{
		Store:     store,
		Generator: joinlink.NewMemoryGenerator(),
		Scheduler: &joinlink.Scheduler{Enabled: cfg.JoinLink.EnableScheduler, Schedules: d.schedules, Logger: logger},
		Logger:    logger,
	}
	if token := os.Getenv(cfg.JoinLink.AdminTokenEnv); token != "" {
		d.api = &joinlink.API{Service: d.service, Auth: joinlink.BearerAuth(token), Logger: logger}
	}
	return d, nil
}
