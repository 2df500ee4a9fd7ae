// Package testbrokers builds any of eventpipe's four brokers for a test, with
// timeouts short enough that a message given back (a nack, a crashed
// consumer) comes again within seconds. Tests that must hold on every broker
// loop over Kinds. A missing service fails the test (package testenv); it
// never skips.
package testbrokers

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/memory"
	"github.com/eventpipe/eventpipe/app/broker/postgres"
	"github.com/eventpipe/eventpipe/app/broker/rabbitmq"
	"github.com/eventpipe/eventpipe/app/broker/routing"
	"github.com/eventpipe/eventpipe/app/broker/sqs"
	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/app/topology"
)

// Kind is one broker of the matrix.
type Kind struct {
	Name string
	// Durable: messages outlive the consumer's process. The embedded broker
	// lives in the process, so a crash or a restart loses its messages by
	// design (decision 0002).
	Durable bool
	// Redelivery bounds how long a message given back takes to come again.
	Redelivery time.Duration
}

// Kinds are the four brokers.
var Kinds = []Kind{
	{Name: "memory", Durable: false, Redelivery: 5 * time.Second},
	{Name: "rabbitmq", Durable: true, Redelivery: 15 * time.Second},
	{Name: "sqs", Durable: true, Redelivery: 20 * time.Second},
	{Name: "postgres", Durable: true, Redelivery: 20 * time.Second},
}

// Scope returns a name for the state a test shares between its broker
// instances (and child processes), isolated from every other test: the
// Postgres broker's schema, or a RabbitMQ virtual host (its AMQP URL), both
// removed when the test ends. On the embedded broker every instance is its own
// world. The SQS emulator has no namespaces: tests that use fixed queue names
// there must not run in parallel with each other.
func Scope(t testing.TB, kind string) string {
	t.Helper()
	if kind == "rabbitmq" {
		amqpURL, _ := testenv.RabbitMQVhost(t)
		return amqpURL
	}
	scope := "ep_t_" + strings.ToLower(watermill.NewShortUUID())
	if kind == "postgres" {
		dsn := testenv.PostgresDSN(t)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Logf("drop schema %s: %v", scope, err)
				return
			}
			defer func() { _ = conn.Close(ctx) }()
			if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{scope}.Sanitize()+` CASCADE`); err != nil {
				t.Logf("drop schema %s: %v", scope, err)
			}
		})
	}
	return scope
}

// New connects to the broker named kind; scope comes from Scope. The broker is
// closed when the test ends.
func New(t testing.TB, kind, scope string) broker.PubSub {
	t.Helper()
	return newBroker(t, kind, scope, nil)
}

// NewRouted is New for a spec topology (exchanges, bindings, dead-letter
// queues): it also returns the publisher that routes "<exchange>/<key>"
// topics by top's bindings — natively on RabbitMQ (whose adapter declares top
// on first use), by routing.Publisher elsewhere — as the service does.
func NewRouted(t testing.TB, kind, scope string, top topology.Topology) (broker.PubSub, message.Publisher) {
	t.Helper()
	if kind == "rabbitmq" {
		declared, err := rabbitmq.NewDeclared(top, nil)
		require.NoError(t, err)
		ps := newBroker(t, kind, scope, declared)
		pub, err := routing.NewNative(ps, top)
		require.NoError(t, err)
		return ps, pub
	}
	ps := newBroker(t, kind, scope, nil)
	pub, err := routing.New(ps, top)
	require.NoError(t, err)
	return ps, pub
}

func newBroker(t testing.TB, kind, scope string, rabbitTopology rabbitmq.Topology) broker.PubSub {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	logger := watermill.NopLogger{}
	var (
		ps  broker.PubSub
		err error
	)
	switch kind {
	case "memory":
		ps, err = memory.New(memory.Config{}, logger)
	case "rabbitmq":
		amqpURL := scope
		if !strings.HasPrefix(scope, "amqp") {
			amqpURL = testenv.RabbitMQURL(t)
		}
		ps, err = rabbitmq.New(ctx, rabbitmq.Config{URL: amqpURL, Topology: rabbitTopology}, logger)
	case "sqs":
		ps, err = sqs.New(ctx, sqs.Config{
			Region:            testenv.SQSRegion,
			Endpoint:          testenv.SQSEndpoint(t),
			Credentials:       credentials.NewStaticCredentialsProvider("test", "test", ""),
			CreateQueues:      true,
			WaitTime:          time.Second,
			VisibilityTimeout: 3 * time.Second,
		}, logger)
	case "postgres":
		ps, err = postgres.New(ctx, postgres.Config{
			DSN:                  testenv.PostgresDSN(t),
			Schema:               scope,
			AutoInitializeSchema: true,
			MaxConns:             12, // opened lazily; a spec consumes up to 15 queues
			AckDeadline:          3 * time.Second,
			PollInterval:         100 * time.Millisecond,
		}, logger)
	default:
		t.Fatalf("unknown broker kind %q", kind)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = ps.Close() })
	return ps
}

// Case is one flow a test runs on every broker.
type Case struct {
	Name string
	Run  func(t *testing.T, k Kind)
}

// RunEach runs every case on every broker of Kinds, all in parallel, as
// subtests <broker>/<case>.
func RunEach(t *testing.T, cases []Case) {
	t.Helper()
	for _, k := range Kinds {
		t.Run(k.Name, func(t *testing.T) {
			t.Parallel()
			for _, c := range cases {
				t.Run(c.Name, func(t *testing.T) {
					t.Parallel()
					c.Run(t, k)
				})
			}
		})
	}
}
