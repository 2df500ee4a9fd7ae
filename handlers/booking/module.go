package booking

import (
	"context"

	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/spec"
	"github.com/eventpipe/eventpipe/config"
)

// Module is the booking spec: the booking-session processor on the FIFO
// queue, idempotent on the body's eventId.
type Module struct{}

var _ spec.Module = Module{}

// Name implements spec.Module.
func (Module) Name() string { return "booking" }

// Enabled implements spec.Module.
func (Module) Enabled(cfg config.Config) bool { return cfg.Booking.Enabled }

// Topology implements spec.Module.
func (Module) Topology() string { return "booking" }

// Catalog implements spec.Module.
func (Module) Catalog() route.Set { return Catalog() }

// Build implements spec.Module. The store is PostgreSQL when the service has
// a database, in memory otherwise. The producers publish straight to the
// queue: there is no business row, so no outbox.
func (Module) Build(_ context.Context, d spec.Deps) (spec.Parts, error) {
	var store Store = NewMemory()
	if d.DB != nil {
		pg, err := NewPostgres(d.DB, d.Config.Postgres.Schema)
		if err != nil {
			return spec.Parts{}, err
		}
		store = pg
	}
	parts := spec.Parts{Routes: Handlers{Store: store, Inbox: d.Inbox, Logger: d.Logger}.Routes()}
	if d.Config.Booking.SampleTraffic {
		parts.Workers = []spec.Worker{{Name: "booking sample traffic", Run: func(ctx context.Context) error {
			return SampleTraffic(ctx, Producer{Publisher: d.Publisher, Logger: d.Logger}, store, d.Logger)
		}}}
	}
	return parts, nil
}
