package joinlink_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/config"
	"github.com/eventpipe/eventpipe/handlers/joinlink"
)

func TestRoute(t *testing.T) {
	t.Parallel()
	rs := joinlink.Catalog()
	require.Len(t, rs, 1)
	r, err := rs.ByQueue(joinlink.Queue)
	require.NoError(t, err)
	assert.Equal(t, route.Policy{MaxAttempts: 5, Redelivery: route.Broker, Backoff: joinlink.DefaultBackoff(), OnPermanent: route.Drop}, r.Policy)
	assert.Empty(t, r.Policy.DeadLetterQueue, "no DLQ by design (dec-07)")
	require.NoError(t, r.Policy.Validate())
	require.NoError(t, r.Validate([]byte(specExample)))
	require.Error(t, r.Validate([]byte(`{"subType":"JOIN_LINK_GENERATION","data":{"programSessionId":1}}`)), "publish is strict")
}

// The route's policy fits the shipped topology (what app.buildRoutes checks).
func TestRouteFitsTopology(t *testing.T) {
	t.Parallel()
	data, err := config.TopologyFile("joinlink")
	require.NoError(t, err)
	top, err := topology.Parse(data)
	require.NoError(t, err)
	r := joinlink.Catalog()[0]
	q, ok := top.Queue(r.Queue)
	require.True(t, ok, r.Queue)
	p, err := r.Policy.ForQueue(q)
	require.NoError(t, err)
	assert.Empty(t, p.DeadLetterQueue)
	assert.Equal(t, joinlink.MaxRetryAttempts, p.MaxAttempts)
}
