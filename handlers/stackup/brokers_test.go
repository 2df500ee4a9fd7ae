package stackup_test

// Brokers for the flow tests: app/testbrokers, under the names these tests
// use.

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/app/topology"
)

var brokerKinds = []string{"memory", "rabbitmq", "sqs", "postgres"}

// newRouted connects to the broker kind, isolated for this test, and returns
// it with the publisher that routes "<exchange>/<key>" by top, as the service
// does, and the AMQP URL of the test's vhost on RabbitMQ ("" elsewhere).
func newRouted(t *testing.T, kind string, top topology.Topology) (broker.PubSub, message.Publisher, string) {
	t.Helper()
	scope := testbrokers.Scope(t, kind)
	ps, pub := testbrokers.NewRouted(t, kind, scope, top)
	amqpURL := ""
	if kind == "rabbitmq" {
		amqpURL = scope
	}
	return ps, pub, amqpURL
}
