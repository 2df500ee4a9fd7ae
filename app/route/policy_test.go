package route_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/topology"
)

func TestPolicyValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, route.DefaultPolicy().Validate())
	bad := route.Policy{MaxAttempts: 0, Redelivery: "later", OnPermanent: "ignore", Backoff: route.Backoff{Initial: 2 * time.Second, Max: time.Second, Multiplier: 0.5, Jitter: 2}}
	err := bad.Validate()
	require.Error(t, err)
	for _, want := range []string{"max attempts", "redelivery", "on permanent", "initial", "multiplier", "jitter"} {
		assert.ErrorContains(t, err, want)
	}
}

func TestPolicyForQueue(t *testing.T) {
	t.Parallel()
	base := route.DefaultPolicy()
	base.Redelivery = route.Broker

	t.Run("the topology's policy block overrides, its DLQ fills in", func(t *testing.T) {
		t.Parallel()
		q := topology.Queue{
			Name: "work", MaxReceives: 5, DeadLetter: &topology.DeadLetter{Queue: "work-dlq"},
			Policy: &topology.Policy{MaxAttempts: 5, OnPermanent: topology.Drop, Backoff: &topology.Backoff{Initial: 3 * time.Second}},
		}
		got, err := base.ForQueue(q)
		require.NoError(t, err)
		assert.Equal(t, 5, got.MaxAttempts)
		assert.Equal(t, route.Drop, got.OnPermanent)
		assert.Equal(t, route.Broker, got.Redelivery, "not overridden")
		assert.Equal(t, 3*time.Second, got.Backoff.Initial)
		assert.Equal(t, base.Backoff.Max, got.Backoff.Max)
		assert.Equal(t, "work-dlq", got.DeadLetterQueue)
	})
	t.Run("broker redelivery beyond max_receives is refused", func(t *testing.T) {
		t.Parallel()
		q := topology.Queue{Name: "work", MaxReceives: 2, DeadLetter: &topology.DeadLetter{Queue: "work-dlq"}}
		_, err := base.ForQueue(q)
		assert.ErrorContains(t, err, "max_receives")
	})
	t.Run("a route and its topology must agree on the DLQ", func(t *testing.T) {
		t.Parallel()
		p := base
		p.DeadLetterQueue = "elsewhere"
		_, err := p.ForQueue(topology.Queue{Name: "work", DeadLetter: &topology.DeadLetter{Queue: "work-dlq"}})
		assert.ErrorContains(t, err, "elsewhere")
	})
}

func TestTopologyRejectsABadPolicy(t *testing.T) {
	t.Parallel()
	_, err := topology.Parse([]byte(`
name: t
queues:
  - name: work
    max_receives: 3
    dead_letter: {queue: work-dlq}
    policy:
      max_attempts: 4
      redelivery: broker
      on_permanent: ignore
      backoff: {multiplier: 0.5}
`))
	require.Error(t, err)
	for _, want := range []string{"queues[0].policy.max_attempts", "queues[0].policy.on_permanent", "queues[0].policy.backoff.multiplier"} {
		assert.ErrorContains(t, err, want)
	}
}
