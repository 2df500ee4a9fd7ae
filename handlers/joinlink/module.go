package joinlink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/robfig/cron/v3"

	"github.com/eventpipe/eventpipe/app/spec"
	"github.com/eventpipe/eventpipe/config"
)

// Module is the join-link spec without its AWS adapter: the processor on
// join-link-generation, the in-process scheduler and its dispatcher, the
// fallback sweep (wall clock, one replica at a time) and the admin API. On
// broker.kind sqs it refuses to schedule; the service runs NewModule with
// the EventBridge adapter.
var Module = NewModule(Adapters{})

// Adapters are the spec's parts outside handlers/ (AWS clients), handed in
// by the composition root.
type Adapters struct {
	// EventBridge builds the EventBridge Scheduler Schedules
	// (AwsSchedulerService), used with broker.kind sqs.
	EventBridge func(ctx context.Context, c EventBridgeConfig) (Schedules, error)
}

// EventBridgeConfig is what the EventBridge adapter needs: the spec's
// AWS_SCHEDULER_* settings and the SDK's region and endpoint.
type EventBridgeConfig struct {
	TargetQueueARN, RoleARN, Group string
	Region, Endpoint               string
}

// NewModule is the join-link spec with a.
func NewModule(a Adapters) spec.Module {
	return spec.Module{
		Name:     "joinlink",
		Enabled:  func(c config.Config) bool { return c.JoinLink.Enabled },
		Topology: "joinlink",
		Catalog:  Catalog,
		Build:    func(ctx context.Context, d spec.Deps) (spec.Parts, error) { return build(ctx, d, a) },
	}
}

// flag is a boolean setting under its spec name: the variable named, when
// set to a boolean, decides; otherwise eventpipe's key.
func flag(d spec.Deps, name string, key bool) (bool, error) {
	v := d.Getenv(name)
	if v == "" {
		return key, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want true or false", name, v)
	}
	return b, nil
}

// orEnv is s, or the variable name's value when s is empty.
func orEnv(d spec.Deps, s, name string) string {
	if s != "" {
		return s
	}
	return d.Getenv(name)
}

