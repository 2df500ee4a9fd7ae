package memory_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/memory"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// The suite publishes before it subscribes, which only a persistent GoChannel
// survives; Watermill runs its own GoChannel suite the same way.
func TestConformance(t *testing.T) {
	t.Parallel()
	brokertest.Run(t, brokertest.Features{
		Watermill: tests.Features{
			ExactlyOnceDelivery:   true,
			RequireSingleInstance: true,
		},
		CompetingConsumers: false,
	}, func(t *testing.T) broker.PubSub {
		ps, err := memory.New(memory.Config{Persistent: true, OutputBuffer: 10000}, nil)
		require.NoError(t, err)
		return ps
	})
}

// The default (not persistent) delivers to whoever subscribed before publish.
func TestDefaultDeliversToExistingSubscribers(t *testing.T) {
	t.Parallel()
	ps, err := memory.New(memory.Config{}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ps.Close() })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := ps.Subscribe(ctx, "demo")
	require.NoError(t, err)

	sent := message.NewMessage(watermill.NewUUID(), []byte("hi"))
	require.NoError(t, ps.Publish("demo", sent))
	select {
	case got := <-msgs:
		assert.Equal(t, sent.UUID, got.UUID)
		got.Ack()
	case <-time.After(5 * time.Second):
		require.FailNow(t, "message not delivered")
	}
	require.NoError(t, ps.Ping(ctx))
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	_, err := memory.New(memory.Config{OutputBuffer: -1}, nil)
	require.Error(t, err)
}

// Two messages failing on one subscription at the same time each keep their
// own attempt count (GoChannel interleaves their redeliveries).
func TestAttemptsPerMessage(t *testing.T) {
	t.Parallel()
	ps, err := memory.New(memory.Config{}, nil)
	require.NoError(t, err)
	defer func() { _ = ps.Close() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := ps.Subscribe(ctx, "t")
	require.NoError(t, err)
	require.NoError(t, ps.Publish("t", message.NewMessage("a", nil), message.NewMessage("b", nil)))

	last := map[string]int{}
	for range 8 {
		m := brokertest.Next(t, msgs, 5*time.Second)
		n, err := strconv.Atoi(m.Metadata.Get(metadata.AttemptKey))
		require.NoError(t, err)
		if prev, ok := last[m.UUID]; ok {
			assert.Equal(t, prev+1, n, "message %s", m.UUID)
		}
		last[m.UUID] = n
		m.Nack()
	}
	assert.Len(t, last, 2, "both messages redelivered")
}
