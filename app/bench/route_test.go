package bench

import (
	"context"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/testbrokers"
)

// BenchmarkRoute is the cost of one message end to end, per message: one
// op is one message published (in calls of 10) and handled, so allocs/op
// and B/op are a message's allocations, whatever the machine's load.
// "route" consumes through the router with the route's whole chain
// (app.AddRoute, as the service and the MEM/R3 rows do); "subscription"
// consumes the broker's channel bare, ack after the handler, so the
// difference is the router's and the chain's.
//
// The memory broker always; RabbitMQ too when EVENTPIPE_ROUTE_BENCH names
// it (EVENTPIPE_ROUTE_BENCH=memory,rabbitmq), in a virtual host of its own:
//
//	go test -run '^$' -bench BenchmarkRoute -benchmem ./app/bench
func BenchmarkRoute(b *testing.B) {
	kinds := []string{"memory"}
	if v := os.Getenv("EVENTPIPE_ROUTE_BENCH"); v != "" {
		kinds = strings.Split(v, ",")
	}
	body := make([]byte, 256)
	copy(body, filler)
	for _, kind := range kinds {
		b.Run(kind, func(b *testing.B) {
			for _, via := range []string{"route", "subscription"} {
				b.Run(via, func(b *testing.B) {
					ps := testbrokers.New(b, kind, testbrokers.Scope(b, kind))
					topic := "bench-route-" + watermill.NewShortUUID()
					if init, ok := ps.(message.SubscribeInitializer); ok {
						if err := init.SubscribeInitialize(topic); err != nil {
							b.Fatal(err)
						}
					}
					var handled atomic.Int64
					stop := consumeVia(b, via, ps, topic, func() { handled.Add(1) })
					defer stop()

					b.ReportAllocs()
					b.ResetTimer()
					const batch = 10
					for sent := 0; sent < b.N; sent += batch {
						msgs := make([]*message.Message, min(batch, b.N-sent))
						for i := range msgs {
							msgs[i] = message.NewMessage(watermill.NewUUID(), body)
						}
						if err := ps.Publish(topic, msgs...); err != nil {
							b.Fatal(err)
						}
					}
					deadline := time.Now().Add(2 * time.Minute)
					for handled.Load() < int64(b.N) {
						if time.Now().After(deadline) {
							b.Fatalf("%d of %d messages handled", handled.Load(), b.N)
						}
						time.Sleep(100 * time.Microsecond)
					}
					b.StopTimer()
				})
			}
		})
	}
}

func consumeVia(b *testing.B, via string, ps broker.PubSub, topic string, handled func()) (stop func()) {
	if via == "route" {
		return testbrokers.StartRoutes(b, keepOpen{ps}, nil, nil, route.Route{
			Name:  "bench-route",
			Queue: topic,
			Handle: func(*message.Message) error {
				handled()
				return nil
			},
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	msgs, err := ps.Subscribe(ctx, topic)
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range msgs {
			handled()
			m.Ack()
		}
	}()
	return func() { cancel(); <-done }
}
