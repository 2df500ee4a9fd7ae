// Package stackup runs the StackUp RabbitMQ messaging contract (Core ↔ AI) on
// any broker: the envelope (package envelope), the message catalog (catalog),
// the AI server's consumers with the §6 failure signal (aiworker), Core's
// callback consumers and outbox requesters (core) and the RealTime fan-out
// consumer (realtime).
//
// New builds the roles a process runs from Deps; Routes returns their routes
// for app.AddRoute; CatalogRoutes is every route for `eventpipe publish` to
// validate bodies with. Topology names come from config/topology/stackup.yaml
// (LoadTopology); messages are published to "<exchange>/<routing-key>"
// through a routing publisher, so the same code routes on RabbitMQ natively
// and on memory, SQS and Postgres by the topology's bindings.
package stackup

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/core"
	"github.com/eventpipe/eventpipe/handlers/stackup/realtime"
)

// TopologyFile is where the contract's topology is declared, relative to the
// repository root.
const TopologyFile = "config/topology/stackup.yaml"

// LoadTopology reads the contract's topology file.
func LoadTopology(path string) (topology.Topology, error) {
	t, err := topology.Load(path)
	if err != nil {
		return topology.Topology{}, fmt.Errorf("stackup: %w", err)
	}
	return t, nil
}

// Roles are the parts of the contract a process runs.
type Roles struct {
	// Core consumes the five callback queues and publishes requests.
	Core bool
	// AIWorker consumes the nine request queues (or AIQueues).
	AIWorker bool
	// Realtime consumes q.realtime.session.notify into Deps.Sink.
	Realtime bool
}

// Deps are what the roles need.
type Deps struct {
	Topology topology.Topology
	// Publisher publishes "<exchange>/<routing-key>" topics: the routing
	// publisher (routing.New / routing.NewNative) over the broker.
	Publisher message.Publisher
	Inbox     inbox.Store
	// Store and Outbox are Core's: core.NewPostgres + outbox.TxWriter
	// with a database, core.NewMemory + outbox.AfterCommit{Publisher} without.
	Store  core.Store
	Outbox outbox.Writer
	// Processors are the AI worker's; a consumed queue whose processor is
	// nil refuses to start.
	Processors aiworker.Processors
	// LeaseTTL is the AI worker's lease on a request's work
	// (aiworker.Config.LeaseTTL); aiworker.DefaultLeaseTTL when 0.
	LeaseTTL time.Duration
	// AIQueues limits the AI worker to these request queues (empty = all).
	AIQueues []string
	// Versions adds request-type versions to the AI worker (§7).
	Versions map[string][]aiworker.VersionHandler
	// ConsumerVersions adds versions of callback types to Core and of
	// notification types to RealTime (§7), keyed by message type.
	ConsumerVersions map[string][]catalog.Version
	// Sink receives realtime events; a LogSink when nil.
	Sink  realtime.Sink
	Retry catalog.Retry
	// Catalog is catalog.Default() when zero.
	Catalog catalog.Catalog
	Logger  *slog.Logger
}

// Handlers are the built roles.
type Handlers struct {
	// Core is nil unless Roles.Core.
	Core *core.Service
	// Worker is nil unless Roles.AIWorker.
	Worker *aiworker.Worker
	routes route.Set
}

// New builds roles from d. Missing dependencies (a processor, a store) are
// errors naming what to configure: nothing starts half-configured.
func New(roles Roles, d Deps) (*Handlers, error) {
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.Catalog.IsZero() {
		d.Catalog = catalog.Default()
	}
	if d.Sink == nil {
		d.Sink = realtime.LogSink{Logger: d.Logger}
	}
	if !roles.Core && !roles.AIWorker && !roles.Realtime {
		return nil, errors.New("stackup: no role enabled (core, ai-worker, realtime)")
	}
	h := &Handlers{}
	var errs []error
	if roles.AIWorker {
		w, err := aiworker.New(aiworker.Config{Catalog: d.Catalog, Topology: d.Topology, Publisher: d.Publisher, Inbox: d.Inbox, Outbox: d.Outbox, LeaseTTL: d.LeaseTTL,
			Processors: d.Processors, Queues: d.AIQueues, Retry: d.Retry, Versions: d.Versions, Logger: d.Logger})
		if err != nil {
			errs = append(errs, err)
		} else if rs, err := w.Routes(); err != nil {
			errs = append(errs, err)
		} else {
			h.Worker, h.routes = w, append(h.routes, rs...)
		}
	}
	if roles.Core {
		s, err := core.New(core.Config{Catalog: d.Catalog, Topology: d.Topology, Store: d.Store, Outbox: d.Outbox, Inbox: d.Inbox,
			Retry: d.Retry, Versions: d.ConsumerVersions, Logger: d.Logger})
		if err != nil {
			errs = append(errs, err)
		} else if rs, err := s.Routes(); err != nil {
			errs = append(errs, err)
		} else {
			h.Core, h.routes = s, append(h.routes, rs...)
		}
	}
	if roles.Realtime {
		r, err := realtime.Route(d.Catalog, d.Topology, d.Retry, d.ConsumerVersions, d.Sink, d.Logger)
		if err != nil {
			errs = append(errs, err)
		} else {
			h.routes = append(h.routes, r)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return h, nil
}

// Routes returns the routes of the built roles.
func (h *Handlers) Routes() route.Set { return h.routes }

// CatalogRoutes returns every StackUp route — 9 request queues, 5 callback
// queues, the realtime queue — for `eventpipe publish` to validate bodies
// with (strict: unknown fields and secrets refused, the queue's types and
// versions only). Their handlers must not be run: they publish nowhere.
func CatalogRoutes() route.Set {
	cat := catalog.Default()
	top := topology.Topology{Name: "stackup"}
	seen := map[string]bool{}
	for _, t := range cat.Types() {
		if !seen[t.Queue] {
			seen[t.Queue] = true
			top.Queues = append(top.Queues, topology.Queue{Name: t.Queue, DeadLetter: &topology.DeadLetter{Queue: "dlq." + t.Queue}})
		}
	}
	h, err := New(Roles{Core: true, AIWorker: true, Realtime: true}, Deps{
		Topology: top, Publisher: refuse{}, Inbox: inbox.NewMemory(), Store: core.NewMemory(), Outbox: outbox.AfterCommit{Publisher: refuse{}},
		Processors: aiworker.SampleProcessors(), Catalog: cat, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(fmt.Sprintf("stackup catalog routes: %v", err)) // a bug: every dependency is given
	}
	return h.Routes()
}

// refuse is the publisher of catalog routes, which never run.
type refuse struct{}

// Publish refuses: catalog routes are never run.
func (refuse) Publish(topic string, _ ...*message.Message) error {
	return fmt.Errorf("stackup catalog route: publish to %s: catalog routes only validate", topic)
}

// Close does nothing.
func (refuse) Close() error { return nil }
