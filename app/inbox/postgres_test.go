package inbox_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/dbtx"
	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/inbox"
)

func TestPostgres(t *testing.T) {
	t.Parallel()
	runSuite(t, func(t *testing.T) suiteStore {
		s, e := newEffects(t)
		return suiteStore{Store: s, write: e.insert(nil), committed: e.count}
	})
}

// effectsTable is a business table for the tests: the effect writes a row.
type effectsTable struct {
	pool *pgxpool.Pool
	name string
}

func newEffects(t *testing.T) (*inbox.Postgres, effectsTable) {
	t.Helper()
	pool, schema := dbtest.Schema(t)
	s, err := inbox.NewPostgres(pool, schema)
	require.NoError(t, err)
	e := effectsTable{pool: pool, name: pgx.Identifier{schema, "effects"}.Sanitize()}
	_, err = pool.Exec(context.Background(), `CREATE TABLE `+e.name+` (id text)`)
	require.NoError(t, err)
	return s, e
}

// insert is an effect that writes a row through ctx's transaction, then
// fails if asked to.
func (e effectsTable) insert(fail error) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		tx, ok := dbtx.From(ctx)
		if !ok {
			return errors.New("no transaction in ctx")
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+e.name+` (id) VALUES ('e')`); err != nil {
			return err
		}
		return fail
	}
}

func (e effectsTable) count(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+e.name).Scan(&n))
	return n
}

// The effect writes through the transaction Process hands it: effect and
// marker commit together or neither does.
func TestPostgresEffectSharesTheTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, effects := newEffects(t)

	boom := errors.New("boom")
	require.ErrorIs(t, s.Process(ctx, "c", "m1", effects.insert(boom)), boom)
	assert.Equal(t, 0, effects.count(t), "a failed effect's write is rolled back")

	require.NoError(t, s.Process(ctx, "c", "m1", effects.insert(nil)))
	assert.Equal(t, 1, effects.count(t))
	err := s.Process(ctx, "c", "m1", effects.insert(nil))
	assert.Equal(t, failure.Duplicate, failure.Of(err))
	assert.Equal(t, 1, effects.count(t), "a duplicate has no effect")
}

// Inside a caller's transaction, Process uses a savepoint: the caller's
// rollback undoes marker and effect.
func TestPostgresJoinsTheCallersTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, effects := newEffects(t)

	tx, err := effects.pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Process(dbtx.WithTx(ctx, tx), "c", "m1", effects.insert(nil)))
	require.NoError(t, tx.Rollback(ctx))
	assert.Equal(t, 0, effects.count(t))

	tx, err = effects.pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Process(dbtx.WithTx(ctx, tx), "c", "m1", effects.insert(nil)))
	require.NoError(t, tx.Commit(ctx))
	assert.Equal(t, 1, effects.count(t))
	assert.Equal(t, failure.Duplicate, failure.Of(s.Process(ctx, "c", "m1", effects.insert(nil))))
}

func TestPostgresMarkTx(t *testing.T) {
	t.Parallel()
	for _, b := range []struct {
		name  string
		begin func(ctx context.Context, pool *pgxpool.Pool) (pgx.Tx, error)
	}{
		{"pgx transaction", func(ctx context.Context, pool *pgxpool.Pool) (pgx.Tx, error) { return pool.Begin(ctx) }},
		{"dbtx transaction", func(ctx context.Context, pool *pgxpool.Pool) (pgx.Tx, error) {
			return dbtx.BeginPipelined(ctx, pool)
		}},
	} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, effects := newEffects(t)

			mark := func(commit bool) bool {
				tx, err := b.begin(ctx, effects.pool)
				require.NoError(t, err)
				defer func() { _ = tx.Rollback(ctx) }()
				fresh, err := s.MarkTx(ctx, tx, "c", "m1")
				require.NoError(t, err)
				if commit {
					require.NoError(t, tx.Commit(ctx))
				}
				return fresh
			}
			assert.True(t, mark(false), "first mark")
			assert.True(t, mark(true), "a rolled-back mark does not count")
			assert.False(t, mark(false), "committed mark")
			seen, err := s.Seen(ctx, "c", "m1")
			require.NoError(t, err)
			assert.True(t, seen)

			tx, err := b.begin(ctx, effects.pool)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			_, err = s.MarkTx(ctx, tx, "c", "")
			assert.Equal(t, failure.Permanent, failure.Of(err))
		})
	}
}

