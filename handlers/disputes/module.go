package disputes

import (
	"context"

	"github.com/eventpipe/eventpipe/app/spec"
	"github.com/eventpipe/eventpipe/config"
)

// Module is the disputes spec: the events-worker on domain-events, and with
// sample traffic the ingest-worker on ingest-queue reading an in-memory object
// store (there is no S3 client yet).
var Module = spec.Module{
	Name:     "disputes",
	Enabled:  func(c config.Config) bool { return c.Disputes.Enabled },
	Topology: "disputes",
	Catalog:  Catalog,
	Build:    build,
}

// build builds the spec. The store is PostgreSQL when the service has
// a database, events written to the transactional outbox in the business
// transaction (a relay publishes them); in memory otherwise, events published
// right after the in-memory commit (the service's outbox writer).
func build(_ context.Context, d spec.Deps) (spec.Parts, error) {
	var store Store = NewMemory(MemoryOptions{Outbox: d.Outbox, Logger: d.Logger})
	if d.DB != nil {
		pg, err := NewPostgres(d.DB, d.Config.Postgres.Schema, "")
		if err != nil {
			return spec.Parts{}, err
		}
		store = pg
	}
	h := Handlers{
		Store:        store,
		Inbox:        d.Inbox,
		Logger:       d.Logger,
		AMLThreshold: d.Config.Disputes.AMLThreshold,
		DefaultTAT:   d.Config.Disputes.DefaultTAT,
	}
	var parts spec.Parts
	if d.Config.Disputes.SampleTraffic {
		objects := NewMemoryObjects()
		h.Objects = objects
		parts.Workers = []spec.Worker{{Name: "disputes sample traffic", Run: func(ctx context.Context) error {
			return SampleTraffic(ctx, store, objects, d.Publisher, d.Logger)
		}}}
	}
	parts.Routes = h.Routes()
	return parts, nil
}
