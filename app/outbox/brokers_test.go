package outbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/app/testbrokers"
)

// The relay on every broker: 120 events written in three transactions reach
// the broker, each exactly once, with their ids, bodies and metadata, and
// every row is marked published.
func TestRelayOnEveryBroker(t *testing.T) {
	t.Parallel()
	for _, b := range testbrokers.Kinds {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ps := testbrokers.New(t, b.Name, testbrokers.Scope(t, b.Name))
			topic := brokertest.Topic(t)
			if init, ok := ps.(message.SubscribeInitializer); ok {
				require.NoError(t, init.SubscribeInitialize(topic))
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			received, err := ps.Subscribe(ctx, topic)
			require.NoError(t, err)

			const n = 120
			prefix := watermill.NewShortUUID()
			all := msgs(prefix, n)
			for i, m := range all {
				m.Metadata.Set("x-trace-id", fmt.Sprintf("trace-%d", i))
			}
			for start := 0; start < n; start += 40 {
				e.write(t, topic, all[start:start+40]...)
			}

			r := e.relay(t, ps, outbox.RelayConfig{PollInterval: 200 * time.Millisecond})
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- r.Run(runCtx) }()

			seen := map[string]int{}
			deadline := time.After(60 * time.Second)
			for len(seen) < n {
				select {
				case m := <-received:
					seen[m.UUID]++
					assert.Equal(t, fmt.Sprintf(`{"n":%s}`, m.UUID[len(prefix)+1:]), string(m.Payload))
					assert.Equal(t, "trace-"+m.UUID[len(prefix)+1:], m.Metadata.Get("x-trace-id"))
					m.Ack()
				case <-deadline:
					require.Failf(t, "not every event arrived", "%d of %d events arrived", len(seen), n)
				}
			}
			select { // nothing published twice
			case m := <-received:
				require.Failf(t, "an event was published again", "event %s", m.UUID)
			case <-time.After(time.Second):
			}
			for id, c := range seen {
				assert.Equal(t, 1, c, id)
			}
			require.Eventually(t, func() bool {
				return e.count(t, "published_at IS NULL") == 0
			}, 10*time.Second, 50*time.Millisecond, "every row marked published")
			stop()
			require.NoError(t, <-done)
		})
	}
}
