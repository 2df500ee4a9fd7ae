package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/dbtx"
	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/outbox"
)

// beginners are the two kinds of transaction Write is given: pgx's own
// (the rows are inserted by Write) and dbtx's, which dbtx.InTx begins on a
// pool (the rows go with its COMMIT).
var beginners = []struct {
	name string
	// atCommit: the rows are sent with COMMIT, so a failing row fails it.
	atCommit bool
	begin    func(ctx context.Context, pool *pgxpool.Pool) (pgx.Tx, error)
}{
	{"pgx transaction", false, func(ctx context.Context, pool *pgxpool.Pool) (pgx.Tx, error) { return pool.Begin(ctx) }},
	{"dbtx transaction", true, func(ctx context.Context, pool *pgxpool.Pool) (pgx.Tx, error) {
		return dbtx.BeginPipelined(ctx, pool)
	}},
}

// The outbox row exists if and only if the business row does (disputes LLD
// §5, first test).
func TestWriteCommitsWithTheBusinessRow(t *testing.T) {
	t.Parallel()
	for _, b := range beginners {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := newEnv(t)
			_, err := e.pool.Exec(ctx, `CREATE TABLE `+e.q("business_rows")+` (id text PRIMARY KEY)`)
			require.NoError(t, err)

			raise := func(id, eventID string, commit bool, failAfterOutbox bool) (writeErr, commitErr error) {
				tx, err := b.begin(ctx, e.pool)
				require.NoError(t, err)
				defer func() { _ = tx.Rollback(ctx) }()
				_, err = tx.Exec(ctx, `INSERT INTO `+e.q("business_rows")+` (id) VALUES ($1)`, id)
				require.NoError(t, err)
				if err := e.table.Write(ctx, tx, "domain-events", message.NewMessage(eventID, []byte(`{}`))); err != nil {
					return err, nil
				}
				if failAfterOutbox {
					return errors.New("business rule failed after the outbox write"), nil
				}
				if commit {
					return nil, tx.Commit(ctx)
				}
				return nil, nil
			}
			businessRows := func(id string) int {
				var n int
				require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FROM `+e.q("business_rows")+` WHERE id = $1`, id).Scan(&n))
				return n
			}
			noError := func(writeErr, commitErr error) {
				t.Helper()
				require.NoError(t, writeErr)
				require.NoError(t, commitErr)
			}

			noError(raise("d1", "evt-d1", true, false))
			assert.Equal(t, 1, businessRows("d1"))
			assert.Equal(t, 1, e.count(t, "event_id = 'evt-d1'"))

			noError(raise("d2", "evt-d2", false, false)) // rolled back by the deferred Rollback
			assert.Equal(t, 0, businessRows("d2"))
			assert.Equal(t, 0, e.count(t, "event_id = 'evt-d2'"))

			writeErr, _ := raise("d3", "evt-d3", true, true)
			require.Error(t, writeErr)
			assert.Equal(t, 0, businessRows("d3"))
			assert.Equal(t, 0, e.count(t, "event_id = 'evt-d3'"))

			// The event id is unique: writing it again fails, and the
			// transaction with it — at Write, or, sent with the COMMIT, at
			// the commit (Write's godoc).
			writeErr, commitErr := raise("d4", "evt-d1", true, false)
			var pgErr *pgconn.PgError
			if b.atCommit {
				require.NoError(t, writeErr)
				require.ErrorIs(t, commitErr, pgx.ErrTxCommitRollback)
				require.ErrorAs(t, commitErr, &pgErr)
				assert.ErrorContains(t, commitErr, "outbox write domain-events")
			} else {
				require.ErrorAs(t, writeErr, &pgErr)
			}
			assert.Equal(t, "23505", pgErr.Code)
			assert.Equal(t, 0, businessRows("d4"), "the business row went with the failed outbox row")
			assert.Equal(t, 1, e.count(t, "event_id = 'evt-d1'"))
		})
	}
}

// A row holds the message as given, whether Write had one message (its
// VALUES statement) or several (unnest).
func TestWriteStoresTheMessage(t *testing.T) {
	t.Parallel()
	for _, together := range []bool{true, false} {
		t.Run(fmt.Sprintf("together=%v", together), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := newEnv(t)
			m1 := message.NewMessage("e1", []byte(`{"a":1}`))
			m1.Metadata.Set("x-trace-id", "abc \"quoted\" 한글")
			m1.Metadata.Set(outbox.OrderingKeyMetadata, "dispute-7")
			m2 := message.NewMessage("e2", nil)
			if together {
				e.write(t, "domain-events", m1, m2)
			} else {
				e.write(t, "domain-events", m1)
				e.write(t, "domain-events", m2)
			}

			var (
				topic    string
				payload  []byte
				metadata []byte
				key      *string
				attempts int
			)
			require.NoError(t, e.pool.QueryRow(ctx, `SELECT topic, payload, metadata, ordering_key, attempts FROM `+e.q("outbox")+` WHERE event_id = 'e1'`).
				Scan(&topic, &payload, &metadata, &key, &attempts))
			assert.Equal(t, "domain-events", topic)
			assert.JSONEq(t, `{"a":1}`, string(payload))
			var md map[string]string
			require.NoError(t, json.Unmarshal(metadata, &md))
			assert.Equal(t, map[string]string{"x-trace-id": "abc \"quoted\" 한글", outbox.OrderingKeyMetadata: "dispute-7"}, md)
			require.NotNil(t, key)
			assert.Equal(t, "dispute-7", *key)
			assert.Equal(t, 0, attempts)

			require.NoError(t, e.pool.QueryRow(ctx, `SELECT ordering_key, payload FROM `+e.q("outbox")+` WHERE event_id = 'e2'`).Scan(&key, &payload))
			assert.Nil(t, key)
			assert.NotNil(t, payload, "an empty payload is stored empty, not NULL")
			assert.Empty(t, payload)
		})
	}
}

// The message checks are Write's, whichever the transaction.
func TestWriteRefuses(t *testing.T) {
	t.Parallel()
	for _, b := range beginners {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := newEnv(t)
			tx, err := b.begin(ctx, e.pool)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()

			assert.ErrorContains(t, e.table.Write(ctx, tx, "", message.NewMessage("a", nil)), "empty topic")
			assert.ErrorContains(t, e.table.Write(ctx, tx, "t", message.NewMessage("", nil)), "no UUID")
			var tooLarge *broker.PayloadTooLargeError
			require.ErrorAs(t, e.table.Write(ctx, tx, "t", message.NewMessage("big", []byte(strings.Repeat("x", broker.MaxPayloadBytes+1)))), &tooLarge)
			assert.ErrorContains(t, outbox.Table{Schema: "Bad-Schema"}.Write(ctx, tx, "t", message.NewMessage("a", nil)), "schema")
			require.NoError(t, e.table.Write(ctx, tx, "t"), "nothing to write")
			require.NoError(t, tx.Commit(ctx))
			assert.Equal(t, 0, e.count(t, "true"), "nothing was written")
		})
	}
}

// Writing commits a NOTIFY on "<schema>_outbox", and only at commit.
func TestWriteNotifiesAtCommit(t *testing.T) {
	t.Parallel()
	for _, b := range beginners {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := newEnv(t)
			conn, err := e.pool.Acquire(ctx)
			require.NoError(t, err)
			defer conn.Release()
			_, err = conn.Exec(ctx, `LISTEN `+e.schema+`_outbox`)
			require.NoError(t, err)

			tx, err := b.begin(ctx, e.pool)
			require.NoError(t, err)
			require.NoError(t, e.table.Write(ctx, tx, "t", msgs("n", 3)...))
			wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			_, err = conn.Conn().WaitForNotification(wctx)
			cancel()
			require.Error(t, err, "no notification before commit")
			require.NoError(t, tx.Commit(ctx))

			wctx, cancel = context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			n, err := conn.Conn().WaitForNotification(wctx)
			require.NoError(t, err)
			assert.Equal(t, e.schema+"_outbox", n.Channel)
			_, err = conn.Exec(ctx, `UNLISTEN *`)
			require.NoError(t, err)
		})
	}
}

// A handler's transaction with one effect row and its event: through
// dbtx.InTx the outbox row (and its ordering-key lock) goes with COMMIT, so
// the event costs no round trip of its own; inside the inbox's Process, the
// marker goes with BEGIN and the effect, and costs none either. pgx's
// transaction spends one round trip more on
// BEGIN and one more on every statement.
func TestWriteRoundTripsInAHandlersTransaction(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		inbox bool
		key   string
		want  int64
	}{
		{"effect and event", false, "", 2},          // BEGIN+effect, rows+COMMIT
		{"with an ordering key", false, "k", 2},     // the lock goes with the rows
		{"inside the inbox's Process", true, "", 2}, // BEGIN+marker+effect, rows+COMMIT (decision 0042)
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, schema, trips := dbtest.TracedSchema(t, 4)
			effects := pgx.Identifier{schema, "effects"}.Sanitize()
			_, err := pool.Exec(ctx, `CREATE TABLE `+effects+` (id text PRIMARY KEY)`)
			require.NoError(t, err)
			store, err := inbox.NewPostgres(pool, schema)
			require.NoError(t, err)
			w := outbox.TxWriter{Table: outbox.Table{Schema: schema}}
			handle := func(id string) error {
				effect := func(ctx context.Context) error {
					tx, _ := dbtx.From(ctx)
					if _, err := tx.Exec(ctx, `INSERT INTO `+effects+` (id) VALUES ($1)`, id); err != nil {
						return err
					}
					m := message.NewMessage("evt-"+id, []byte(`{}`))
					if tc.key != "" {
						m.Metadata.Set(outbox.OrderingKeyMetadata, tc.key)
					}
					return w.Write(ctx, "t", m)
				}
				if tc.inbox {
					return store.Process(ctx, "c", id, effect)
				}
				return dbtx.InTx(ctx, pool, func(ctx context.Context, _ pgx.Tx) error { return effect(ctx) })
			}
			// The first transaction prepares the statements, a round
			// trip pgx does not trace.
			require.NoError(t, handle("warm"))
			trips.Reset()
			require.NoError(t, handle("counted"))
			assert.Equal(t, tc.want, trips.Count())
			var n int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "outbox"}.Sanitize()+` WHERE event_id = 'evt-counted'`).Scan(&n))
			assert.Equal(t, 1, n)
		})
	}
}

// Held back to the commit, a key's lock is still taken before its rows:
// while another session holds it, the commit waits.
func TestWriteAtCommitTakesTheOrderingKeyLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	holder, err := e.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	// The lock id Write computes (lockKeys): table, topic and key.
	_, err = holder.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, e.q("outbox")+"\x1ft\x1fk")
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		done <- dbtx.InTx(ctx, e.pool, func(ctx context.Context, tx pgx.Tx) error {
			m := message.NewMessage("keyed", []byte(`{}`))
			m.Metadata.Set(outbox.OrderingKeyMetadata, "k")
			return e.table.Write(ctx, tx, "t", m)
		})
	}()
	select {
	case err := <-done:
		require.Failf(t, "the commit did not wait for the key's lock", "it returned %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, holder.Rollback(ctx))
	require.NoError(t, <-done)
	assert.Equal(t, 1, e.count(t, "event_id = 'keyed'"))
}
