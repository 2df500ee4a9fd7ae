package booking

import (
	"context"

	"github.com/eventpipe/eventpipe/app/spec"
	"github.com/eventpipe/eventpipe/config"
)

// Module is the booking spec: the booking-session processor on the FIFO
// queue, idempotent on the body's eventId, and with booking.gateway_addr
// the widget's gateway (Gateway: the HTTP controller and the Socket.IO
// server).
var Module = spec.Module{
	Name:     "booking",
	Enabled:  func(c config.Config) bool { return c.Booking.Enabled },
	Topology: "booking",
	Catalog:  Catalog,
	Build:    build,
}

// GatewayServer names the gateway in serve's logs and in
// Service.ServerAddr.
const GatewayServer = "booking-gateway"

// build builds the spec. The store is PostgreSQL when the service has
// a database, in memory otherwise. The producers publish straight to the
// queue: there is no business row, so no outbox. With booking.gateway_addr
// set, the gateway (HTTP controller and Socket.IO server) listens there, an
// intake server: serve's drain closes it first.
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
	if addr := d.Config.Booking.GatewayAddr; addr != "" {
		gw := NewGateway(Producer{Publisher: d.Publisher, Logger: d.Logger})
		parts.Servers = []spec.Server{{Name: GatewayServer, Addr: addr, Handler: gw.Handler(), BeforeShutdown: gw.Close, Intake: true}}
		parts.Close = gw.Close
	}
	if d.Config.Booking.SampleTraffic {
		parts.Workers = []spec.Worker{{Name: "booking sample traffic", Run: func(ctx context.Context) error {
			return SampleTraffic(ctx, Producer{Publisher: d.Publisher, Logger: d.Logger}, store, d.Logger)
		}}}
	}
	return parts, nil
}