func TestNewPostgresRejectsABadSchema(t *testing.T) {
	t.Parallel()
	_, err := inbox.NewPostgres(nil, `x"; drop table y; --`)
	require.Error(t, err)
}

// The marker is written in the effect's own transaction: the effect sees it
// through its transaction, another session does not until the commit. A
// marker committed on its own (before the effect) fails this test.
func TestPostgresMarkerIsInTheEffectsTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, effects := newEffects(t)
	markers := pgx.Identifier{strings.Split(strings.Trim(effects.name, `"`), `"."`)[0], "processed_messages"}.Sanitize()
	count := func(q dbtx.Querier) int {
		var n int
		require.NoError(t, q.QueryRow(ctx, `SELECT count(*) FROM `+markers+` WHERE consumer = 'c' AND message_id = 'm1'`).Scan(&n))
		return n
	}
	require.NoError(t, s.Process(ctx, "c", "m1", func(ctx context.Context) error {
		tx, ok := dbtx.From(ctx)
		require.True(t, ok)
		assert.Equal(t, 1, count(tx), "the effect's transaction holds the marker")
		assert.Equal(t, 0, count(effects.pool), "no other session sees it before the commit")
		return nil
	}))
	assert.Equal(t, 1, count(effects.pool), "committed with the effect")
}

func newTracedEffects(t *testing.T) (*inbox.Postgres, effectsTable, *dbtest.RoundTrips) {
	t.Helper()
	pool, schema, trips := dbtest.TracedSchema(t, 8)
	s, err := inbox.NewPostgres(pool, schema)
	require.NoError(t, err)
	e := effectsTable{pool: pool, name: pgx.Identifier{schema, "effects"}.Sanitize()}
	_, err = pool.Exec(context.Background(), `CREATE TABLE `+e.name+` (id text)`)
	require.NoError(t, err)
	trips.Reset()
	return s, e, trips
}

// Process of a one-statement effect is two round trips: BEGIN, the marker
// and the effect's statement in one pipeline, COMMIT (pgx's own transaction
// spends four; the effect alone in pgx's transaction three). Inside a
// caller's transaction the marker is sent before the effect runs. A
// duplicate is reported as one even when its effect fails before any
// statement.
func TestPostgresProcessRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// outer wraps Process in the caller's transaction, if any.
		outer func(ctx context.Context, pool *pgxpool.Pool, process func(ctx context.Context) error) error
		want  int64
	}{
		{"own transaction", func(ctx context.Context, _ *pgxpool.Pool, process func(ctx context.Context) error) error {
			return process(ctx)
		}, 2},
		// BEGIN, SAVEPOINT and the marker; the effect; RELEASE; COMMIT.
		{"inside the caller's transaction", func(ctx context.Context, pool *pgxpool.Pool, process func(ctx context.Context) error) error {
			return dbtx.InTx(ctx, pool, func(ctx context.Context, _ pgx.Tx) error { return process(ctx) })
		}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, effects, trips := newTracedEffects(t)
			process := func(id string) func(ctx context.Context) error {
				return func(ctx context.Context) error { return s.Process(ctx, "c", id, effects.insert(nil)) }
			}
			// The first run prepares the statements, a round trip pgx
			// does not trace.
			require.NoError(t, tc.outer(ctx, effects.pool, process("warm")))
			trips.Reset()
			require.NoError(t, tc.outer(ctx, effects.pool, process("counted")))
			assert.Equal(t, tc.want, trips.Count())
			assert.Equal(t, 2, effects.count(t))

			trips.Reset()
			err := tc.outer(ctx, effects.pool, func(ctx context.Context) error {
				return s.Process(ctx, "c", "counted", func(context.Context) error {
					return errors.New("a duplicate's effect ran")
				})
			})
			assert.Equal(t, failure.Duplicate, failure.Of(err))
			assert.Equal(t, 2, effects.count(t))
		})
	}
}

