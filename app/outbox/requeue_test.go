package outbox_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/outbox"
)

// parkedEnv has parked rows a-1, a-2 (topic a) and b-1 (topic b), an
// unpublished row w-1 and a published row p-1.
func parkedEnv(t *testing.T) env {
	t.Helper()
	e := newEnv(t)
	e.write(t, "a", msgs("a", 2)...)
	e.write(t, "b", msgs("b", 1)...)
	e.write(t, "a", msgs("w", 1)...)
	e.write(t, "a", msgs("p", 1)...)
	_, err := e.pool.Exec(context.Background(), `UPDATE `+e.q("outbox")+` SET parked_at = now(), attempts = 3,
		last_error = 'refused', next_attempt_at = now() + interval '1 hour' WHERE event_id IN ('a-0', 'a-1', 'b-0')`)
	require.NoError(t, err)
	_, err = e.pool.Exec(context.Background(), `UPDATE `+e.q("outbox")+` SET published_at = now() WHERE event_id = 'p-0'`)
	require.NoError(t, err)
	return e
}

func TestRequeue(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		filter outbox.RequeueFilter
		want   []string
	}{
		"all":             {outbox.RequeueFilter{All: true}, []string{"a-0", "a-1", "b-0"}},
		"all of a topic":  {outbox.RequeueFilter{All: true, Topic: "a"}, []string{"a-0", "a-1"}},
		"ids":             {outbox.RequeueFilter{EventIDs: []string{"a-1", "b-0", "w-0", "p-0", "nope"}}, []string{"a-1", "b-0"}},
		"ids of a topic":  {outbox.RequeueFilter{EventIDs: []string{"a-1", "b-0"}, Topic: "b"}, []string{"b-0"}},
		"none of a topic": {outbox.RequeueFilter{All: true, Topic: "c"}, nil},
		"unknown id only": {outbox.RequeueFilter{EventIDs: []string{"nope"}}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := parkedEnv(t)
			n, err := e.table.Requeue(ctx, e.pool, c.filter)
			require.NoError(t, err)
			assert.Equal(t, int64(len(c.want)), n)
			for _, id := range []string{"a-0", "a-1", "b-0"} {
				s := e.row(t, id)
				requeued := slices.Contains(c.want, id)
				assert.Equal(t, !requeued, s.Parked, id)
				if requeued {
					assert.Zero(t, s.Attempts, id)
					assert.Equal(t, 1, e.count(t, "event_id = $1 AND next_attempt_at <= now()", id), id)
				}
			}
			assert.True(t, e.row(t, "p-0").Published, "a published row stays published")
		})
	}
}

func TestRequeueRefusesAnEmptyOrAmbiguousSelection(t *testing.T) {
	t.Parallel()
	e := parkedEnv(t)
	for _, f := range []outbox.RequeueFilter{{}, {Topic: "a"}, {All: true, EventIDs: []string{"a-0"}}} {
		n, err := e.table.Requeue(context.Background(), e.pool, f)
		require.ErrorIs(t, err, outbox.ErrRequeueSelection, "%+v", f)
		assert.Zero(t, n)
	}
	assert.Equal(t, 3, e.count(t, "parked_at IS NOT NULL"), "nothing requeued")
	_, err := outbox.Table{Schema: "Bad-Name"}.Requeue(context.Background(), e.pool, outbox.RequeueFilter{All: true})
	require.Error(t, err)
}

// A requeue wakes the relays at once (NOTIFY), not at their next poll.
func TestRequeueWakesTheRelay(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := parkedEnv(t)
	_, err := e.pool.Exec(ctx, `DELETE FROM `+e.q("outbox")+` WHERE event_id = 'w-0'`)
	require.NoError(t, err)
	pub := &fakePublisher{}
	r := e.relay(t, pub, outbox.RelayConfig{PollInterval: time.Hour})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	waitListening(t, e)

	n, err := e.table.Requeue(ctx, e.pool, outbox.RequeueFilter{EventIDs: []string{"b-0"}})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.Eventually(t, func() bool { return e.row(t, "b-0").Published }, 10*time.Second, 10*time.Millisecond)
	assert.True(t, e.row(t, "a-0").Parked)
	stop()
	require.NoError(t, <-done)
}
