package joinlink_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/handlers/joinlink"
)

// The make run demo, as serve runs it on the embedded broker.
func TestSampleTraffic(t *testing.T) {
	t.Parallel()
	ps := testbrokers.New(t, "memory", "")
	store := joinlink.NewMemory()
	schedules := joinlink.NewMemorySchedules()
	gen := joinlink.NewMemoryGenerator()
	svc := &joinlink.Service{Store: store, Generator: gen, Scheduler: &joinlink.Scheduler{Enabled: true, Schedules: schedules}}
	testbrokers.StartRoutes(t, ps, nil, nil, joinlink.Handlers{Service: svc}.Routes()...)
	d := &joinlink.Dispatcher{Schedules: schedules, Publisher: ps, Interval: 100 * time.Millisecond}
	dctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(dctx) }()
	t.Cleanup(func() { stop(); <-done })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, joinlink.SampleTraffic(ctx, svc, slog.New(slog.DiscardHandler)))
	require.NoError(t, ctx.Err(), "done before the deadline")
	for _, id := range []int64{1, 2} {
		s, err := store.Session(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, joinlink.Completed, s.Status)
		assert.Equal(t, 1, gen.Calls(id))
	}
}
