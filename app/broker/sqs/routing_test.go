package sqs_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/sqs"
	"github.com/eventpipe/eventpipe/app/topology"
)

// A StackUp-like topology: a topic exchange with exact and wildcard keys, a
// realtime queue bound to wildcard keys, a fanout exchange, DLQs.
func routingTopology() topology.Topology {
	dlq := func(q string) *topology.DeadLetter { return &topology.DeadLetter{Queue: q + ".dlq"} }
	return topology.Topology{
		Name: "routing",
		Exchanges: []topology.Exchange{
			{Name: "core", Type: topology.Topic},
			{Name: "broadcast", Type: topology.Fanout},
		},
		Queues: []topology.Queue{
			{Name: "q.generate", MaxReceives: 3, DeadLetter: dlq("q.generate")},
			{Name: "q.analyze", MaxReceives: 3, DeadLetter: dlq("q.analyze")},
			{Name: "q.realtime"},
		},
		Bindings: []topology.Binding{
			{Exchange: "core", Queue: "q.generate", Pattern: "generate.questions"},
			{Exchange: "core", Queue: "q.analyze", Pattern: "analyze.*"},
			{Exchange: "core", Queue: "q.realtime", Pattern: "*.completed"},
			{Exchange: "core", Queue: "q.realtime", Pattern: "#.failed"},
			{Exchange: "core", Queue: "q.realtime", Pattern: "analyze.resume"},
			{Exchange: "broadcast", Queue: "q.generate"},
			{Exchange: "broadcast", Queue: "q.realtime"},
		},
	}
}

// recorder is a message.Publisher that records what it is given.
type recorder struct {
	mu   sync.Mutex
	sent map[string][]*message.Message
	fail map[string]error
}

func (r *recorder) Publish(topic string, msgs ...*message.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.fail[topic]; err != nil {
		return err
	}
	if r.sent == nil {
		r.sent = map[string][]*message.Message{}
	}
	r.sent[topic] = append(r.sent[topic], msgs...)
	return nil
}

func (r *recorder) Close() error { return nil }

func (r *recorder) topics() []string {
	var out []string
	for k := range r.sent {
		out = append(out, k)
	}
	return out
}

func TestRoutingPublisherRoutes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		topic string
		want  []string
	}{
		{"core/generate.questions", []string{"q.generate"}},
		{"core/analyze.resume", []string{"q.analyze", "q.realtime"}}, // each queue once, though two bindings match
		{"core/analyze.cover_letter", []string{"q.analyze"}},
		{"core/generate.completed", []string{"q.realtime"}},
		{"core/a.b.c.failed", []string{"q.realtime"}},
		{"core/failed", []string{"q.realtime"}}, // '#' matches zero words
		{"broadcast/anything", []string{"q.generate", "q.realtime"}},
		{"q.analyze", []string{"q.analyze"}},  // a queue name: as it is
		{"/q.analyze", []string{"q.analyze"}}, // the default exchange
		{"core/generate.questions/x", nil},    // '/' belongs to the key: no binding
	}
	for _, c := range cases {
		t.Run(c.topic, func(t *testing.T) {
			rec := &recorder{}
			rp, err := sqs.NewRoutingPublisher(rec, routingTopology())
			require.NoError(t, err)
			msg := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
			msg.Metadata.Set("traceId", "t-1")
			err = rp.Publish(c.topic, msg)
			if c.want == nil {
				var unroutable *sqs.UnroutableError
				require.ErrorAs(t, err, &unroutable)
				assert.Equal(t, "generate.questions/x", unroutable.RoutingKey)
				assert.Empty(t, rec.sent)
				return
			}
			require.NoError(t, err)
			assert.ElementsMatch(t, c.want, rec.topics())
			for _, q := range c.want {
				require.Len(t, rec.sent[q], 1)
				got := rec.sent[q][0]
				assert.Equal(t, msg.UUID, got.UUID)
				assert.Equal(t, "t-1", got.Metadata.Get("traceId"))
				if ex, key, ok := strings.Cut(c.topic, "/"); ok && ex != "" {
					assert.Equal(t, ex, got.Metadata.Get(sqs.ExchangeKey))
					assert.Equal(t, key, got.Metadata.Get(sqs.RoutingKeyKey))
				}
			}
			assert.Empty(t, msg.Metadata.Get(sqs.RoutingKeyKey), "the caller's message is not changed")
		})
	}
}

func TestRoutingPublisherErrors(t *testing.T) {
	t.Parallel()
	rec := &recorder{fail: map[string]error{"q.realtime": errors.New("boom")}}
	rp, err := sqs.NewRoutingPublisher(rec, routingTopology())
	require.NoError(t, err)

	err = rp.Publish("nope/x", message.NewMessage(watermill.NewUUID(), nil))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `exchange "nope" is not declared`)

	var unroutable *sqs.UnroutableError
	require.ErrorAs(t, rp.Publish("core/nothing.here", message.NewMessage(watermill.NewUUID(), nil)), &unroutable)

	err = rp.Publish("core/analyze.resume", message.NewMessage(watermill.NewUUID(), nil))
	var routeErr *sqs.RouteError
	require.ErrorAs(t, err, &routeErr)
	assert.Equal(t, []string{"q.analyze"}, routeErr.Sent, "the other queue still got it")
	assert.Contains(t, routeErr.Failed, "q.realtime")
	assert.Contains(t, err.Error(), "boom")

	_, err = sqs.NewRoutingPublisher(rec, topology.Topology{Name: "bad", Exchanges: []topology.Exchange{{Name: "a/b", Type: topology.Topic}}})
	require.Error(t, err)
}

// End to end on the emulator: Apply, publish by routing key, each bound queue
// receives the message with its exchange and routing key.
func TestRoutingOnSQS(t *testing.T) {
	t.Parallel()
	tp := uniqueTopology(t, routingTopology())
	ps := newPubSub(t, testConfig(t))
	applyInSync(t, ps, tp)
	rp, err := sqs.NewRoutingPublisher(ps, tp)
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
	assert.Equal(t, core, got.Metadata.Get(sqs.ExchangeKey))
	assert.Equal(t, "analyze.resume", got.Metadata.Get(sqs.RoutingKeyKey))
	got.Ack()
}

// Every binding of every spec topology routes on SQS: a message published
// with a key that matches the binding's pattern reaches the bound queue.
func TestRoutingSpecTopologies(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../../config/topology/*.yaml")
	require.NoError(t, err)
	if len(files) == 0 {
		t.Skip("no config/topology/*.yaml yet")
	}
	for _, f := range files {
		tp, err := topology.Load(f)
		require.NoError(t, err)
		if len(tp.Bindings) == 0 {
			continue
		}
		t.Run(tp.Name, func(t *testing.T) {
			t.Parallel()
			tp := uniqueTopology(t, tp)
			ps := newPubSub(t, testConfig(t))
			applyInSync(t, ps, tp)
			rp, err := sqs.NewRoutingPublisher(ps, tp)
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
