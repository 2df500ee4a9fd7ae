package inbox_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/inbox"
)

// suiteStore is a store under the suite, with what an effect on it writes.
// What the suite counts is what committed: on PostgreSQL an effect is its
// statements in Process's transaction, and a duplicate's never commit (its
// code before its first statement may run: the marker goes with that
// statement); the memory twin runs a duplicate's effect not at all, so there
// a run is a commit.
type suiteStore struct {
	inbox.Store
	// write is an effect's write: a row through ctx's transaction on
	// PostgreSQL, a counted run on the memory twin.
	write func(ctx context.Context) error
	// committed counts the writes that committed.
	committed func(t *testing.T) int
}

// runSuite is the one behaviour every Store shares; each store's test calls
// it with a constructor that returns a fresh, empty store.
func runSuite(t *testing.T, newStore func(t *testing.T) suiteStore) {
	t.Helper()
	ctx := context.Background()

	t.Run("runs once then reports a duplicate", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		require.NoError(t, s.Process(ctx, "c", "m1", s.write))
		err := s.Process(ctx, "c", "m1", s.write)
		require.Error(t, err)
		assert.Equal(t, failure.Duplicate, failure.Of(err))
		assert.ErrorIs(t, err, inbox.ErrProcessed)
		assert.Equal(t, 1, s.committed(t))
	})

	t.Run("consumers are independent", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		require.NoError(t, s.Process(ctx, "a", "m1", s.write))
		require.NoError(t, s.Process(ctx, "b", "m1", s.write))
		require.NoError(t, s.Process(ctx, "a", "m2", s.write))
		assert.Equal(t, 3, s.committed(t))
	})

	t.Run("effect error is returned unchanged and leaves no mark", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		boom := errors.New("boom")
		err := s.Process(ctx, "c", "m1", func(context.Context) error { return boom })
		assert.Same(t, boom, err) //nolint:testifylint // the very error, not a wrap
		require.NoError(t, s.Process(ctx, "c", "m1", s.write))
		assert.Equal(t, 1, s.committed(t))
	})

	t.Run("panicking effect leaves no mark", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		func() {
			defer func() { assert.NotNil(t, recover()) }()
			_ = s.Process(ctx, "c", "m1", func(context.Context) error { panic("boom") })
		}()
		require.NoError(t, s.Process(ctx, "c", "m1", s.write))
		assert.Equal(t, 1, s.committed(t))
	})

	t.Run("empty id or consumer is permanent and runs nothing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		for _, k := range [][2]string{{"c", ""}, {"", "m1"}} {
			err := s.Process(ctx, k[0], k[1], s.write)
			require.Error(t, err)
			assert.Equal(t, failure.Permanent, failure.Of(err), "%q", k)
			assert.Equal(t, failure.Permanent, failure.Of(s.Unmark(ctx, k[0], k[1])), "%q", k)
		}
		assert.Equal(t, 0, s.committed(t))
	})

	t.Run("concurrent deliveries run the effect exactly once", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		var dups atomic.Int32
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				err := s.Process(ctx, "c", "m1", func(ctx context.Context) error {
					if err := s.write(ctx); err != nil {
						return err
					}
					time.Sleep(30 * time.Millisecond)
					return nil
				})
				if failure.Of(err) == failure.Duplicate {
					dups.Add(1)
				} else {
					assert.NoError(t, err)
				}
			})
		}
		wg.Wait()
		assert.Equal(t, 1, s.committed(t))
		assert.Equal(t, int32(7), dups.Load())
	})

	t.Run("a waiting delivery runs when the first one fails", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		entered, release := make(chan struct{}), make(chan struct{})
		first := make(chan error, 1)
		go func() {
			first <- s.Process(ctx, "c", "m1", func(ctx context.Context) error {
				if err := s.write(ctx); err != nil {
					return err
				}
				close(entered)
				<-release
				return errors.New("first attempt failed")
			})
		}()
		<-entered
		second := make(chan error, 1)
		var ran atomic.Bool
		go func() {
			second <- s.Process(ctx, "c", "m1", func(ctx context.Context) error {
				if err := s.write(ctx); err != nil {
					return err
				}
				ran.Store(true)
				return nil
			})
		}()
		select {
		case err := <-second:
			require.Failf(t, "second delivery did not wait for the first", "it returned %v", err)
		case <-time.After(150 * time.Millisecond):
		}
		close(release)
		require.Error(t, <-first)
		require.NoError(t, <-second)
		assert.True(t, ran.Load())
	})

	t.Run("a live lease keeps a second delivery out, never as a duplicate", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		l, err := s.Lease(ctx, "c", "m1", time.Minute)
		require.NoError(t, err)
		_, err = s.Lease(ctx, "c", "m1", time.Minute)
		require.Error(t, err)
		assert.Equal(t, failure.Transient, failure.Of(err), "retried later, not acknowledged")
		assert.ErrorIs(t, err, inbox.ErrLeased)
		assert.Greater(t, failure.RetryAfter(err), 30*time.Second, "retry after the lease's time left")
		_, err = s.Lease(ctx, "other", "m1", time.Minute)
		require.NoError(t, err, "leases are per consumer")

		l.Release()
		l.Release() // twice is fine
		l2, err := s.Lease(ctx, "c", "m1", time.Minute)
		require.NoError(t, err, "a released lease lets the redelivery run at once")
		// The work's answer commits the marker; later deliveries are
		// duplicates.
		require.NoError(t, s.Process(ctx, "c", "m1", func(context.Context) error { return nil }))
		l2.Release()
		_, err = s.Lease(ctx, "c", "m1", time.Minute)
		assert.Equal(t, failure.Duplicate, failure.Of(err))
	})

	t.Run("a held lease is renewed past its ttl", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		l, err := s.Lease(ctx, "c", "m1", 300*time.Millisecond)
		require.NoError(t, err)
		defer l.Release()
		time.Sleep(900 * time.Millisecond)
		_, err = s.Lease(ctx, "c", "m1", time.Minute)
		assert.ErrorIs(t, err, inbox.ErrLeased, "still held three ttls later: renewed")
	})

	t.Run("lease refuses an empty key and a tiny ttl", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		_, err := s.Lease(ctx, "", "m1", time.Minute)
		assert.Equal(t, failure.Permanent, failure.Of(err))
		_, err = s.Lease(ctx, "c", "m1", time.Millisecond)
		assert.Error(t, err)
	})

	t.Run("unmark allows processing again", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		require.NoError(t, s.Process(ctx, "c", "m1", s.write))
		require.NoError(t, s.Unmark(ctx, "c", "m1"))
		require.NoError(t, s.Unmark(ctx, "c", "never-seen"))
		require.NoError(t, s.Process(ctx, "c", "m1", s.write))
		assert.Equal(t, 2, s.committed(t))
	})

	t.Run("cleanup deletes only markers older than the ttl", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		require.NoError(t, s.Process(ctx, "c", "m1", s.write))
		require.NoError(t, s.Process(ctx, "c", "m2", s.write))
		time.Sleep(60 * time.Millisecond)
		require.NoError(t, s.Process(ctx, "c", "m3", s.write))
		deleted, err := s.Cleanup(ctx, time.Hour)
		require.NoError(t, err)
		assert.Equal(t, int64(0), deleted)
		deleted, err = s.Cleanup(ctx, 40*time.Millisecond)
		require.NoError(t, err)
		assert.Equal(t, int64(2), deleted)
		require.NoError(t, s.Process(ctx, "c", "m1", s.write), "cleaned marker")
		assert.Equal(t, failure.Duplicate, failure.Of(s.Process(ctx, "c", "m3", s.write)), "young marker kept")
	})

	t.Run("janitor cleans periodically until stopped", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		require.NoError(t, s.Process(ctx, "c", "m1", s.write))
		jctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- inbox.Janitor{Store: s, TTL: time.Millisecond, Interval: 10 * time.Millisecond}.Run(jctx)
		}()
		assert.Eventually(t, func() bool {
			err := s.Process(ctx, "c", "m1", func(context.Context) error { return nil })
			return err == nil
		}, 5*time.Second, 20*time.Millisecond)
		stop()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(5 * time.Second):
			require.FailNow(t, "janitor did not stop")
		}
	})
}

func TestMemory(t *testing.T) {
	t.Parallel()
	runSuite(t, func(*testing.T) suiteStore {
		var runs atomic.Int32
		return suiteStore{
			Store:     inbox.NewMemory(),
			write:     func(context.Context) error { runs.Add(1); return nil },
			committed: func(*testing.T) int { return int(runs.Load()) },
		}
	})
}
