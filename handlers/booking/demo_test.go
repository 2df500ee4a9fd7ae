package booking_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/handlers/booking"
)

// The make run demo, as serve runs it on the embedded broker.
func TestSampleTraffic(t *testing.T) {
	t.Parallel()
	ps := testbrokers.New(t, "memory", "")
	store := booking.NewMemory()
	testbrokers.StartRoutes(t, ps, nil, nil, booking.Handlers{Store: store, Inbox: inbox.NewMemory()}.Routes()...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rec := &recorder{next: ps}
	require.NoError(t, booking.SampleTraffic(ctx, booking.Producer{Publisher: rec}, store, slog.New(slog.DiscardHandler)))
	require.NoError(t, ctx.Err(), "done before the deadline")
	sent := rec.sent()
	require.Len(t, sent, 4)
	assert.Equal(t, sent[0].UUID, sent[1].UUID, "HTTP and Socket.IO of one logical event: one id")
	s, ok, err := store.Session(ctx, sent[0].Metadata.Get("x-group-id"))
	require.NoError(t, err)
	require.True(t, ok)
	time.Sleep(200 * time.Millisecond) // the duplicate's delivery, if any, would land now
	s, _, _ = store.Session(ctx, s.ID)
	assert.Equal(t, int64(3), s.Events)
	assert.Equal(t, booking.StatusCompleted, s.Status)
}
