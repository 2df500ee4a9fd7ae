package interviews_test

// Brokers for the flow tests: app/testbrokers, under the names these tests
// use.

import (
	"testing"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/testbrokers"
)

func newBroker(t *testing.T, kind string) broker.PubSub {
	t.Helper()
	return testbrokers.New(t, kind, testbrokers.Scope(t, kind))
}
