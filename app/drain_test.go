package app_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/msgctx"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/spec"
	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/config"
)

// SIGTERM with a message in flight: intake stops, the handler finishes (its
// context is not cancelled with the subscription, the broker is not closed
// under it), its follow-up is published, and the message is acknowledged —
// never requeued — all within serve.shutdown_timeout. On every durable broker.
func TestShutdownLetsInFlightHandlersFinish(t *testing.T) {
	for _, kind := range []string{config.KindRabbitMQ, config.KindSQS, config.KindPostgres} {
		t.Run(kind, func(t *testing.T) {
			cfg := config.Defaults()
			cfg.Broker.Kind = kind
			cfg.Admin.Addr = ""
			cfg.Serve.ShutdownTimeout = 20 * time.Second
			cfg.Serve.ConnectTimeout = 30 * time.Second
			switch kind {
			case config.KindRabbitMQ:
				cfg.RabbitMQ.URL = testenv.RabbitMQURL(t)
			case config.KindSQS:
				cfg.SQS.Endpoint = testenv.SQSEndpoint(t)
				cfg.SQS.Region = testenv.SQSRegion
				cfg.SQS.WaitTime = time.Second
				cfg.SQS.CreateQueues = true
				t.Setenv("AWS_ACCESS_KEY_ID", "test")
				t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
			case config.KindPostgres:
				cfg.Postgres.DSN = testenv.PostgresDSN(t)
			}
			suffix := strings.ToLower(watermill.NewShortUUID())
			work, followUps := "drain-work-"+suffix, "drain-follow-"+suffix

			started, release := make(chan string, 1), make(chan struct{})
			mod := spec.Module{
				Name:    "drain-test",
				Enabled: func(config.Config) bool { return true },
				Catalog: func() route.Set { return nil },
				Build: func(_ context.Context, d spec.Deps) (spec.Parts, error) {
					return spec.Parts{Routes: route.Set{{Name: "drain-work", Queue: work,
						Policy: route.Policy{MaxAttempts: 3, Redelivery: route.Broker, OnPermanent: route.Drop,
							Backoff: route.Backoff{Initial: 100 * time.Millisecond, Multiplier: 2, Max: time.Second}},
						Handle: func(msg *message.Message) error {
							started <- msg.UUID
							<-release // the work goes on after SIGTERM
							if err := msg.Context().Err(); err != nil {
								return err
							}
							return d.Publisher.Publish(followUps, msgctx.NewMessage(msg.Context(), []byte(`{"done":true}`)))
						}}}}, nil
				},
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			svc, err := app.NewWithModules(ctx, cfg, slog.New(slog.DiscardHandler), []spec.Module{mod})
			require.NoError(t, err)
			// The follow-up queue exists before anything is published to it.
			follow := probeSubscribe(t, cfg, followUps)

			done := make(chan error, 1)
			go func() { done <- svc.Run(ctx) }()
			msg := message.NewMessage(watermill.NewUUID(), []byte(`{"n":1}`))
			require.NoError(t, svc.Publisher().Publish(work, msg))
			select {
			case id := <-started:
				require.Equal(t, msg.UUID, id)
			case <-time.After(60 * time.Second):
				require.FailNow(t, "the handler never started")
			}

			cancel() // SIGTERM
			time.Sleep(500 * time.Millisecond)
			close(release)
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(60 * time.Second):
				require.FailNow(t, "Run did not return after the drain")
			}

			select {
			case m := <-follow:
				m.Ack()
			case <-time.After(30 * time.Second):
				require.FailNow(t, "the in-flight handler's follow-up was never published")
			}
			// Acknowledged, not requeued: nothing comes back on the work
			// queue.
			redelivered := probeSubscribe(t, cfg, work)
			select {
			case m := <-redelivered:
				m.Ack()
				assert.Fail(t, "the drained message was requeued", "message %s", m.UUID)
			case <-time.After(5 * time.Second):
			}
		})
	}
}

