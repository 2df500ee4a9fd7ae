package pgnotify_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/handlers/realtime"
	"github.com/eventpipe/eventpipe/handlers/realtime/pgnotify"
)

func newBus(t *testing.T, channel string) *pgnotify.Bus {
	t.Helper()
	b, err := pgnotify.New(t.Context(), pgnotify.Config{DSN: testenv.PostgresDSN(t), Channel: channel})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return b
}

// Every listener receives every event, in order, whatever its size: events
// over NOTIFY's 8000-byte limit travel in chunks of one transaction.
func TestEveryListenerReceivesEveryEvent(t *testing.T) {
	t.Parallel()
	channel := "ep_rt_" + strings.ToLower(watermill.NewShortUUID())
	a, b := newBus(t, channel), newBus(t, channel)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	inA, err := a.Subscribe(ctx)
	require.NoError(t, err)
	inB, err := b.Subscribe(ctx)
	require.NoError(t, err)

	sizes := []int{0, 10, 7000, 20_000, 64 << 10, 3}
	var sent []realtime.Event
	for i, n := range sizes {
		data, _ := json.Marshal(map[string]string{"text": strings.Repeat("가", n/3)})
		e := realtime.Event{Channel: realtime.Channel{Kind: realtime.Session, ID: 1}, ID: fmt.Sprint("m", i), Type: "SESSION_MESSAGE", Data: data}
		sent = append(sent, e)
		// Publishers on both sides: one stream per channel, whoever sends.
		pub := a
		if i%2 == 1 {
			pub = b
		}
		require.NoError(t, pub.Publish(ctx, e))
	}
	for name, in := range map[string]<-chan realtime.Event{"a": inA, "b": inB} {
		for i, want := range sent {
			select {
			case got := <-in:
				assert.Equal(t, want.ID, got.ID, "%s: event %d", name, i)
				assert.JSONEq(t, string(want.Data), string(got.Data), "%s: event %d", name, i)
			case <-ctx.Done():
				require.Failf(t, "not every event arrived", "%s: received %d of %d events", name, i, len(sent))
			}
		}
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	_, err := pgnotify.New(t.Context(), pgnotify.Config{Channel: "Bad-Name"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "DSN is required")
	assert.Contains(t, err.Error(), "lower-case identifier")
}
