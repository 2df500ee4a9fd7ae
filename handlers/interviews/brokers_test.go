package interviews_test

// Brokers for the flow tests: app/testbrokers, under the names these tests
// use.

import (
	"testing"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/app/testenv"
)

type brokerKind = testbrokers.Kind

var brokerKinds = testbrokers.Kinds

func postgresDSN(t testing.TB) string { return testenv.PostgresDSN(t) }

func newBroker(t *testing.T, kind string) broker.PubSub {
	t.Helper()
	return testbrokers.New(t, kind, testbrokers.Scope(t, kind))
}
