package routing_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/routing"
	"github.com/eventpipe/eventpipe/app/broker/routing/routingtest"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/topology"
)

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
			rp, err := routing.New(rec, routingtest.Topology())
			require.NoError(t, err)
			msg := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
			msg.Metadata.Set("traceId", "t-1")
			err = rp.Publish(c.topic, msg)
			if c.want == nil {
				var unroutable *routing.UnroutableError
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
					assert.Equal(t, ex, got.Metadata.Get(metadata.ExchangeKey))
					assert.Equal(t, key, got.Metadata.Get(metadata.RoutingKeyKey))
				}
			}
			assert.Empty(t, msg.Metadata.Get(metadata.RoutingKeyKey), "the caller's message is not changed")
		})
	}
}

func TestRoutingPublisherErrors(t *testing.T) {
	t.Parallel()
	rec := &recorder{fail: map[string]error{"q.realtime": errors.New("boom")}}
	rp, err := routing.New(rec, routingtest.Topology())
	require.NoError(t, err)

	err = rp.Publish("nope/x", message.NewMessage(watermill.NewUUID(), nil))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `exchange "nope" is not declared`)

	var unroutable *routing.UnroutableError
	require.ErrorAs(t, rp.Publish("core/nothing.here", message.NewMessage(watermill.NewUUID(), nil)), &unroutable)

	err = rp.Publish("core/analyze.resume", message.NewMessage(watermill.NewUUID(), nil))
	var routeErr *routing.RouteError
	require.ErrorAs(t, err, &routeErr)
	assert.Equal(t, []string{"q.analyze"}, routeErr.Sent, "the other queue still got it")
	assert.Contains(t, routeErr.Failed, "q.realtime")
	assert.Contains(t, err.Error(), "boom")

	_, err = routing.New(rec, topology.Topology{Name: "bad", Exchanges: []topology.Exchange{{Name: "a/b", Type: topology.Topic}}})
	require.Error(t, err)
}

func TestNativePublisherChecksAndHandsOn(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	rp, err := routing.NewNative(rec, routingtest.Topology())
	require.NoError(t, err)
	require.NoError(t, rp.Publish("core/analyze.resume", message.NewMessage(watermill.NewUUID(), nil)))
	assert.Equal(t, []string{"core/analyze.resume"}, rec.topics(), "the broker routes")
	sent := rec.sent["core/analyze.resume"][0]
	assert.Equal(t, "core", sent.Metadata.Get(metadata.ExchangeKey))
	var unroutable *routing.UnroutableError
	require.ErrorAs(t, rp.Publish("core/nothing.here", message.NewMessage(watermill.NewUUID(), nil)), &unroutable)
}