// Concurrent deliveries of one message whose effect writes a row: one
// effect, every other delivery a duplicate (the second marker insert waits
// on the first transaction's key).
func TestPostgresConcurrentDuplicateProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, effects := newEffects(t)
	const deliveries = 6
	errs := make([]error, deliveries)
	var wg sync.WaitGroup
	for i := range deliveries {
		wg.Go(func() { errs[i] = s.Process(ctx, "c", "m1", effects.insert(nil)) })
	}
	wg.Wait()
	var dups int
	for _, err := range errs {
		if failure.Of(err) == failure.Duplicate {
			dups++
		} else {
			require.NoError(t, err)
		}
	}
	assert.Equal(t, deliveries-1, dups)
	assert.Equal(t, 1, effects.count(t))
}

// Process joins a caller's transaction whichever kind it is.
func TestPostgresJoinsAPipelinedTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, effects := newEffects(t)
	for _, commit := range []bool{false, true} {
		tx, err := dbtx.BeginPipelined(ctx, effects.pool)
		require.NoError(t, err)
		require.NoError(t, s.Process(dbtx.WithTx(ctx, tx), "c", "m1", effects.insert(nil)))
		if commit {
			require.NoError(t, tx.Commit(ctx))
		} else {
			require.NoError(t, tx.Rollback(ctx))
		}
	}
	assert.Equal(t, 1, effects.count(t))
	assert.Equal(t, failure.Duplicate, failure.Of(s.Process(ctx, "c", "m1", effects.insert(nil))))
}

// A duplicate seen inside a caller's transaction — the marker's unique
// violation, in Process's savepoint — leaves that transaction usable: the
// caller's other work commits, and no second effect.
func TestPostgresDuplicateInsideTheCallersTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, effects := newEffects(t)
	require.NoError(t, s.Process(ctx, "c", "m1", effects.insert(nil)))
	begins := map[string]func() (pgx.Tx, error){
		"pgx":       func() (pgx.Tx, error) { return effects.pool.Begin(ctx) },
		"pipelined": func() (pgx.Tx, error) { return dbtx.BeginPipelined(ctx, effects.pool) },
	}
	for name, begin := range begins {
		tx, err := begin()
		require.NoError(t, err, name)
		err = s.Process(dbtx.WithTx(ctx, tx), "c", "m1", effects.insert(nil))
		assert.Equal(t, failure.Duplicate, failure.Of(err), "%s: %v", name, err)
		require.NoError(t, s.Process(dbtx.WithTx(ctx, tx), "c", "m-"+name, effects.insert(nil)), name)
		require.NoError(t, tx.Commit(ctx), name)
	}
	assert.Equal(t, 3, effects.count(t), "m1 once, and each transaction's own message")
}

// In its own transaction Process sends the marker with the effect's first
// statement: a duplicate's effect runs up to that statement, which the
// server then skips (dbtx.ErrHeldFailed, not the marker's own unique
// violation, so that the effect cannot take it for one of its own), and
// Process reports the duplicate whatever the effect returned: here an
// effect that swallows its statement's error.
func TestPostgresDuplicateEffectCommitsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, effects := newEffects(t)
	require.NoError(t, s.Process(ctx, "c", "m1", effects.insert(nil)))

	var ran bool
	var stmtErr error
	err := s.Process(ctx, "c", "m1", func(ctx context.Context) error {
		ran = true
		stmtErr = effects.insert(nil)(ctx)
		return nil // swallowed
	})
	assert.Equal(t, failure.Duplicate, failure.Of(err), "%v", err)
	assert.True(t, ran, "the effect ran up to its first statement")
	require.ErrorIs(t, stmtErr, dbtx.ErrHeldFailed)
	_, isPg := errors.AsType[*pgconn.PgError](stmtErr)
	assert.False(t, isPg, "%v", stmtErr)
	assert.Equal(t, 1, effects.count(t), "the duplicate's row never committed")
}
