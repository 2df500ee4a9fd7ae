package dbtx_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/dbtx"
	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
)

// txEnv is one test's schema with a table of ids, on a pool of one
// connection: a test can tell whether the connection was kept (the same
// backend pid) or destroyed.
type txEnv struct {
	pool   *pgxpool.Pool
	trips  *dbtest.RoundTrips
	schema string
	table  string
}

func newTxEnv(t *testing.T) txEnv {
	t.Helper()
	pool, schema, trips := dbtest.TracedSchema(t, 1)
	e := txEnv{pool: pool, trips: trips, schema: schema, table: pgx.Identifier{schema, "ids"}.Sanitize()}
	_, err := pool.Exec(context.Background(), `CREATE TABLE `+e.table+` (id text PRIMARY KEY)`)
	require.NoError(t, err)
	trips.Reset()
	return e
}

func (e txEnv) insert(ctx context.Context, q dbtx.Querier, id string) error {
	_, err := q.Exec(ctx, `INSERT INTO `+e.table+` (id) VALUES ($1)`, id)
	return err
}

func (e txEnv) has(t *testing.T, id string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM `+e.table+` WHERE id = $1)`, id).Scan(&ok))
	return ok
}

func (e txEnv) backendPID(t *testing.T) uint32 {
	t.Helper()
	conn, err := e.pool.Acquire(context.Background())
	require.NoError(t, err)
	defer conn.Release()
	return conn.Conn().PgConn().PID()
}

func (e txEnv) begin(t *testing.T) *dbtx.PipelinedTx {
	t.Helper()
	tx, err := dbtx.BeginPipelined(context.Background(), e.pool)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// The round trips of a transaction through InTx, counted once its
// statements are prepared: pgx's transaction spends one on BEGIN and one on
// every statement; ours sends BEGIN with the first and held-back statements
// with COMMIT.
func TestInTxRoundTrips(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fn   func(e txEnv, id string) func(ctx context.Context, tx pgx.Tx) error
		want int64
	}{
		{"nothing", func(txEnv, string) func(context.Context, pgx.Tx) error {
			return func(context.Context, pgx.Tx) error { return nil }
		}, 0},
		{"one statement", func(e txEnv, id string) func(context.Context, pgx.Tx) error {
			return func(ctx context.Context, tx pgx.Tx) error { return e.insert(ctx, tx, id) }
		}, 2},
		{"two statements", func(e txEnv, id string) func(context.Context, pgx.Tx) error {
			return func(ctx context.Context, tx pgx.Tx) error {
				if err := e.insert(ctx, tx, id); err != nil {
					return err
				}
				return e.insert(ctx, tx, id+"-b")
			}
		}, 3},
		{"one statement and one held back to the commit", func(e txEnv, id string) func(context.Context, pgx.Tx) error {
			return func(ctx context.Context, tx pgx.Tx) error {
				if err := e.insert(ctx, tx, id); err != nil {
					return err
				}
				return tx.(*dbtx.PipelinedTx).ExecAtCommit("second row", `INSERT INTO `+e.table+` (id) VALUES ($1)`, id+"-b")
			}
		}, 2},
		{"only held back to the commit", func(e txEnv, id string) func(context.Context, pgx.Tx) error {
			return func(_ context.Context, tx pgx.Tx) error {
				return tx.(*dbtx.PipelinedTx).ExecAtCommit("row", `INSERT INTO `+e.table+` (id) VALUES ($1)`, id)
			}
		}, 1},
		{"a query first", func(e txEnv, id string) func(context.Context, pgx.Tx) error {
			return func(ctx context.Context, tx pgx.Tx) error {
				var n int
				if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+e.table).Scan(&n); err != nil {
					return err
				}
				return e.insert(ctx, tx, id)
			}
		}, 3},
		{"one held for the next statement", func(e txEnv, id string) func(context.Context, pgx.Tx) error {
			return func(ctx context.Context, tx pgx.Tx) error {
				// BEGIN, the held row and the statement in one pipeline;
				// COMMIT.
				if _, err := tx.(*dbtx.PipelinedTx).ExecWithNext("first row", `INSERT INTO `+e.table+` (id) VALUES ($1)`, id+"-a"); err != nil {
					return err
				}
				return e.insert(ctx, tx, id)
			}
		}, 2},
		{"only held for the next statement", func(e txEnv, id string) func(context.Context, pgx.Tx) error {
			return func(_ context.Context, tx pgx.Tx) error {
				_, err := tx.(*dbtx.PipelinedTx).ExecWithNext("row", `INSERT INTO `+e.table+` (id) VALUES ($1)`, id)
				return err
			}
		}, 1},
		{"a savepoint with one statement", func(e txEnv, id string) func(context.Context, pgx.Tx) error {
			return func(ctx context.Context, _ pgx.Tx) error {
				// BEGIN, SAVEPOINT and the insert in one pipeline;
				// RELEASE; COMMIT.
				return dbtx.InTx(ctx, e.pool, func(ctx context.Context, tx pgx.Tx) error { return e.insert(ctx, tx, id) })
			}
		}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newTxEnv(t)
			ctx := context.Background()
			// The first run prepares the statements (a round trip pgx
			// does not trace); the second is counted.
			require.NoError(t, dbtx.InTx(ctx, e.pool, tc.fn(e, "warm")))
			e.trips.Reset()
			require.NoError(t, dbtx.InTx(ctx, e.pool, tc.fn(e, "counted")))
			assert.Equal(t, tc.want, e.trips.Count())
			if tc.want > 0 {
				assert.True(t, e.has(t, "counted"), "committed")
			}
		})
	}
}

func TestPipelinedCommitAndRollback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		commit bool
	}{{"commit", true}, {"rollback", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newTxEnv(t)
			pid := e.backendPID(t)
			tx := e.begin(t)
			require.NoError(t, e.insert(ctx, tx, "a"))
			if tc.commit {
				require.NoError(t, tx.Commit(ctx))
			} else {
				require.NoError(t, tx.Rollback(ctx))
			}
			assert.Equal(t, tc.commit, e.has(t, "a"))
			require.ErrorIs(t, tx.Commit(ctx), pgx.ErrTxClosed)
			require.ErrorIs(t, tx.Rollback(ctx), pgx.ErrTxClosed, "a Rollback after Commit is a no-op")
			require.ErrorIs(t, e.insert(ctx, tx, "b"), pgx.ErrTxClosed)
			_, err := tx.Begin(ctx)
			require.ErrorIs(t, err, pgx.ErrTxClosed)
			require.ErrorIs(t, tx.ExecAtCommit("b", `SELECT 1`), pgx.ErrTxClosed)
			assert.Equal(t, pid, e.backendPID(t), "the connection went back to the pool")
		})
	}
}

func TestPipelinedEmptyTransactionSendsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newTxEnv(t)
	tx := e.begin(t)
	require.NoError(t, tx.Commit(ctx))
	tx = e.begin(t)
	require.NoError(t, tx.Rollback(ctx))
	tx = e.begin(t)
	sp, err := tx.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, sp.Commit(ctx))
	require.NoError(t, tx.Commit(ctx))
	assert.Equal(t, int64(0), e.trips.Count())
}

// The first statement's results come through the pipeline BEGIN went in,
// whichever way it is run.
func TestPipelinedFirstStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, e txEnv, tx *dbtx.PipelinedTx)
	}{
		{"exec", func(t *testing.T, e txEnv, tx *dbtx.PipelinedTx) {
			tag, err := tx.Exec(ctx, `INSERT INTO `+e.table+` (id) VALUES ('a'), ('b')`)
			require.NoError(t, err)
			assert.Equal(t, int64(2), tag.RowsAffected())
		}},
		{"query", func(t *testing.T, e txEnv, tx *dbtx.PipelinedTx) {
			rows, err := tx.Query(ctx, `INSERT INTO `+e.table+` (id) VALUES ('a'), ('b') RETURNING id`)
			require.NoError(t, err)
			ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			assert.ElementsMatch(t, []string{"a", "b"}, ids)
		}},
		{"query row", func(t *testing.T, e txEnv, tx *dbtx.PipelinedTx) {
			var id string
			require.NoError(t, tx.QueryRow(ctx, `INSERT INTO `+e.table+` (id) VALUES ('a'), ('b') RETURNING id`).Scan(&id))
			require.ErrorIs(t, tx.QueryRow(ctx, `SELECT id FROM `+e.table+` WHERE false`).Scan(&id), pgx.ErrNoRows)
		}},
		{"query row finding nothing first", func(t *testing.T, e txEnv, tx *dbtx.PipelinedTx) {
			var id string
			require.ErrorIs(t, tx.QueryRow(ctx, `SELECT id FROM `+e.table+` WHERE false`).Scan(&id), pgx.ErrNoRows)
			require.NoError(t, e.insert(ctx, tx, "a"))
			require.NoError(t, e.insert(ctx, tx, "b"))
		}},
		{"batch", func(t *testing.T, e txEnv, tx *dbtx.PipelinedTx) {
			b := &pgx.Batch{}
			var tags []int64
			for _, id := range []string{"a", "b"} {
				b.Queue(`INSERT INTO `+e.table+` (id) VALUES ($1)`, id).Exec(func(tag pgconn.CommandTag) error {
					tags = append(tags, tag.RowsAffected())
					return nil
				})
			}
			require.NoError(t, tx.SendBatch(ctx, b).Close())
			assert.Equal(t, []int64{1, 1}, tags)
		}},
		{"batch read one by one", func(t *testing.T, e txEnv, tx *dbtx.PipelinedTx) {
			b := &pgx.Batch{}
			b.Queue(`INSERT INTO ` + e.table + ` (id) VALUES ('a'), ('b')`)
			b.Queue(`SELECT count(*) FROM ` + e.table)
			br := tx.SendBatch(ctx, b)
			tag, err := br.Exec()
			require.NoError(t, err)
			assert.Equal(t, int64(2), tag.RowsAffected())
			var n int
			require.NoError(t, br.QueryRow().Scan(&n))
			assert.Equal(t, 2, n)
			require.NoError(t, br.Close())
		}},
		{"copy", func(t *testing.T, e txEnv, tx *dbtx.PipelinedTx) {
			n, err := tx.CopyFrom(ctx, pgx.Identifier{e.schema, "ids"}, []string{"id"}, pgx.CopyFromRows([][]any{{"a"}, {"b"}}))
			require.NoError(t, err)
			assert.Equal(t, int64(2), n)
		}},
		{"statement on Conn", func(t *testing.T, e txEnv, tx *dbtx.PipelinedTx) {
			_, err := tx.Conn().Exec(ctx, `INSERT INTO `+e.table+` (id) VALUES ('a'), ('b')`)
			require.NoError(t, err)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newTxEnv(t)
			tx := e.begin(t)
			tc.run(t, e, tx)
			require.NoError(t, tx.Rollback(ctx))
			assert.False(t, e.has(t, "a"), "rolled back: the statement was inside the transaction")
			assert.False(t, e.has(t, "b"))
		})
	}
}

// A held-back statement that fails at COMMIT rolls the whole transaction
// back, and the connection is rolled back and kept, not destroyed.
func TestPipelinedAtCommitFailureRollsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newTxEnv(t)
	require.NoError(t, e.insert(ctx, e.pool, "taken"))
	pid := e.backendPID(t)

	err := dbtx.InTx(ctx, e.pool, func(ctx context.Context, tx pgx.Tx) error {
		if err := e.insert(ctx, tx, "effect"); err != nil {
			return err
		}
		p := tx.(*dbtx.PipelinedTx)
		require.NoError(t, p.ExecAtCommit("first row", `INSERT INTO `+e.table+` (id) VALUES ('first')`))
		require.NoError(t, p.ExecAtCommit("the taken row", `INSERT INTO `+e.table+` (id) VALUES ('taken')`))
		return p.ExecAtCommit("last row", `INSERT INTO `+e.table+` (id) VALUES ('last')`)
	})
	require.Error(t, err)
	assert.ErrorContains(t, err, "the taken row")
	require.ErrorIs(t, err, pgx.ErrTxCommitRollback)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	assert.Equal(t, "23505", pgErr.Code)
	for _, id := range []string{"effect", "first", "last"} {
		assert.False(t, e.has(t, id), id)
	}
	assert.Equal(t, pid, e.backendPID(t), "the connection was kept")
	require.NoError(t, dbtx.InTx(ctx, e.pool, func(ctx context.Context, tx pgx.Tx) error { return e.insert(ctx, tx, "after") }))
	assert.True(t, e.has(t, "after"))
}

// A statement that fails inside the transaction: Commit reports the
// rollback as pgx's does, and Rollback leaves the pool healthy.
func TestPipelinedStatementError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		first bool // the failing statement is the one BEGIN went with
		end   func(ctx context.Context, tx pgx.Tx) error
		want  error
	}{
		{"first, then rollback", true, func(ctx context.Context, tx pgx.Tx) error { return tx.Rollback(ctx) }, nil},
		{"later, then rollback", false, func(ctx context.Context, tx pgx.Tx) error { return tx.Rollback(ctx) }, nil},
		{"first, then commit", true, func(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) }, pgx.ErrTxCommitRollback},
		{"later, then commit", false, func(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) }, pgx.ErrTxCommitRollback},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newTxEnv(t)
			pid := e.backendPID(t)
			tx := e.begin(t)
			if !tc.first {
				require.NoError(t, e.insert(ctx, tx, "a"))
			}
			_, err := tx.Exec(ctx, `SELECT 1/0`)
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr)
			assert.Equal(t, "22012", pgErr.Code)
			// The transaction is aborted; a held-back statement changes nothing.
			require.NoError(t, tx.ExecAtCommit("row", `INSERT INTO `+e.table+` (id) VALUES ('b')`))
			err = tc.end(ctx, tx)
			if tc.want == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tc.want)
			}
			assert.False(t, e.has(t, "a"))
			assert.False(t, e.has(t, "b"))
			assert.Equal(t, pid, e.backendPID(t), "the connection was kept")
		})
	}
}

// Savepoints work as pgx's; what a savepoint holds back for the commit goes
// with the outermost COMMIT when it is released and is dropped when it is
// rolled back to.
func TestPipelinedSavepoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	held := func(t *testing.T, e txEnv, tx pgx.Tx, id string) {
		t.Helper()
		require.NoError(t, tx.(*dbtx.PipelinedTx).ExecAtCommit("row "+id, `INSERT INTO `+e.table+` (id) VALUES ($1)`, id))
	}
	t.Run("release keeps, rollback drops", func(t *testing.T) {
		t.Parallel()
		e := newTxEnv(t)
		tx := e.begin(t)
		require.NoError(t, e.insert(ctx, tx, "outer"))
		kept, err := tx.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, e.insert(ctx, kept, "kept"))
		held(t, e, kept, "kept-held")
		require.NoError(t, kept.Commit(ctx))
		require.ErrorIs(t, kept.Commit(ctx), pgx.ErrTxClosed)

		dropped, err := tx.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, e.insert(ctx, dropped, "dropped"))
		held(t, e, dropped, "dropped-held")
		inner, err := dropped.Begin(ctx)
		require.NoError(t, err)
		held(t, e, inner, "inner-held")
		require.NoError(t, inner.Commit(ctx))
		require.NoError(t, dropped.Rollback(ctx))
		require.ErrorIs(t, dropped.Rollback(ctx), pgx.ErrTxClosed)

		// A savepoint rolled back after an error leaves the transaction usable.
		failed, err := tx.Begin(ctx)
		require.NoError(t, err)
		_, err = failed.Exec(ctx, `SELECT 1/0`)
		require.Error(t, err)
		require.NoError(t, failed.Rollback(ctx))

		held(t, e, tx, "outer-held")
		require.NoError(t, tx.Commit(ctx))
		for id, want := range map[string]bool{
			"outer": true, "kept": true, "kept-held": true, "outer-held": true,
			"dropped": false, "dropped-held": false, "inner-held": false,
		} {
			assert.Equal(t, want, e.has(t, id), id)
		}
	})
	t.Run("a savepoint not sent yet is dropped", func(t *testing.T) {
		t.Parallel()
		e := newTxEnv(t)
		tx := e.begin(t)
		sp, err := tx.Begin(ctx)
		require.NoError(t, err)
		held(t, e, sp, "dropped-held")
		require.NoError(t, sp.Rollback(ctx))
		require.NoError(t, e.insert(ctx, tx, "outer"))
		require.NoError(t, tx.Commit(ctx))
		assert.Equal(t, int64(2), e.trips.Count(), "BEGIN with the insert; COMMIT")
		assert.True(t, e.has(t, "outer"))
		assert.False(t, e.has(t, "dropped-held"))
	})
	t.Run("the outer rollback undoes a released savepoint", func(t *testing.T) {
		t.Parallel()
		e := newTxEnv(t)
		err := dbtx.InTx(ctx, e.pool, func(ctx context.Context, _ pgx.Tx) error {
			err := dbtx.InTx(ctx, e.pool, func(ctx context.Context, tx pgx.Tx) error {
				held(t, e, tx, "held")
				return e.insert(ctx, tx, "inner")
			})
			require.NoError(t, err)
			return errors.New("outer fails")
		})
		require.EqualError(t, err, "outer fails")
		assert.False(t, e.has(t, "inner"))
		assert.False(t, e.has(t, "held"))
	})
}

// A statement cancelled by its context: the connection's state is unknown,
// so it is closed rather than given back, and the pool goes on.
func TestPipelinedContextCancelled(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	tx := e.begin(t)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, e.insert(ctx, tx, "a"))
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err := tx.Exec(ctx, `SELECT pg_sleep(10)`)
	require.Error(t, err)
	_ = tx.Rollback(context.Background())
	assert.False(t, e.has(t, "a"))
	require.NoError(t, dbtx.InTx(context.Background(), e.pool, func(ctx context.Context, tx pgx.Tx) error { return e.insert(ctx, tx, "b") }))
	assert.True(t, e.has(t, "b"))

	// Cancelled before BEGIN went: nothing was sent, nothing is left open.
	tx = e.begin(t)
	require.Error(t, e.insert(ctx, tx, "c"))
	require.Error(t, tx.Commit(context.Background()))
	assert.False(t, e.has(t, "c"))
	assert.True(t, e.has(t, "b"))
}

func TestPipelinedLargeObjectsIsUnsupported(t *testing.T) {
	t.Parallel()
	tx := newTxEnv(t).begin(t)
	assert.PanicsWithValue(t, "dbtx: PipelinedTx does not support LargeObjects; begin a pgx transaction (pool.Begin) for them", func() { tx.LargeObjects() })
}

// onlyBegin is a Beginner that is not a pool (no Acquire): InTx falls back
// to its Begin.
type onlyBegin struct{ pool *pgxpool.Pool }

func (o onlyBegin) Begin(ctx context.Context) (pgx.Tx, error) { return o.pool.Begin(ctx) }

func (o onlyBegin) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return o.pool.Exec(ctx, sql, args...)
}

func (o onlyBegin) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return o.pool.Query(ctx, sql, args...)
}

func (o onlyBegin) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return o.pool.QueryRow(ctx, sql, args...)
}

var _ dbtx.Beginner = onlyBegin{}

func TestInTxBeginsPipelinedOnlyOnAPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newTxEnv(t)
	for _, tc := range []struct {
		name      string
		pool      dbtx.Beginner
		pipelined bool
	}{{"pool", e.pool, true}, {"other beginner", onlyBegin{e.pool}, false}} {
		err := dbtx.InTx(ctx, tc.pool, func(ctx context.Context, tx pgx.Tx) error {
			_, ok := tx.(*dbtx.PipelinedTx)
			assert.Equal(t, tc.pipelined, ok, tc.name)
			got, _ := dbtx.From(ctx)
			assert.Same(t, tx, got, tc.name)
			return e.insert(ctx, tx, tc.name)
		})
		require.NoError(t, err)
		assert.True(t, e.has(t, tc.name))
	}
}

// A statement held for the next one goes in its pipeline, ahead of it:
// its outcome is known once that statement returns; when it fails, the
// statement is skipped (ErrHeldFailed, which does not unwrap to the held
// statement's error) and the transaction commits nothing.
func TestPipelinedExecWithNext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	insertSQL := func(e txEnv) string { return `INSERT INTO ` + e.table + ` (id) VALUES ($1)` }

	t.Run("succeeds", func(t *testing.T) {
		t.Parallel()
		e := newTxEnv(t)
		tx := e.begin(t)
		held, err := tx.ExecWithNext("marker", insertSQL(e), "m")
		require.NoError(t, err)
		sent, _ := held.Outcome()
		assert.False(t, sent, "held until the next statement")
		require.NoError(t, e.insert(ctx, tx, "a"))
		sent, herr := held.Outcome()
		assert.True(t, sent)
		require.NoError(t, herr)
		require.NoError(t, tx.Commit(ctx))
		assert.True(t, e.has(t, "m") && e.has(t, "a"))
	})

	t.Run("fails: the next statement is skipped", func(t *testing.T) {
		t.Parallel()
		e := newTxEnv(t)
		require.NoError(t, e.insert(ctx, e.pool, "m"))
		tx := e.begin(t)
		held, err := tx.ExecWithNext("marker", insertSQL(e), "m")
		require.NoError(t, err)
		err = e.insert(ctx, tx, "a")
		require.ErrorIs(t, err, dbtx.ErrHeldFailed)
		_, isPg := errors.AsType[*pgconn.PgError](err)
		assert.False(t, isPg, "the held statement's error is not the caller's: %v", err)
		sent, herr := held.Outcome()
		assert.True(t, sent)
		pgErr, ok := errors.AsType[*pgconn.PgError](herr)
		require.True(t, ok, "held outcome: %v", herr)
		assert.Equal(t, "23505", pgErr.Code)
		require.ErrorIs(t, tx.Commit(ctx), pgx.ErrTxCommitRollback)
		assert.False(t, e.has(t, "a"), "nothing of the transaction committed")
	})

	t.Run("no statement follows: sent with COMMIT", func(t *testing.T) {
		t.Parallel()
		e := newTxEnv(t)
		require.NoError(t, e.insert(ctx, e.pool, "dup"))
		tx := e.begin(t)
		ok, err := tx.ExecWithNext("marker", insertSQL(e), "m")
		require.NoError(t, err)
		require.NoError(t, tx.ExecAtCommit("row", insertSQL(e), "b"))
		require.NoError(t, tx.Commit(ctx))
		assert.True(t, e.has(t, "m") && e.has(t, "b"))
		sent, herr := ok.Outcome()
		assert.True(t, sent)
		require.NoError(t, herr)

		tx = e.begin(t)
		dup, err := tx.ExecWithNext("marker", insertSQL(e), "dup")
		require.NoError(t, err)
		require.NoError(t, tx.ExecAtCommit("row", insertSQL(e), "c"))
		err = tx.Commit(ctx)
		require.ErrorIs(t, err, pgx.ErrTxCommitRollback)
		assert.Contains(t, err.Error(), "marker")
		sent, herr = dup.Outcome()
		assert.True(t, sent)
		require.Error(t, herr)
		assert.False(t, e.has(t, "c"), "rolled back")
	})

	t.Run("rolled back before it was sent", func(t *testing.T) {
		t.Parallel()
		e := newTxEnv(t)
		tx := e.begin(t)
		held, err := tx.ExecWithNext("marker", insertSQL(e), "m")
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))
		sent, _ := held.Outcome()
		assert.False(t, sent)
		assert.Equal(t, int64(0), e.trips.Count(), "nothing sent")
		assert.False(t, e.has(t, "m"))
	})

	t.Run("savepoints", func(t *testing.T) {
		t.Parallel()
		e := newTxEnv(t)
		tx := e.begin(t)
		// Held inside a savepoint rolled back before anything was sent:
		// dropped with it.
		sp, err := tx.Begin(ctx)
		require.NoError(t, err)
		dropped, err := sp.(*dbtx.PipelinedTx).ExecWithNext("dropped", insertSQL(e), "x")
		require.NoError(t, err)
		require.NoError(t, sp.Rollback(ctx))
		// Held inside a savepoint released before anything was sent: kept
		// for the next statement.
		sp, err = tx.Begin(ctx)
		require.NoError(t, err)
		kept, err := sp.(*dbtx.PipelinedTx).ExecWithNext("kept", insertSQL(e), "y")
		require.NoError(t, err)
		require.NoError(t, sp.Commit(ctx))
		require.NoError(t, e.insert(ctx, tx, "z"))
		require.NoError(t, tx.Commit(ctx))
		sent, _ := dropped.Outcome()
		assert.False(t, sent)
		sent, kerr := kept.Outcome()
		assert.True(t, sent)
		require.NoError(t, kerr)
		assert.False(t, e.has(t, "x"))
		assert.True(t, e.has(t, "y") && e.has(t, "z"))
	})
}
