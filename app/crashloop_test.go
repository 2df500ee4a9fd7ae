package app_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/msgctx"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/config"
)

// Environment of the FIFO crash child.
const (
	fifoChildURLEnv    = "EVENTPIPE_TEST_FIFO_CHILD_URL"
	fifoChildTypeEnv   = "EVENTPIPE_TEST_FIFO_CHILD_QUEUE_TYPE"
	fifoChildSchemaEnv = "EVENTPIPE_TEST_FIFO_CHILD_SCHEMA"
)

// The booking spec's FIFO queue and its limit (config/topology/booking.yaml).
const (
	bookingQueue       = "booking-session-events.fifo"
	bookingDLQ         = "booking-session-events-dlq.fifo"
	bookingMaxAttempts = 5
)

// bookingPolicy is the booking route's failure policy as far as crashes go:
// five attempts, then the DLQ.
var bookingPolicy = route.Policy{
	MaxAttempts:     bookingMaxAttempts,
	Redelivery:      route.InProcess,
	Backoff:         route.Backoff{Initial: 100 * time.Millisecond, Multiplier: 2, Max: time.Second},
	OnPermanent:     route.DeadLetter,
	DeadLetterQueue: bookingDLQ,
}

// A message that kills its consumer every time (SIGKILL in the middle of its
// handler) on the booking spec's FIFO queue reaches the DLQ after the attempt
// limit, on RabbitMQ classic queues (eventpipe's crash ledger in PostgreSQL)
// and quorum queues (the broker's x-delivery-count) alike, and the messages
// of its group behind it are then handled in order, each at its first
// attempt: the crashes were charged to the message that caused them only.
func TestFIFOCrashLoopReachesTheDLQ(t *testing.T) {
	t.Parallel()
	for _, qt := range []string{"classic", "quorum"} {
		t.Run(qt, func(t *testing.T) {
			t.Parallel()
			amqpURL, _ := testenv.RabbitMQVhost(t)
			pool, schema := dbtest.Schema(t)
			ps := fifoBroker(t, amqpURL, qt, schema)

			poison := message.NewMessage(watermill.NewUUID(), []byte(`{"poison":true}`))
			sent := []*message.Message{poison}
			for i := range 3 {
				sent = append(sent, message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, `{"n":%d}`, i)))
			}
			publish(t, ps, bookingQueue, sent...)

			env := []string{fifoChildURLEnv + "=" + amqpURL, fifoChildTypeEnv + "=" + qt, fifoChildSchemaEnv + "=" + schema}
			for attempt := 1; attempt <= bookingMaxAttempts; attempt++ {
				got := testenv.KillChildAt(t, "TestFIFOCrashChild", "HANDLING ", env...)
				require.Equal(t, poison.UUID+" attempt "+strconv.Itoa(attempt), got, "crash %d", attempt)
			}

			dead := subscribeDLQ(t, ps, bookingDLQ)
			type handling struct {
				id      string
				attempt int
			}
			handled := make(chan handling, len(sent))
			startRoute(t, ps, route.Route{
				Name:  "booking-after-crashes",
				Queue: bookingQueue,
				Handle: func(m *message.Message) error {
					handled <- handling{m.UUID, msgctx.Attempt(m.Context())}
					return nil
				},
				Policy: bookingPolicy,
			})

			dl := brokertest.Next(t, dead, 30*time.Second)
			dl.Ack()
			assert.Equal(t, poison.UUID, dl.UUID)
			info, ok, err := metadata.DeadLetterOf(dl)
			require.NoError(t, err)
			require.True(t, ok, "eventpipe's dead letter, with its reason: %v", dl.Metadata)
			assert.Equal(t, bookingMaxAttempts, info.Attempts)
			assert.Contains(t, info.Reason, "its consumer crashed or timed out each time")

			for _, want := range sent[1:] {
				select {
				case h := <-handled:
					assert.Equal(t, want.UUID, h.id, "group order")
					assert.Equal(t, 1, h.attempt, "%s is at its first attempt: not charged for the crashes", h.id)
				case <-time.After(30 * time.Second):
					require.FailNow(t, "not handled", "message %s", want.UUID)
				}
			}
			select {
			case h := <-handled:
				assert.Fail(t, "handled again", "%+v", h)
			case <-time.After(time.Second):
			}

			var rows int
			require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM `+pgx.Identifier{schema, "attempt_ledger"}.Sanitize()).Scan(&rows))
			assert.Zero(t, rows, "the ledger forgets settled messages")
		})
	}
}

// TestFIFOCrashChild is the consumer TestFIFOCrashLoopReachesTheDLQ kills: it
// prints the message it handles and its attempt, then waits for SIGKILL. Run
// any other way it skips, saying so.
func TestFIFOCrashChild(t *testing.T) {
	amqpURL := os.Getenv(fifoChildURLEnv)
	if amqpURL == "" {
		t.Skipf("not a test on its own: the child process TestFIFOCrashLoopReachesTheDLQ starts (with %s set) and kills", fifoChildURLEnv)
	}
	ps := fifoBroker(t, amqpURL, os.Getenv(fifoChildTypeEnv), os.Getenv(fifoChildSchemaEnv))
	startRoute(t, ps, route.Route{
		Name:  "booking-crashing",
		Queue: bookingQueue,
		Handle: func(m *message.Message) error {
			fmt.Printf("HANDLING %s attempt %d\n", m.UUID, msgctx.Attempt(m.Context()))
			time.Sleep(10 * time.Minute) // until SIGKILL
			return nil
		},
		Policy: bookingPolicy,
	})
	time.Sleep(10 * time.Minute)
}

// fifoBroker is the RabbitMQ broker serve builds for the booking spec, with
// rabbitmq.queue_type qt and its database in schema (the attempt ledger's).
func fifoBroker(t *testing.T, amqpURL, qt, schema string) broker.PubSub {
	t.Helper()
	cfg := config.Defaults()
	cfg.Broker.Kind = config.KindRabbitMQ
	cfg.RabbitMQ.URL = amqpURL
	cfg.RabbitMQ.QueueType = qt
	cfg.Booking.Enabled = true
	cfg.Postgres.DSN = testenv.PostgresDSN(t)
	cfg.Postgres.Schema = schema
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ps, err := app.NewBrokerWithDB(ctx, cfg, slog.New(slog.DiscardHandler), dbtest.Pool(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = ps.Close() })
	return ps
}
