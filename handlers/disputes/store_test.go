package disputes_test

// One suite for both stores (wild-workouts style), and the §5 outbox test:
// "Outbox row written iff business row written (including rollback paths)".

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/handlers/disputes"
)

// recorder is a publisher that keeps what it is given.
type recorder struct {
	mu   sync.Mutex
	msgs []*message.Message
	fail error
}

func (r *recorder) Publish(_ string, msgs ...*message.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	r.msgs = append(r.msgs, msgs...)
	return nil
}

func (r *recorder) Close() error { return nil }

func (r *recorder) sent() []*message.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*message.Message(nil), r.msgs...)
}

func TestStores(t *testing.T) {
	t.Parallel()
	stores := map[string]func(t *testing.T) disputes.Store{
		"memory": func(*testing.T) disputes.Store {
			return disputes.NewMemory(disputes.MemoryOptions{Outbox: outbox.AfterCommit{Publisher: &recorder{}}})
		},
		"postgres": func(t *testing.T) disputes.Store {
			pool, schema := dbtest.Schema(t)
			s, err := disputes.NewPostgres(pool, schema, "")
			require.NoError(t, err)
			return s
		},
	}
	for name, newStore := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			storeSuite(t, newStore(t))
		})
	}
}

func storeSuite(t *testing.T, s disputes.Store) {
	ctx := context.Background()
	due := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

	d := disputes.Dispute{TxnID: "txn_1", ReasonCode: disputes.ReasonFailedButDebited, Rail: disputes.RailUPI, TATDueAt: &due}
	eventID, err := s.RaiseDispute(ctx, d)
	require.NoError(t, err)
	assert.True(t, disputes.IsEventID(eventID))

	d2 := disputes.Dispute{ID: "dsp_fixed", TxnID: "txn_2", ReasonCode: "credit_not_received"}
	id2, err := s.RaiseDispute(ctx, d2)
	require.NoError(t, err)
	got, err := s.Dispute(ctx, "dsp_fixed")
	require.NoError(t, err)
	assert.Equal(t, id2, got.EventID)
	assert.Equal(t, "txn_2", got.TxnID)
	assert.Nil(t, got.TATDueAt)
	assert.False(t, got.RaisedAt.IsZero())
	_, err = s.RaiseDispute(ctx, d2)
	require.ErrorIs(t, err, disputes.ErrExists)
	_, err = s.Dispute(ctx, "dsp_missing")
	require.ErrorIs(t, err, disputes.ErrNotFound)

	_, ok, err := s.Reminder(ctx, "dsp_fixed")
	require.NoError(t, err)
	assert.False(t, ok)
	first := disputes.Reminder{DisputeID: "dsp_fixed", EventID: id2, TxnID: "txn_2", TATDueAt: due, RemindAt: due.Add(-24 * time.Hour)}
	require.NoError(t, s.ScheduleReminder(ctx, first))
	require.NoError(t, s.ScheduleReminder(ctx, disputes.Reminder{DisputeID: "dsp_fixed", EventID: "evt_other", TxnID: "txn_2", TATDueAt: due.Add(time.Hour), RemindAt: due, AutoReverse: true}))
	r, ok, err := s.Reminder(ctx, "dsp_fixed")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, first, r, "the first timer is kept")

	_, err = s.FlagTransaction(ctx, disputes.Flag{TxnID: "txn_3", RiskScore: 50})
	require.NoError(t, err)
	e1 := disputes.ReviewEntry{EventID: "evt_a", TxnID: "txn_3", RiskScore: 50, Queue: disputes.QueueReview, FlaggedAt: due}
	e2 := disputes.ReviewEntry{EventID: "evt_b", TxnID: "txn_3", RiskScore: 95, Reason: "sanctions", Queue: disputes.QueueAML, FlaggedAt: due.Add(time.Minute)}
	require.NoError(t, s.EnqueueReview(ctx, e2))
	require.NoError(t, s.EnqueueReview(ctx, e1))
	require.NoError(t, s.EnqueueReview(ctx, e1))
	entries, err := s.ReviewEntries(ctx, "txn_3")
	require.NoError(t, err)
	assert.Equal(t, []disputes.ReviewEntry{e1, e2}, entries)

	stats, err := s.KBStats(ctx)
	require.NoError(t, err)
	assert.Equal(t, disputes.KBStats{}, stats)
	at := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	_, err = s.RecordDocument(ctx, disputes.Document{Bucket: "kb", Key: "a.md", IngestedAt: at})
	require.NoError(t, err)
	_, err = s.RecordDocument(ctx, disputes.Document{Bucket: "kb", Key: "b.md", IngestedAt: at.Add(time.Hour)})
	require.NoError(t, err)
	_, err = s.RecordDocument(ctx, disputes.Document{Bucket: "kb", Key: "b.md"})
	require.ErrorIs(t, err, disputes.ErrExists, "one document per object")
	require.NoError(t, s.RefreshKBStats(ctx, "evt_doc"))
	stats, err = s.KBStats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(2), stats.Documents)
	require.NotNil(t, stats.LastIngestedAt)
	assert.Equal(t, at.Add(time.Hour), *stats.LastIngestedAt)
	assert.Equal(t, "evt_doc", stats.LastEventID)
}

