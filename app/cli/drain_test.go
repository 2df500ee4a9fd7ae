package cli_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/config"
)

// `eventpipe drain-check` is the deploy gate: exit 1 with the counts while
// the booking FIFO queue holds a message, exit 0 once it is consumed, and
// with --wait it waits for that. On RabbitMQ (through the management API)
// and the Postgres broker, each in a scope of its own.
func TestDrainCheckGatesTheBookingQueue(t *testing.T) {
	t.Parallel()
	const queue, dlq = "booking-session-events.fifo", "booking-session-events-dlq.fifo"
	cfg := config.Defaults()
	cfg.Booking.Enabled = true
	top, err := app.SpecTopology(cfg)
	require.NoError(t, err)
	for _, kind := range []string{config.KindRabbitMQ, config.KindPostgres} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			scope := testbrokers.Scope(t, kind)
			environ := []string{"EVENTPIPE_BROKER=" + kind, "EVENTPIPE_BOOKING_ENABLED=true", "EVENTPIPE_ADMIN_ADDR="}
			if kind == config.KindRabbitMQ {
				environ = append(environ, "EVENTPIPE_RABBITMQ_URL="+scope)
			} else {
				environ = append(environ, "EVENTPIPE_POSTGRES_DSN="+testenv.PostgresDSN(t), "EVENTPIPE_POSTGRES_SCHEMA="+scope)
			}
			r := run(t, environ, "topology", "apply", "-f", "../../config/topology/booking.yaml")
			require.Equal(t, 0, r.code, r.stderr)
			ps, pub := testbrokers.NewRouted(t, kind, scope, top)
			msg := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
			msg.Metadata.Set("x-group-id", "session-1")
			require.NoError(t, pub.Publish(queue, msg))

			r = run(t, environ, "drain-check", "--queue", queue, "--with-dlq")
			assert.Equal(t, 1, r.code, r.stderr)
			assert.Contains(t, r.stdout, queue)
			assert.Contains(t, r.stdout, dlq, "the DLQ its spec declares is counted too")
			assert.Contains(t, r.stdout, "— not drained")
			assert.Empty(t, r.stderr, "the counts are the message")

			waited := make(chan result, 1)
			go func() { waited <- run(t, environ, "drain-check", "--queue", queue, "--with-dlq", "--wait", "50s") }()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			msgs, err := ps.Subscribe(ctx, queue)
			require.NoError(t, err)
			select {
			case m := <-msgs:
				time.Sleep(time.Second) // counted in flight by the waiting check
				m.Ack()
			case <-ctx.Done():
				t.Fatal("the message never came")
			}
			r = <-waited
			assert.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			assert.Contains(t, r.stdout, "— not drained", "counted before the consumer took it")
			assert.Contains(t, r.stdout, "— drained")

			r = run(t, environ, "drain-check", "--queue", "no-such-queue")
			assert.Equal(t, 1, r.code)
			assert.Contains(t, r.stderr, "no-such-queue", "a misspelt queue never passes")
		})
	}
}

// On SQS (the emulator), a FIFO queue of the test's own: the spec's queue
// names are shared by every test on the one emulator. Not parallel: the AWS
// SDK reads its credentials from the process environment.
func TestDrainCheckGatesAnSQSFIFOQueue(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	queue := "ept-drain-" + watermill.NewShortUUID() + ".fifo"
	environ := []string{"EVENTPIPE_BROKER=sqs", "EVENTPIPE_SQS_ENDPOINT=" + testenv.SQSEndpoint(t), "EVENTPIPE_SQS_REGION=" + testenv.SQSRegion, "EVENTPIPE_ADMIN_ADDR="}
	ps := testbrokers.New(t, config.KindSQS, "")
	msg := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
	msg.Metadata.Set("x-group-id", "session-1")
	require.NoError(t, ps.Publish(queue, msg))

	r := run(t, environ, "drain-check", "--queue", queue)
	assert.Equal(t, 1, r.code, r.stderr)
	assert.Contains(t, r.stdout, "— not drained")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msgs, err := ps.Subscribe(ctx, queue)
	require.NoError(t, err)
	select {
	case m := <-msgs:
		m.Ack()
	case <-ctx.Done():
		t.Fatal("the message never came")
	}
	r = run(t, environ, "drain-check", "--queue", queue, "--wait", "30s")
	assert.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, "— drained")
}

func TestDrainCheckUsage(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		environ []string
		args    []string
		want    string
	}{
		"no queue":      {[]string{"EVENTPIPE_BROKER=postgres", "EVENTPIPE_POSTGRES_DSN=postgres://127.0.0.1:1/x"}, []string{"drain-check"}, "--queue is required"},
		"memory broker": {nil, []string{"drain-check", "--queue", "q"}, "memory broker"},
		"negative wait": {nil, []string{"drain-check", "--queue", "q", "--wait", "-1s"}, "--wait"},
	} {
		r := run(t, c.environ, c.args...)
		assert.Equal(t, 2, r.code, name)
		assert.Contains(t, r.stderr, c.want, name)
	}
}
