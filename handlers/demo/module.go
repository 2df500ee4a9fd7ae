package demo

import (
	"context"

	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/spec"
	"github.com/eventpipe/eventpipe/config"
)

// Module is the demo as a spec: its routes, and a producer that publishes a
// greeting every demo.interval.
type Module struct{}

var _ spec.Module = Module{}

// Name implements spec.Module.
func (Module) Name() string { return "demo" }

// Enabled implements spec.Module.
func (Module) Enabled(cfg config.Config) bool { return cfg.Demo.Enabled }

// Topology implements spec.Module: the demo's queues need no declaration.
func (Module) Topology() string { return "" }

// Catalog implements spec.Module.
func (Module) Catalog() route.Set { return Handlers{}.Routes() }

// Build implements spec.Module.
func (Module) Build(_ context.Context, d spec.Deps) (spec.Parts, error) {
	return spec.Parts{
		Routes: Handlers{Publisher: d.Publisher, Logger: d.Logger}.Routes(),
		Workers: []spec.Worker{{Name: "demo producer", Run: func(ctx context.Context) error {
			Produce(ctx, d.Publisher, d.Config.Demo.Interval, d.Logger)
			return nil
		}}},
	}, nil
}
