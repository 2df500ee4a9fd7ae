package sqs_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/routing"
	"github.com/eventpipe/eventpipe/app/broker/routing/routingtest"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/config"
)

// End to end on the emulator: Apply, publish by routing key, each bound queue
// receives the message with its exchange and routing key.
func TestRoutingOnSQS(t *testing.T) {
	t.Parallel()
	tp := uniqueTopology(t, routingtest.Topology())
	ps := newPubSub(t, testConfig(t))
	applyInSync(t, ps, tp)
	rp, err := routing.New(ps, tp)
	require.NoError(t, err)

	core := tp.Exchanges[0].Name
	gen, analyze, realtime := tp.Queues[0].Name, tp.Queues[1].Name, tp.Queues[2].Name
	sent := message.NewMessage(watermill.NewUUID(), []byte(`{"messageType":"analyze.resume"}`))
	require.NoError(t, rp.Publish(core+"/analyze.resume", sent))

	c := rawClient(t)
	for q, want := range map[string]int{gen: 0, analyze: 1, realtime: 1} {
		visible, _ := depth(t, c, queueURL(t, c, q))
		assert.Equal(t, want, visible, q)
	}
	msgs, err := ps.Subscribe(context.Background(), realtime)
	require.NoError(t, err)
	got := brokertest.Next(t, msgs, 10*time.Second)
	assert.Equal(t, sent.UUID, got.UUID)
	assert.Equal(t, core, got.Metadata.Get(metadata.ExchangeKey))
	assert.Equal(t, "analyze.resume", got.Metadata.Get(metadata.RoutingKeyKey))
	got.Ack()
}

// Every binding of every spec topology (the files config ships) routes on
// SQS: a message published with a key that matches the binding's pattern
// reaches the bound queue.
func TestRoutingSpecTopologies(t *testing.T) {
	t.Parallel()
	names := config.TopologyNames()
	require.NotEmpty(t, names, "config ships no spec topology")
	for _, name := range names {
		data, err := config.TopologyFile(name)
		require.NoError(t, err)
		tp, err := topology.Parse(data)
		require.NoError(t, err, name)
		if len(tp.Bindings) == 0 {
			continue
		}
		t.Run(tp.Name, func(t *testing.T) {
			t.Parallel()
			tp := uniqueTopology(t, tp)
			ps := newPubSub(t, testConfig(t))
			applyInSync(t, ps, tp)
			rp, err := routing.New(ps, tp)
			require.NoError(t, err)
			c := rawClient(t)
			want := map[string]int{}
			for _, b := range tp.AllBindings() {
				// A key the pattern matches: '*' → one word, '#' → none.
				key := strings.ReplaceAll(b.Pattern, "*", "x")
				key = strings.Trim(strings.ReplaceAll(strings.ReplaceAll(key, ".#.", "."), "#", ""), ".")
				if key == "" {
					key = "x"
				}
				if b.Pattern != "" {
					require.True(t, topology.Match(b.Pattern, key), "%s → %s", b.Pattern, key)
				}
				routed := tp.Route(b.Exchange, key)
				require.Contains(t, routed, b.Queue, "%s/%s", b.Exchange, key)
				require.NoError(t, rp.Publish(b.Exchange+"/"+key, message.NewMessage(watermill.NewUUID(), []byte(`{}`))))
				for _, q := range routed {
					want[q]++
				}
			}
			for q, n := range want {
				visible, _ := depth(t, c, queueURL(t, c, q))
				assert.Equal(t, n, visible, q)
			}
		})
	}
}
