package app_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/config"
)

// serve warns about the booking spec's FIFO queue on RabbitMQ when nothing
// counts its crash redeliveries: classic queues and no database for the
// attempt ledger. Quorum queues, a database, or another broker: no warning.
func TestUncountedCrashQueues(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		set  func(*config.Config)
		want []string
	}{
		{"rabbitmq, classic, no database", func(*config.Config) {}, []string{"booking-session-events.fifo"}},
		{"rabbitmq, quorum", func(c *config.Config) { c.RabbitMQ.QueueType = config.QueueTypeQuorum }, nil},
		{"rabbitmq, classic, a database", func(c *config.Config) { c.Postgres.DSN = "postgres://localhost/eventpipe" }, nil},
		{"sqs", func(c *config.Config) { c.Broker.Kind = config.KindSQS }, nil},
	}
	for _, c := range cases {
		cfg := config.Defaults()
		cfg.Broker.Kind = config.KindRabbitMQ
		cfg.Booking.Enabled = true
		cfg.Interviews.Enabled = true
		c.set(&cfg)
		top, err := app.SpecTopology(cfg)
		require.NoError(t, err, c.name)
		assert.Equal(t, c.want, app.UncountedCrashQueues(cfg, top), c.name)
	}
}
