package middleware_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/middleware"
)

// routerContext is the context a Watermill router gives a delivery (handler
// name, queue, subscriber and publisher names): the keys are Watermill's own
// and unexported, so one delivery through a real router lends its context.
func routerContext(tb testing.TB, handler, queue string) context.Context {
	tb.Helper()
	gc := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		tb.Fatal(err)
	}
	got := make(chan context.Context, 1)
	router.AddConsumerHandler(handler, queue, gc, func(msg *message.Message) error {
		got <- context.WithoutCancel(msg.Context())
		return nil
	})
	go func() { _ = router.Run(context.Background()) }()
	<-router.Running()
	if err := gc.Publish(queue, message.NewMessage(watermill.NewUUID(), nil)); err != nil {
		tb.Fatal(err)
	}
	var ctx context.Context
	select {
	case ctx = <-got:
	case <-time.After(10 * time.Second):
		tb.Fatal("no delivery through the router")
	}
	_ = router.Close()
	_ = gc.Close()
	return ctx
}

// BenchmarkChain measures one message through a route's whole chain
// (middleware.Chain) around a no-op handler, as the service builds it:
// tracing off, logs to a discard handler at the default level, metrics on a
// registry, the default policy and timeout. "bare" is the handler alone, the
// floor; "chain" is the chain as the benchmarks' consumer (app/bench) wires
// it, "chain+drain" as the service does (Deps.Drain set).
//
// Each message arrives as from an adapter through the router: x-attempt set,
// no x-trace-id (so Correlation makes one), a context of its own that the
// adapter cancels after the ack (GoChannel's, for one) under the router's
// values, and a goroutine of its own (the router starts one per message, so
// a chain deeper than a new goroutine's stack pays a stack copy every time).
//
//	go test -run '^$' -bench BenchmarkChain -benchmem ./middleware
func BenchmarkChain(b *testing.B) {
	routerCtx := routerContext(b, "bench-handler", "bench-queue")
	handler := func(*message.Message) ([]*message.Message, error) { return nil, nil }
	r := route.Route{Name: "bench-handler", Queue: "bench-queue"}
	deps := middleware.Deps{
		Logger:  slog.New(slog.DiscardHandler),
		Metrics: middleware.NewMetrics(prometheus.NewRegistry()),
	}
	drain, stopDrain := context.WithCancel(context.Background())
	b.Cleanup(stopDrain)
	drained := deps
	drained.Drain = drain

	cases := []struct {
		name string
		deps *middleware.Deps
	}{
		{"bare", nil},
		{"chain", &deps},
		{"chain+drain", &drained},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			h := message.HandlerFunc(handler)
			if c.deps != nil {
				chain := middleware.Chain(*c.deps, r)
				for i := len(chain) - 1; i >= 0; i-- {
					h = chain[i](h)
				}
			}
			msg := message.NewMessage(watermill.NewUUID(), make([]byte, 256))
			done := make(chan error)
			b.ReportAllocs()
			for b.Loop() {
				ctx, cancel := context.WithCancel(routerCtx)
				msg.SetContext(ctx)
				delete(msg.Metadata, metadata.TraceIDKey)
				msg.Metadata.Set(metadata.AttemptKey, "0")
				go func() {
					_, err := h(msg)
					done <- err
				}()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				cancel()
			}
		})
	}
}
