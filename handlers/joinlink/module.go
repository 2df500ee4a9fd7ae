package joinlink

import (
	"context"
	"errors"
	"fmt"

	"github.com/robfig/cron/v3"

	"github.com/eventpipe/eventpipe/app/spec"
	"github.com/eventpipe/eventpipe/config"
)

// Module is the join-link spec: the processor on join-link-generation, the
// in-process scheduler and its dispatcher (EventBridge Scheduler's role), the
// fallback sweep (wall clock, one replica at a time) and the admin API.
var Module = spec.Module{
	Name:     "joinlink",
	Enabled:  func(c config.Config) bool { return c.JoinLink.Enabled },
	Topology: "joinlink",
	Catalog:  Catalog,
	Build:    build,
}

// build builds the spec. Store and schedules are PostgreSQL when the
// service has a database, in memory otherwise; bulkRegister is the HTTP
// client of joinlink.bulk_register_url (see newGenerator). The admin API is mounted on
// the admin server when joinlink.admin_token_env names a set variable.
func build(_ context.Context, d spec.Deps) (spec.Parts, error) {
	c := d.Config.JoinLink
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
	svc := &Service{
		Store:         store,
		Generator:     generator,
		Scheduler:     &Scheduler{Enabled: c.EnableScheduler, Schedules: schedules, Logger: d.Logger},
		Logger:        d.Logger,
		SystemActorID: c.SystemActorID,
		Metrics:       metrics,
	}
	if pg, ok := store.(*Postgres); ok {
		svc.SweepLock = pg.SweepLock()
	}
	parts := spec.Parts{Routes: Handlers{Service: svc, Logger: d.Logger}.Routes()}
	if token := d.Getenv(c.AdminTokenEnv); token != "" {
		parts.Endpoints = append(parts.Endpoints, spec.Endpoint{
			Pattern: "/program-session/",
			Handler: &API{Service: svc, Auth: BearerAuth(token), Logger: d.Logger},
		})
	}
	if c.EnableScheduler {
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
