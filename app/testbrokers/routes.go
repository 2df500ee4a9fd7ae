package testbrokers

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/middleware"
)

// StartRoutes runs routes on ps through the real middleware chain, wired as
// serve wires them (app.AddRoute), until the test ends or stop is called.
// Dead letters and anything the handlers publish go through pub (ps when
// nil). logger may be nil. Stopping closes the router, which closes ps.
func StartRoutes(t testing.TB, ps broker.PubSub, pub message.Publisher, logger *slog.Logger, routes ...route.Route) (stop func()) {
	t.Helper()
	if pub == nil {
		pub = ps
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	require.NoError(t, err)
	deps := middleware.Deps{
		Logger:    logger,
		Metrics:   middleware.NewMetrics(prometheus.NewRegistry()),
		Publisher: pub,
		NackDelay: app.NacksWithDelay(ps),
	}
	for _, r := range routes {
		require.NoError(t, app.AddRoute(router, ps, deps, r))
	}
	done := make(chan error, 1)
	go func() { done <- router.Run(context.Background()) }()
	select {
	case <-router.Running():
	case err := <-done:
		t.Fatalf("router: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("router did not start")
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = router.Close()
			if err := <-done; err != nil {
				t.Logf("router stopped with %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// Subscribe consumes queue (initialising it where the broker needs that)
// until the test ends. On the embedded broker, subscribe before anything is
// published: it keeps nothing for absent subscribers.
func Subscribe(t testing.TB, ps broker.PubSub, queue string) <-chan *message.Message {
	t.Helper()
	if init, ok := ps.(message.SubscribeInitializer); ok {
		require.NoError(t, init.SubscribeInitialize(queue))
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	msgs, err := ps.Subscribe(ctx, queue)
	require.NoError(t, err)
	return msgs
}
