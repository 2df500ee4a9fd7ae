package booking

import (
	"context"

	"github.com/eventpipe/eventpipe/app/spec"
	"github.com/eventpipe/eventpipe/config"
)

// Module is the booking spec: the booking-session processor on the FIFO
// queue, idempotent on the body's eventId.
var Module = spec.Module{
	Name:     "booking",
	Enabled:  func(c config.Config) bool { return c.Booking.Enabled },
	Topology: "booking",
	Catalog:  Catalog,
	Build:    build,
}

// build builds the spec. The store is PostgreSQL when the service has
// a database, in memory otherwise. The producers publish straight to the
// queue: there is no business row, so no outbox.
func build(_ context.Context, d spec.Deps) (spec.Parts, error) {
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