// build builds the spec. Store and schedules are PostgreSQL when the
// service has a database, in memory otherwise; bulkRegister is the HTTP
// client of joinlink.bulk_register_url (see newGenerator). The admin API is mounted on
// the admin server when the service verifies admin JWTs (d.Verifier, from
// admin.token_secret_env or admin.token_jwks_url).
func build(ctx context.Context, d spec.Deps, a Adapters) (spec.Parts, error) {
	c := d.Config.JoinLink
	var err error
	if c.EnableScheduler, err = flag(d, "ENABLE_JOIN_LINK_SCHEDULER", c.EnableScheduler); err != nil {
		return spec.Parts{}, err
	}
	if c.EnableFallbackCron, err = flag(d, "ENABLE_JOIN_LINK_FALLBACK_CRON", c.EnableFallbackCron); err != nil {
		return spec.Parts{}, err
	}
	var (
		store     Store        = NewMemory()
		schedules DueSchedules = NewMemorySchedules()
	)
	if d.DB != nil {
		s, err := NewPostgres(d.DB, d.Config.Postgres.Schema)
		if err != nil {
			return spec.Parts{}, err
		}
		sch, err := NewPostgresSchedules(d.DB, d.Config.Postgres.Schema)
		if err != nil {
			return spec.Parts{}, err
		}
		store, schedules = s, sch
	}
	generator, err := newGenerator(d)
	if err != nil {
		return spec.Parts{}, err
	}
	metrics, err := NewMetrics(d.Registerer, store)
	if err != nil {
		return spec.Parts{}, err
	}
	// EventBridge Scheduler delivers the schedules on AWS; the in-process
	// scheduler and its dispatcher stand in for it on the other brokers.
	var registered Schedules = schedules
	onAWS := d.Config.Broker.Kind == config.KindSQS && c.EnableScheduler
	if onAWS {
		if a.EventBridge == nil {
			return spec.Parts{}, errors.New("joinlink.enable_scheduler on SQS needs the EventBridge Scheduler adapter, which this build does not wire")
		}
		if registered, err = a.EventBridge(ctx, EventBridgeConfig{
			TargetQueueARN: orEnv(d, c.SchedulerTargetQueueARN, "AWS_SCHEDULER_TARGET_QUEUE_ARN"),
			RoleARN:        orEnv(d, c.SchedulerExecutionRoleARN, "AWS_SCHEDULER_EXECUTION_ROLE_ARN"),
			Group:          orEnv(d, c.SchedulerGroupName, "AWS_SCHEDULER_GROUP_NAME"),
			Region:         d.Config.SQS.Region,
			Endpoint:       c.SchedulerEndpoint,
		}); err != nil {
			return spec.Parts{}, err
		}
	}
	svc := &Service{
		Store:         store,
		Generator:     generator,
		Scheduler:     &Scheduler{Enabled: c.EnableScheduler, Schedules: registered, Logger: d.Logger, Metrics: metrics},
		Logger:        d.Logger,
		SystemActorID: c.SystemActorID,
		Metrics:       metrics,
	}
	if pg, ok := store.(*Postgres); ok {
		svc.SweepLock = pg.SweepLock()
	}
	parts := spec.Parts{Routes: Handlers{Service: svc, Logger: d.Logger}.Routes()}
	if d.Verifier != nil {
		parts.Endpoints = append(parts.Endpoints, spec.Endpoint{
			Pattern: "/program-session/",
			Handler: &API{Service: svc, Auth: d.Verifier, Logger: d.Logger},
		})
	} else {
		secret := "a variable named by admin.token_secret_env"
		if name := d.Config.Admin.TokenSecretEnv; name != "" {
			secret = "$" + name + " (admin.token_secret_env)"
		}
		d.Logger.Info("join-link admin API off: admin JWTs are not verified; set an HS256 secret in "+secret+
			" or admin.token_jwks_url to serve PATCH /program-session/{id}/link-generation", slog.String("spec", "joinlink"))
	}
	if c.EnableScheduler && !onAWS {
		dispatcher := &Dispatcher{Schedules: schedules, Publisher: d.Publisher, Interval: c.DispatchInterval, Logger: d.Logger}
		parts.Workers = append(parts.Workers, spec.Worker{Name: "joinlink dispatcher", Run: dispatcher.Run})
	}
	if c.EnableFallbackCron {
		schedule, err := cron.ParseStandard(c.FallbackSchedule)
		if err != nil { // config.Validate checked it
			return spec.Parts{}, fmt.Errorf("joinlink.fallback_schedule: %w", err)
		}
		parts.Workers = append(parts.Workers, spec.Worker{Name: "joinlink fallback sweep", Run: func(ctx context.Context) error {
			return svc.RunFallback(ctx, schedule)
		}})
	}
	if c.SampleTraffic {
		parts.Workers = append(parts.Workers, spec.Worker{Name: "joinlink sample traffic", Run: func(ctx context.Context) error {
			return SampleTraffic(ctx, svc, d.Logger)
		}})
	}
	return parts, nil
}

// newGenerator is bulkRegister: the HTTP client when joinlink.bulk_register_url
// is set, the in-memory fake only when sample_traffic asks for the demo, and
// otherwise a refusal to start (a production config must never mark
// sessions COMPLETED with no links).
func newGenerator(d spec.Deps) (Generator, error) {
	c := d.Config.JoinLink
	switch {
	case c.BulkRegisterURL != "":
		return &HTTPGenerator{URL: c.BulkRegisterURL, Token: d.Getenv(c.BulkRegisterTokenEnv), Timeout: c.BulkRegisterTimeout}, nil
	case c.SampleTraffic:
		d.Logger.Warn("join-link bulkRegister is the in-memory fake (joinlink.sample_traffic): no links are registered")
		return NewMemoryGenerator(), nil
	default:
		return nil, errors.New("bulkRegister has no endpoint: set joinlink.bulk_register_url (EVENTPIPE_JOINLINK_BULK_REGISTER_URL) " +
			"to the online-session subsystem, or joinlink.sample_traffic for the in-memory fake of the demo")
	}
}
