package disputes_test

// One suite for both stores (wild-workouts style), and the §5 outbox test:
// "Outbox row written iff business row written (including rollback paths)".

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
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

// storeKinds build a fresh store of each kind.
var storeKinds = map[string]func(t *testing.T) disputes.Store{
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

func TestStores(t *testing.T) {
	t.Parallel()
	stores := storeKinds
	suites := map[string]func(t *testing.T, s disputes.Store){
		"rows and effects": storeSuite,
		"idempotency keys": idempotencySuite,
		"due reminders":    remindersSuite,
		"reversals":        reversalsSuite,
	}
	for name, newStore := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for suite, run := range suites {
				t.Run(suite, func(t *testing.T) {
					t.Parallel()
					run(t, newStore(t))
				})
			}
		})
	}
}

// idempotencySuite: a key runs its write once and replays its response; a
// key with another request is refused; a failed write stores nothing; two
// requests racing on one key make one change.
func idempotencySuite(t *testing.T, s disputes.Store) {
	ctx := context.Background()
	k := disputes.IdempotencyKey{Key: "k-1", RequestHash: "h-1"}
	writes := 0
	raise := func(id string) func(ctx context.Context) (disputes.StoredResponse, error) {
		return func(ctx context.Context) (disputes.StoredResponse, error) {
			writes++
			eventID, err := s.RaiseDispute(ctx, disputes.Dispute{ID: id, TxnID: "txn_" + id, ReasonCode: "x"})
			if err != nil {
				return disputes.StoredResponse{}, err
			}
			return disputes.StoredResponse{Status: 201, Body: []byte(`{"event_id":"` + eventID + `"}`)}, nil
		}
	}
	first, replayed, err := s.Idempotent(ctx, k, raise("dsp_k1"))
	require.NoError(t, err)
	assert.False(t, replayed)
	assert.Equal(t, 201, first.Status)
	again, replayed, err := s.Idempotent(ctx, k, raise("dsp_k1_again"))
	require.NoError(t, err)
	assert.True(t, replayed)
	assert.Equal(t, first, again, "the first response, byte for byte")
	assert.Equal(t, 1, writes, "the repeat wrote nothing")
	_, err = s.Dispute(ctx, "dsp_k1_again")
	require.ErrorIs(t, err, disputes.ErrNotFound)

	_, _, err = s.Idempotent(ctx, disputes.IdempotencyKey{Key: "k-1", RequestHash: "other"}, raise("dsp_k1_other"))
	require.ErrorIs(t, err, disputes.ErrKeyReused)
	assert.Equal(t, 1, writes)

	// A write that fails stores no key: the retry runs it.
	_, _, err = s.Idempotent(ctx, disputes.IdempotencyKey{Key: "k-2", RequestHash: "h"}, func(context.Context) (disputes.StoredResponse, error) {
		return disputes.StoredResponse{}, errors.New("business rule")
	})
	require.Error(t, err)
	_, replayed, err = s.Idempotent(ctx, disputes.IdempotencyKey{Key: "k-2", RequestHash: "h"}, raise("dsp_k2"))
	require.NoError(t, err)
	assert.False(t, replayed)
	// A write whose business change fails rolls the key back with it.
	_, _, err = s.Idempotent(ctx, disputes.IdempotencyKey{Key: "k-3", RequestHash: "h"}, raise("dsp_k2"))
	require.ErrorIs(t, err, disputes.ErrExists)
	_, replayed, err = s.Idempotent(ctx, disputes.IdempotencyKey{Key: "k-3", RequestHash: "h"}, raise("dsp_k3"))
	require.NoError(t, err)
	assert.False(t, replayed)

	// Racing requests with one key: one write, every answer the same.
	const racers = 8
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		bodies  = map[string]int{}
		fresh   int
		written atomic.Int64
	)
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, replayed, err := s.Idempotent(ctx, disputes.IdempotencyKey{Key: "k-race", RequestHash: "h"}, func(ctx context.Context) (disputes.StoredResponse, error) {
				written.Add(1)
				time.Sleep(20 * time.Millisecond) // hold the key while the others arrive
				id := "dsp_race_" + strconv.Itoa(i)
				eventID, err := s.RaiseDispute(ctx, disputes.Dispute{ID: id, TxnID: "txn_race", ReasonCode: "x"})
				return disputes.StoredResponse{Status: 201, Body: []byte(id + " " + eventID)}, err
			})
			assert.NoError(t, err)
			mu.Lock()
			defer mu.Unlock()
			bodies[string(resp.Body)]++
			if !replayed {
				fresh++
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(1), written.Load(), "one write")
	assert.Equal(t, 1, fresh, "one fresh answer, the rest replayed")
	assert.Len(t, bodies, 1, "every racer got the same response")
}

