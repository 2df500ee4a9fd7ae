package joinlink_test

// One suite for both stores: the state machine's transitions, the atomic
// claim (concurrent claimers, stale reclaim, COMPLETED never reclaimed) and
// the sweep's candidate query.

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/handlers/joinlink"
)

func newStores(t *testing.T) map[string]func(t *testing.T) joinlink.Store {
	t.Helper()
	return map[string]func(t *testing.T) joinlink.Store{
		"memory": func(*testing.T) joinlink.Store { return joinlink.NewMemory() },
		"postgres": func(t *testing.T) joinlink.Store {
			pool, schema := dbtest.Schema(t)
			s, err := joinlink.NewPostgres(pool, schema)
			require.NoError(t, err)
			return s
		},
	}
}

func TestStores(t *testing.T) {
	t.Parallel()
	for name, newStore := range newStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			storeSuite(t, newStore(t))
		})
	}
}

func storeSuite(t *testing.T, s joinlink.Store) {
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 123456789, time.UTC)
	stale := func(now time.Time) time.Time { return now.Add(-joinlink.StaleAfter) }

	id, err := s.CreateSession(ctx, t0)
	require.NoError(t, err)
	sess, err := s.Session(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, joinlink.NotScheduled, sess.Status)
	assert.Nil(t, sess.LinkGenerationAt)
	_, err = s.Session(ctx, id+1000)
	require.ErrorIs(t, err, joinlink.ErrNotFound)

	won, err := s.Claim(ctx, id, 0, t0, stale(t0))
	require.NoError(t, err)
	assert.False(t, won, "NOT_SCHEDULED is never claimed")

	at := t0.Add(time.Hour)
	sess, err = s.SetLinkGeneration(ctx, id, &at, 7, t0, stale(t0))
	require.NoError(t, err)
	assert.Equal(t, joinlink.Scheduled, sess.Status)
	require.NotNil(t, sess.LinkGenerationAt)
	assert.Equal(t, at.Truncate(time.Microsecond), *sess.LinkGenerationAt)
	assert.Equal(t, int64(7), sess.UpdatedBy, "updated_by stamped")
	sess, err = s.SetLinkGeneration(ctx, id, nil, 7, t0, stale(t0))
	require.NoError(t, err)
	assert.Equal(t, joinlink.NotScheduled, sess.Status, "cleared")
	assert.Nil(t, sess.LinkGenerationAt)
	_, err = s.SetLinkGeneration(ctx, id+1000, &at, 7, t0, stale(t0))
	require.ErrorIs(t, err, joinlink.ErrNotFound)
	_, err = s.SetLinkGeneration(ctx, id, &at, 7, t0, stale(t0))
	require.NoError(t, err)

	// SCHEDULED → IN_PROGRESS: one winner among concurrent claimers.
	t1 := t0.Add(time.Hour)
	var wins atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			won, err := s.Claim(ctx, id, 0, t1, stale(t1))
			assert.NoError(t, err)
			if won {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(1), wins.Load(), "concurrent claims: one winner")
	sess, err = s.Session(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, joinlink.InProgress, sess.Status)
	_, err = s.SetLinkGeneration(ctx, id, &at, 7, t1, stale(t1))
	require.ErrorIs(t, err, joinlink.ErrInProgress, "no rescheduling under a live run")

	// Not stale yet (29 min): lost. Stale (31 min): reclaimed.
	t2 := t1.Add(29 * time.Minute)
	won, err = s.Claim(ctx, id, 0, t2, stale(t2))
	require.NoError(t, err)
	assert.False(t, won, "IN_PROGRESS within the stale window is not reclaimed")
	t3 := t1.Add(31 * time.Minute)
	won, err = s.Claim(ctx, id, 0, t3, stale(t3))
	require.NoError(t, err)
	assert.True(t, won, "stale IN_PROGRESS reclaimed")

	// The crashed run's late finish is fenced off; the new run's lands.
	ok, err := s.Finish(ctx, id, t1, joinlink.Completed, 0, t3)
	require.NoError(t, err)
	assert.False(t, ok, "a reclaimed run cannot finish")
	ok, err = s.Finish(ctx, id, t3, joinlink.Failed, 0, t3)
	require.NoError(t, err)
	assert.True(t, ok)
	sess, err = s.Session(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, joinlink.Failed, sess.Status)

	// FAILED → IN_PROGRESS → COMPLETED, then never again.
	t4 := t3.Add(time.Minute)
	won, err = s.Claim(ctx, id, 0, t4, stale(t4))
	require.NoError(t, err)
	require.True(t, won, "FAILED reclaimed")
	ok, err = s.Finish(ctx, id, t4, joinlink.Completed, 0, t4)
	require.NoError(t, err)
	require.True(t, ok)
	far := t4.Add(48 * time.Hour)
	won, err = s.Claim(ctx, id, 0, far, stale(far))
	require.NoError(t, err)
	assert.False(t, won, "COMPLETED is never reclaimed")
	_, err = s.Finish(ctx, id, t4, joinlink.Scheduled, 0, t4)
	require.Error(t, err)

	// The sweep's candidates.
	mk := func(at time.Time) int64 {
		id, err := s.CreateSession(ctx, t0)
		require.NoError(t, err)
		_, err = s.SetLinkGeneration(ctx, id, &at, 0, t0, stale(t0))
		require.NoError(t, err)
		return id
	}
	now := t0.Add(10 * time.Hour)
	due := now.Add(-joinlink.Grace)
	older := mk(now.Add(-5 * time.Hour))
	old := mk(now.Add(-4 * time.Hour))
	inGrace := mk(now.Add(-10 * time.Minute))
	future := mk(now.Add(time.Hour))
	failed := mk(now.Add(-3 * time.Hour))
	w, err := s.Claim(ctx, failed, 0, now.Add(-2*time.Hour), stale(now.Add(-2*time.Hour)))
	require.NoError(t, err)
	require.True(t, w)
	_, err = s.Finish(ctx, failed, now.Add(-2*time.Hour), joinlink.Failed, 0, now.Add(-2*time.Hour))
	require.NoError(t, err)
	running := mk(now.Add(-3 * time.Hour))
	w, err = s.Claim(ctx, running, 0, now.Add(-10*time.Minute), stale(now.Add(-10*time.Minute)))
	require.NoError(t, err)
	require.True(t, w)
	stuck := mk(now.Add(-2 * time.Hour))
	w, err = s.Claim(ctx, stuck, 0, now.Add(-time.Hour), stale(now.Add(-time.Hour)))
	require.NoError(t, err)
	require.True(t, w)
	deleted := mk(now.Add(-6 * time.Hour))
	require.NoError(t, s.DeleteSession(ctx, deleted, now))
	_, err = s.Session(ctx, deleted)
	require.ErrorIs(t, err, joinlink.ErrNotFound)
	w, err = s.Claim(ctx, deleted, 0, now, stale(now))
	require.NoError(t, err)
	assert.False(t, w, "deleted sessions are not claimed")

	ids, err := s.DueForFallback(ctx, due, stale(now), 50)
	require.NoError(t, err)
	assert.Equal(t, []int64{older, old, failed, stuck}, ids, "overdue SCHEDULED/FAILED/stale only, oldest first; not %d (grace) %d (future) %d (running) %d (COMPLETED) %d (deleted)", inGrace, future, running, id, deleted)
	ids, err = s.DueForFallback(ctx, due, stale(now), 2)
	require.NoError(t, err)
	assert.Equal(t, []int64{older, old}, ids, "limit")
}
