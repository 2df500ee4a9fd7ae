package realtime_test

// Serve instances for the flow tests, on the brokers of app/testbrokers: a
// RabbitMQ virtual host or a Postgres schema per test (testbrokers.Scope),
// renamed queues on SQS, whose emulator has no namespaces; a missing
// service fails the test, never skips it.

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/rabbitmq"
	"github.com/eventpipe/eventpipe/app/broker/routing"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/handlers/realtime"
	"github.com/eventpipe/eventpipe/handlers/realtime/pgnotify"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	stackuprt "github.com/eventpipe/eventpipe/handlers/stackup/realtime"
)

var testSecret = []byte("test-secret-test-secret-test-secret!")

var testLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

// loadTopology reads the StackUp topology. On SQS, whose emulator has no
// namespaces, the realtime queue and its DLQ get a per-test suffix so that
// parallel tests (and handlers/stackup's) never consume each other's
// notifications.
func loadTopology(t testing.TB, suffix string) topology.Topology {
	t.Helper()
	data, err := os.ReadFile("../../config/topology/stackup.yaml")
	require.NoError(t, err)
	text := string(data)
	if suffix != "" {
		text = strings.ReplaceAll(text, stackuprt.Queue, stackuprt.Queue+suffix)
	}
	top, err := topology.Parse([]byte(text))
	require.NoError(t, err)
	return top
}

// cluster is n serve instances of one broker behind the realtime queue, and
// the routing publisher a Core or AI server would publish with.
type cluster struct {
	kind      string
	queue     string // the realtime queue (renamed on SQS)
	dlq       string
	top       topology.Topology
	pub       message.Publisher
	probe     broker.PubSub // reads the DLQ
	instances []*instance
}

// instance is one serve process: its broker connection, router, realtime
// server and HTTP server.
type instance struct {
	name string
	srv  *realtime.Server
	http *httptest.Server
	reg  *prometheus.Registry
}

type clusterOptions struct {
	instances int
	// consumers is how many of the instances consume the realtime queue
	// (the first ones); default all. The others only listen to the bus.
	consumers    int
	clientBuffer int
	maxData      int
}

func newCluster(t *testing.T, kind string, opts clusterOptions) *cluster {
	t.Helper()
	if opts.instances == 0 {
		opts.instances = 2
	}
	if opts.consumers == 0 {
		opts.consumers = opts.instances
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	suffix := ""
	if kind == "sqs" {
		suffix = "-" + strings.ToLower(watermill.NewShortUUID())
	}
	specTop := loadTopology(t, "")
	top := loadTopology(t, suffix)
	c := &cluster{kind: kind, queue: stackuprt.Queue + suffix, dlq: "dlq." + stackuprt.Queue + suffix, top: top}
	pgChannel := "ep_rt_" + strings.ToLower(watermill.NewShortUUID())
	scope := testbrokers.Scope(t, kind)
	var shared broker.PubSub // memory: one in-process broker for every instance
	if kind == "memory" {
		shared = testbrokers.New(t, kind, scope)
	}
	connect := func(instanceName string) broker.PubSub {
		switch kind {
		case "memory":
			return shared
		case "rabbitmq":
			// As serve would build it: the spec's topology, plus the
			// broadcast topic on a queue of this instance's own.
			declared, err := rabbitmq.NewDeclared(top, nil)
			require.NoError(t, err)
			fan := rabbitmq.InstanceFanout{Topics: []string{realtime.FanoutTopic}, Instance: instanceName, Fallback: declared}
			ps, err := rabbitmq.New(ctx, rabbitmq.Config{URL: scope, Topology: fan}, watermill.NopLogger{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = ps.Close() })
			return ps
		}
		return testbrokers.New(t, kind, scope)
	}
	bus := func(ps broker.PubSub) realtime.Bus {
		switch kind {
		case "rabbitmq":
			return realtime.WatermillBus{Publisher: ps, Subscriber: ps, Logger: testLogger}
		case "sqs", "postgres":
			b, err := pgnotify.New(ctx, pgnotify.Config{DSN: testenv.PostgresDSN(t), Channel: pgChannel, Logger: testLogger})
			require.NoError(t, err)
			t.Cleanup(b.Close)
			return b
		}
		return nil // memory: every instance's subscription receives every notification
	}

	for i := range opts.instances {
		name := "i" + string(rune('a'+i)) + "-" + strings.ToLower(watermill.NewShortUUID())
		ps := connect(name)
		reg := prometheus.NewRegistry()
		srv, err := realtime.New(realtime.Config{
			Verifier:     realtime.HMACVerifier{Secret: testSecret},
			Bus:          bus(ps),
			Registerer:   reg,
			Logger:       testLogger,
			ClientBuffer: opts.clientBuffer,
			MaxDataBytes: opts.maxData,
			Heartbeat:    time.Second,
			// FENCE marks the end of a test's events.
			DemoEventTypes: append(slices.Clone(realtime.DefaultDemoEventTypes), "FENCE"),
		})
		require.NoError(t, err)
		runCtx, stop := context.WithCancel(context.Background())
		require.NoError(t, srv.Start(runCtx))
		t.Cleanup(func() { stop(); _ = srv.Close() })

		r, err := stackuprt.Route(catalog.Default(), specTop, catalog.Retry{
			MaxAttempts: 2, Backoff: route.Backoff{Initial: 50 * time.Millisecond, Multiplier: 2, Max: 200 * time.Millisecond},
		}, nil, srv.Sink(), testLogger)
		require.NoError(t, err)
		r.Queue, r.Policy.DeadLetterQueue = c.queue, c.dlq
		if i < opts.consumers {
			testbrokers.StartRoutes(t, ps, nil, testLogger, r)
		}

		hs := httptest.NewServer(srv.Handler())
		t.Cleanup(hs.Close)
		c.instances = append(c.instances, &instance{name: name, srv: srv, http: hs, reg: reg})
		if i == 0 {
			c.probe = ps
			var perr error
			if kind == "rabbitmq" {
				c.pub, perr = routing.NewNative(ps, top)
			} else {
				c.pub, perr = routing.New(ps, top)
			}
			require.NoError(t, perr)
		}
	}
	return c
}
