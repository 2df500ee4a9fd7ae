package app_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/spec"
	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/config"
)

// serve hands a route as many messages at once as its broker holds for it
// (RabbitMQ: the prefetch), so a slow handler does not hold up the rest of
// its queue; serve.max_concurrency caps it, and a route's own Concurrency
// below the cap stays.
func TestServeHandlesARoutesMessagesConcurrently(t *testing.T) {
	cases := []struct {
		name         string
		maxConc, own int
		want         int64
	}{
		{name: "default: the prefetch", want: 6},
		{name: "serve.max_concurrency caps it", maxConc: 2, want: 2},
		{name: "the route's own stays under the cap", maxConc: 4, own: 3, want: 3},
		{name: "one at a time", maxConc: 1, want: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := config.Defaults()
			cfg.Broker.Kind = config.KindRabbitMQ
			cfg.RabbitMQ.URL = testenv.RabbitMQURL(t)
			cfg.Admin.Addr = ""
			cfg.Serve.ShutdownTimeout = 5 * time.Second
			cfg.Serve.MaxConcurrency = c.maxConc
			queue := "conc-" + strings.ToLower(watermill.NewShortUUID())
			var running, peak atomic.Int64
			release := make(chan struct{})
			mod := spec.Module{
				Name:    "concurrency-test",
				Enabled: func(config.Config) bool { return true },
				Catalog: func() route.Set { return nil },
				Build: func(context.Context, spec.Deps) (spec.Parts, error) {
					return spec.Parts{Routes: route.Set{{Name: "conc", Queue: queue, Concurrency: c.own,
						Policy: route.Policy{MaxAttempts: 3, Redelivery: route.Broker, OnPermanent: route.Drop,
							Backoff: route.Backoff{Initial: 100 * time.Millisecond, Multiplier: 2, Max: time.Second}},
						Handle: func(*message.Message) error {
							n := running.Add(1)
							defer running.Add(-1)
							for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
							}
							<-release
							return nil
						}}}}, nil
				},
			}
			ctx, cancel := context.WithCancel(context.Background())
			svc, err := app.NewWithModules(ctx, cfg, slog.New(slog.DiscardHandler), []spec.Module{mod})
			require.NoError(t, err)
			done := make(chan error, 1)
			go func() { done <- svc.Run(ctx) }()
			defer func() {
				cancel()
				require.NoError(t, <-done)
			}()
			defer close(release)
			for range 6 {
				require.NoError(t, svc.Publisher().Publish(queue, message.NewMessage(watermill.NewUUID(), []byte(`{}`))))
			}
			require.Eventually(t, func() bool { return running.Load() == c.want }, 30*time.Second, 10*time.Millisecond,
				"%d handlers running, want %d", running.Load(), c.want)
			time.Sleep(500 * time.Millisecond)
			assert.Equal(t, c.want, peak.Load(), "never more at once")
		})
	}
}