// remindersSuite: a due reminder fires once; one not due yet does not; two
// sweepers at once fire each reminder once.
func remindersSuite(t *testing.T, s disputes.Store) {
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	schedule := func(id string, remind time.Time) {
		require.NoError(t, s.ScheduleReminder(ctx, disputes.Reminder{DisputeID: id, EventID: "evt_" + id, TxnID: "txn_" + id,
			TATDueAt: remind.Add(24 * time.Hour), RemindAt: remind}))
	}
	schedule("dsp_due", now.Add(-time.Minute))
	schedule("dsp_now", now)
	schedule("dsp_later", now.Add(time.Second))

	fired, err := s.FireDueReminders(ctx, now, 10)
	require.NoError(t, err)
	require.Len(t, fired, 2)
	assert.Equal(t, "dsp_due", fired[0].DisputeID, "oldest first")
	assert.Equal(t, "dsp_now", fired[1].DisputeID)
	require.NotNil(t, fired[0].FiredAt)
	assert.Equal(t, now, *fired[0].FiredAt)
	assert.Equal(t, "txn_dsp_due", fired[0].TxnID)
	r, ok, err := s.Reminder(ctx, "dsp_due")
	require.NoError(t, err)
	require.True(t, ok)
	require.NotNil(t, r.FiredAt, "stored")
	assert.Equal(t, now, *r.FiredAt)
	r, _, err = s.Reminder(ctx, "dsp_later")
	require.NoError(t, err)
	assert.Nil(t, r.FiredAt, "not due yet")

	fired, err = s.FireDueReminders(ctx, now, 10)
	require.NoError(t, err)
	assert.Empty(t, fired, "fired once")
	fired, err = s.FireDueReminders(ctx, now.Add(time.Second), 10)
	require.NoError(t, err)
	require.Len(t, fired, 1)
	assert.Equal(t, "dsp_later", fired[0].DisputeID)

	// Two sweepers at once over 40 due reminders: each fires once.
	const n = 40
	for i := range n {
		schedule("dsp_many_"+strconv.Itoa(i), now.Add(time.Hour))
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		times = map[string]int{}
	)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				got, err := s.FireDueReminders(ctx, now.Add(2*time.Hour), 3)
				if !assert.NoError(t, err) || len(got) == 0 {
					return
				}
				assert.LessOrEqual(t, len(got), 3, "at most limit")
				mu.Lock()
				for _, r := range got {
					times[r.DisputeID]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	assert.Len(t, times, n)
	for id, c := range times {
		assert.Equal(t, 1, c, "%s fired %d times", id, c)
	}
}

// reversalsSuite: an eligible reminder stores a pending reversal, once; a
// claim leases it; only the latest claim records its outcome; final ones
// are never claimed again.
func reversalsSuite(t *testing.T, s disputes.Store) {
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	eligible := disputes.Reminder{DisputeID: "dsp_upi", EventID: "evt_1", TxnID: "txn_upi", TATDueAt: now.Add(48 * time.Hour), RemindAt: now, AutoReverse: true}
	require.NoError(t, s.ScheduleReminder(ctx, eligible))
	require.NoError(t, s.ScheduleReminder(ctx, disputes.Reminder{DisputeID: "dsp_card", EventID: "evt_2", TxnID: "txn_card", TATDueAt: now, RemindAt: now}))
	_, ok, err := s.Reversal(ctx, "dsp_card")
	require.NoError(t, err)
	assert.False(t, ok, "not eligible: no reversal")
	r, ok, err := s.Reversal(ctx, "dsp_upi")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, disputes.ReversalPending, r.Status)
	assert.Equal(t, "txn_upi", r.TxnID)
	assert.Zero(t, r.Attempts)
	pending, err := s.PendingReversals(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, pending)

	// The same dispute again (a second DisputeRaised): nothing new.
	eligible.EventID = "evt_again"
	require.NoError(t, s.ScheduleReminder(ctx, eligible))
	pending, err = s.PendingReversals(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, pending)

	// Claimed: leased, not claimable again before the lease ends.
	at := time.Now().Add(time.Hour) // after the row's creation on every clock
	claimed, err := s.ClaimReversals(ctx, at, time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	first := claimed[0]
	assert.Equal(t, 1, first.Attempts)
	assert.Equal(t, at.Add(time.Minute).UTC().Truncate(time.Microsecond), first.NextAttemptAt.Truncate(time.Microsecond))
	claimed, err = s.ClaimReversals(ctx, at.Add(59*time.Second), time.Minute, 10)
	require.NoError(t, err)
	assert.Empty(t, claimed, "leased")

	// The lease ended (the worker died): a second claim; the first
	// claim's late answer is refused.
	claimed, err = s.ClaimReversals(ctx, at.Add(time.Minute), time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	second := claimed[0]
	assert.Equal(t, 2, second.Attempts)
	done := at.Add(90 * time.Second).UTC().Truncate(time.Millisecond)
	stale := first
	stale.Status, stale.Reference, stale.CompletedAt = disputes.ReversalReversed, "late", &done
	ok, err = s.RecordReversal(ctx, stale)
	require.NoError(t, err)
	assert.False(t, ok, "an older claim records nothing")

	// A transient failure: pending again after the backoff.
	retry := second
	retry.LastError, retry.NextAttemptAt = "503", at.Add(5*time.Minute)
	ok, err = s.RecordReversal(ctx, retry)
	require.NoError(t, err)
	assert.True(t, ok)
	claimed, err = s.ClaimReversals(ctx, at.Add(4*time.Minute), time.Minute, 10)
	require.NoError(t, err)
	assert.Empty(t, claimed, "backing off")
	claimed, err = s.ClaimReversals(ctx, at.Add(5*time.Minute), time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	third := claimed[0]
	assert.Equal(t, 3, third.Attempts)
	assert.Equal(t, "503", third.LastError)

	third.Status, third.Reference, third.LastError, third.CompletedAt = disputes.ReversalReversed, "rev_9", "", &done
	ok, err = s.RecordReversal(ctx, third)
	require.NoError(t, err)
	assert.True(t, ok)
	r, _, err = s.Reversal(ctx, "dsp_upi")
	require.NoError(t, err)
	assert.Equal(t, disputes.ReversalReversed, r.Status)
	assert.Equal(t, "rev_9", r.Reference)
	assert.Equal(t, 3, r.Attempts)
	require.NotNil(t, r.CompletedAt)
	assert.Equal(t, done, *r.CompletedAt)
	ok, err = s.RecordReversal(ctx, third)
	require.NoError(t, err)
	assert.False(t, ok, "final: recorded once")
	claimed, err = s.ClaimReversals(ctx, at.Add(24*time.Hour), time.Minute, 10)
	require.NoError(t, err)
	assert.Empty(t, claimed, "a reversed dispute is never called again")
	pending, err = s.PendingReversals(ctx)
	require.NoError(t, err)
	assert.Zero(t, pending)

	// At most limit per claim, oldest first.
	for _, id := range []string{"dsp_l1", "dsp_l2", "dsp_l3"} {
		require.NoError(t, s.ScheduleReminder(ctx, disputes.Reminder{DisputeID: id, EventID: "evt_" + id, TxnID: "txn", TATDueAt: now, RemindAt: now, AutoReverse: true}))
	}
	for range 3 {
		claimed, err = s.ClaimReversals(ctx, at, time.Minute, 1)
		require.NoError(t, err)
		assert.Len(t, claimed, 1, "limit 1")
	}
	claimed, err = s.ClaimReversals(ctx, at, time.Minute, 1)
	require.NoError(t, err)
	assert.Empty(t, claimed)
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