// The memory twin publishes after its commit: the event carries the row's id.
func TestMemoryPublishesAfterCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec := &recorder{}
	s := disputes.NewMemory(disputes.MemoryOptions{Outbox: outbox.AfterCommit{Publisher: rec}})
	id, err := s.RaiseDispute(ctx, disputes.Dispute{ID: "dsp_1", TxnID: "txn_1", ReasonCode: "x"})
	require.NoError(t, err)
	sent := rec.sent()
	require.Len(t, sent, 1)
	assert.Equal(t, id, sent[0].UUID)
	env, ev, err := disputes.DecodeEvent(sent[0].Payload)
	require.NoError(t, err)
	assert.Equal(t, "dsp_1", env.AggregateID)
	assert.Equal(t, "txn_1", ev.DisputeRaised.TxnID)

	rec.fail = errors.New("broker down")
	_, err = s.RaiseDispute(ctx, disputes.Dispute{ID: "dsp_2", TxnID: "txn_2", ReasonCode: "x"})
	require.Error(t, err, "the caller hears that the event is lost")
	_, err = s.Dispute(ctx, "dsp_2")
	require.NoError(t, err, "the row stays committed (embedded mode: no outbox)")
}

func count(t *testing.T, pool *pgxpool.Pool, schema, table, where string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM `+pgx.Identifier{schema, table}.Sanitize()+` WHERE `+where, args...).Scan(&n))
	return n
}

func TestOutboxRowIffBusinessRow(t *testing.T) {
	t.Parallel()
	pool, schema := dbtest.Schema(t)
	ctx := context.Background()
	tables := disputes.Tables{Schema: schema}
	type produce func(tx pgx.Tx) (string, error)
	producers := map[string]struct {
		table, key string
		run        func(id string) produce
	}{
		"RaiseDispute": {"disputes", "id", func(id string) produce {
			return func(tx pgx.Tx) (string, error) {
				return tables.RaiseDispute(ctx, tx, disputes.Dispute{ID: id, TxnID: "txn_" + id, ReasonCode: "credit_not_received"})
			}
		}},
		"FlagTransaction": {"transaction_flags", "txn_id", func(id string) produce {
			return func(tx pgx.Tx) (string, error) {
				return tables.FlagTransaction(ctx, tx, disputes.Flag{TxnID: id, RiskScore: 90})
			}
		}},
		"RecordDocument": {"kb_documents", "id", func(id string) produce {
			return func(tx pgx.Tx) (string, error) {
				return tables.RecordDocument(ctx, tx, disputes.Document{ID: id, Bucket: "kb", Key: id})
			}
		}},
	}
	for name, p := range producers {
		t.Run(name+"/commit", func(t *testing.T) {
			t.Parallel()
			id := disputes.NewID("x", time.Now())
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			eventID, err := p.run(id)(tx)
			require.NoError(t, err)
			require.NoError(t, tx.Commit(ctx))
			assert.Equal(t, 1, count(t, pool, schema, p.table, p.key+" = $1", id))
			var topic, attr string
			var payload []byte
			require.NoError(t, pool.QueryRow(ctx, `SELECT topic, payload, metadata->>'event_id' FROM `+pgx.Identifier{schema, "outbox"}.Sanitize()+` WHERE event_id = $1`, eventID).
				Scan(&topic, &payload, &attr))
			assert.Equal(t, disputes.DomainEventsQueue, topic)
			assert.Equal(t, eventID, attr, "the attribute is a copy of the body's event_id")
			require.NoError(t, disputes.Validate(payload), "written strictly")
			env, err := disputes.Decode(payload)
			require.NoError(t, err)
			assert.Equal(t, eventID, env.EventID)
			assert.Equal(t, id, env.AggregateID)
		})
		t.Run(name+"/rollback", func(t *testing.T) {
			t.Parallel()
			id := disputes.NewID("x", time.Now())
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			eventID, err := p.run(id)(tx)
			require.NoError(t, err)
			require.NoError(t, tx.Rollback(ctx))
			assert.Equal(t, 0, count(t, pool, schema, p.table, p.key+" = $1", id))
			assert.Equal(t, 0, count(t, pool, schema, "outbox", "event_id = $1", eventID), "no phantom event")
		})
	}
	t.Run("failed business write in the same tx", func(t *testing.T) {
		t.Parallel()
		id := disputes.NewID("dsp", time.Now())
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		first, err := tables.RaiseDispute(ctx, tx, disputes.Dispute{ID: id, TxnID: "t", ReasonCode: "r"})
		require.NoError(t, err)
		_, err = tables.RaiseDispute(ctx, tx, disputes.Dispute{ID: id, TxnID: "t", ReasonCode: "r"})
		require.ErrorIs(t, err, disputes.ErrExists)
		require.NoError(t, tx.Rollback(ctx), "the caller rolls back on error")
		assert.Equal(t, 0, count(t, pool, schema, "disputes", "id = $1", id))
		assert.Equal(t, 0, count(t, pool, schema, "outbox", "event_id = $1", first))
	})
	t.Run("store's own transaction", func(t *testing.T) {
		t.Parallel()
		s, err := disputes.NewPostgres(pool, schema, "")
		require.NoError(t, err)
		id := disputes.NewID("dsp", time.Now())
		eventID, err := s.RaiseDispute(ctx, disputes.Dispute{ID: id, TxnID: "t", ReasonCode: "r"})
		require.NoError(t, err)
		_, err = s.RaiseDispute(ctx, disputes.Dispute{ID: id, TxnID: "t", ReasonCode: "r"})
		require.ErrorIs(t, err, disputes.ErrExists)
		assert.Equal(t, 1, count(t, pool, schema, "outbox", "convert_from(payload, 'UTF8') LIKE '%' || $1 || '%'", id), "only the committed dispute's event")
		assert.Equal(t, 1, count(t, pool, schema, "outbox", "event_id = $1", eventID))
	})
}