// SIGTERM with a handler that outlives serve.shutdown_timeout (a model call
// of minutes): its context is cancelled at the timeout, the handler returns,
// its message goes back to the queue and is delivered again, and Run returns
// nil, a clean exit: nothing was lost, the next consumer does the work
// (RELIABILITY finding 18). A handler that ignores its cancellation makes Run
// fail, after a grace, naming it.
func TestShutdownTimeoutCancelsHandlersAndGivesTheirMessagesBack(t *testing.T) {
	for _, kind := range []string{config.KindRabbitMQ, config.KindPostgres} {
		for _, stubborn := range []bool{false, true} {
			name := kind
			if stubborn {
				name += "/handler ignores its context"
			}
			t.Run(name, func(t *testing.T) {
				cfg := config.Defaults()
				cfg.Broker.Kind = kind
				cfg.Admin.Addr = ""
				cfg.Serve.ShutdownTimeout = time.Second
				cfg.Serve.ConnectTimeout = 30 * time.Second
				if kind == config.KindRabbitMQ {
					cfg.RabbitMQ.URL = testenv.RabbitMQURL(t)
				} else {
					cfg.Postgres.DSN = testenv.PostgresDSN(t)
				}
				work := "drain-slow-" + strings.ToLower(watermill.NewShortUUID())
				started, stop := make(chan string, 1), make(chan struct{})
				defer close(stop)
				mod := spec.Module{
					Name:    "drain-test",
					Enabled: func(config.Config) bool { return true },
					Catalog: func() route.Set { return nil },
					Build: func(_ context.Context, d spec.Deps) (spec.Parts, error) {
						return spec.Parts{Routes: route.Set{{Name: "drain-slow", Queue: work, Timeout: time.Hour,
							Policy: route.Policy{MaxAttempts: 3, Redelivery: route.Broker, OnPermanent: route.Drop,
								Backoff: route.Backoff{Initial: 100 * time.Millisecond, Multiplier: 2, Max: time.Second}},
							Handle: func(msg *message.Message) error {
								started <- msg.UUID
								if stubborn {
									<-stop
									return nil
								}
								<-msg.Context().Done() // a call far longer than the shutdown timeout
								return msg.Context().Err()
							}}}}, nil
					},
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				svc, err := app.NewWithModules(ctx, cfg, slog.New(slog.DiscardHandler), []spec.Module{mod})
				require.NoError(t, err)
				done := make(chan error, 1)
				go func() { done <- svc.Run(ctx) }()
				msg := message.NewMessage(watermill.NewUUID(), []byte(`{"n":1}`))
				require.NoError(t, svc.Publisher().Publish(work, msg))
				select {
				case <-started:
				case <-time.After(60 * time.Second):
					require.FailNow(t, "the handler never started")
				}

				cancel() // SIGTERM
				select {
				case err := <-done:
					if stubborn {
						require.ErrorContains(t, err, "still running")
						return
					}
					require.NoError(t, err, "handlers cancelled at the timeout are a clean exit")
				case <-time.After(60 * time.Second):
					require.FailNow(t, "Run did not return after the shutdown timeout")
				}
				back := probeSubscribe(t, cfg, work)
				select {
				case m := <-back:
					assert.Equal(t, msg.UUID, m.UUID, "the cancelled message is delivered again")
					assert.Equal(t, "1", m.Metadata.Get(metadata.AttemptKey), "the cancelled attempt is counted")
					m.Ack()
				case <-time.After(30 * time.Second):
					require.FailNow(t, "the message cancelled at the shutdown timeout never came back")
				}
			})
		}
	}
}

// probeSubscribe subscribes queue through a broker of its own, as a
// consumer outside the service under test; both end with the test.
func probeSubscribe(t *testing.T, cfg config.Config, queue string) <-chan *message.Message {
	t.Helper()
	probe, err := app.NewBroker(context.Background(), cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { _ = probe.Close() })
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	msgs, err := probe.Subscribe(ctx, queue)
	require.NoError(t, err)
	return msgs
}
