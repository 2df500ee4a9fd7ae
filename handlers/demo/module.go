package demo

import (
	"context"

	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/spec"
	"github.com/eventpipe/eventpipe/config"
)

// Module is the demo as a spec: its routes, and a producer that publishes a
// greeting every demo.interval.
var Module = spec.Module{
	Name:     "demo",
	Enabled:  func(c config.Config) bool { return c.Demo.Enabled },
	Topology: "",
	Catalog:  func() route.Set { return Handlers{}.Routes() },
	Build:    build,
}

// build builds the spec.
func build(_ context.Context, d spec.Deps) (spec.Parts, error) {
	return spec.Parts{
		Routes: Handlers{Publisher: d.Publisher, Logger: d.Logger}.Routes(),
		Workers: []spec.Worker{{Name: "demo producer", Run: func(ctx context.Context) error {
			Produce(ctx, d.Publisher, d.Config.Demo.Interval, d.Logger)
			return nil
		}}},
	}, nil
}
