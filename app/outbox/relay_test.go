package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/memory"
	"github.com/eventpipe/eventpipe/app/dbtx"
	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/outbox"
)

// fast keeps retries quick in tests.
var fast = outbox.RelayConfig{MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}

func TestRelayPublishesOneCallPerTopicAndMarks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	a, b := msgs("a", 3), msgs("b", 2)
	a[0].Metadata.Set("x-trace-id", "t1")
	e.write(t, "topic-a", a[:2]...)
	e.write(t, "topic-b", b...)
	e.write(t, "topic-a", a[2])

	pub := &fakePublisher{}
	r := e.relay(t, pub, outbox.RelayConfig{})
	res, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, outbox.BatchResult{Claimed: 5, Published: 5}, res)

	require.Len(t, pub.calls, 2, "one Publish per topic")
	assert.Equal(t, "topic-a", pub.calls[0].topic)
	assert.Equal(t, []string{"a-0", "a-1", "a-2"}, uuids(pub.calls[0].msgs))
	assert.Equal(t, "topic-b", pub.calls[1].topic)
	assert.Equal(t, []string{"b-0", "b-1"}, uuids(pub.calls[1].msgs))
	assert.Equal(t, "t1", pub.calls[0].msgs[0].Metadata.Get("x-trace-id"))
	assert.Equal(t, `{"n":0}`, string(pub.calls[0].msgs[0].Payload))
	assert.Equal(t, 5, e.count(t, "published_at IS NOT NULL"))

	res, err = r.RelayOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, outbox.BatchResult{}, res, "nothing left")
	assert.Equal(t, 2, pub.callCount())
}

func uuids(ms []*message.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.UUID
	}
	return out
}

// Relay → the real embedded broker → a subscriber, woken by NOTIFY (the poll
// interval is far longer than the test).
func TestRelayToMemoryBroker(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newEnv(t)
	ps, err := memory.New(memory.Config{}, nil)
	require.NoError(t, err)
	defer func() { _ = ps.Close() }()
	sub, err := ps.Subscribe(ctx, "domain-events")
	require.NoError(t, err)

	r := e.relay(t, ps, outbox.RelayConfig{PollInterval: time.Hour})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()

	m := message.NewMessage("evt-1", []byte(`{"event_type":"DisputeRaised"}`))
	m.Metadata.Set("x-trace-id", "trace-1")
	waitListening(t, e)
	e.write(t, "domain-events", m)

	select {
	case got := <-sub:
		assert.Equal(t, "evt-1", got.UUID)
		assert.Equal(t, m.Payload, got.Payload)
		assert.Equal(t, "trace-1", got.Metadata.Get("x-trace-id"))
		got.Ack()
	case <-ctx.Done():
		require.FailNow(t, "message not relayed")
	}
	require.Eventually(t, func() bool { return e.row(t, "evt-1").Published }, 5*time.Second, 10*time.Millisecond)
	stop()
	require.NoError(t, <-done)
}

// waitListening waits until the schema's relay listener is connected, so a
// test's NOTIFY cannot arrive before it.
func waitListening(t *testing.T, e env) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var n int
		if assert.NoError(c, e.pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state = 'idle'`, outbox.ListenerAppName(e.schema)).Scan(&n)) {
			assert.Positive(c, n)
		}
	}, 10*time.Second, 10*time.Millisecond)
	time.Sleep(50 * time.Millisecond) // LISTEN follows the connect
}

func TestRelayRetriesUntilThePublisherRecovers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.write(t, "t", msgs("m", 2)...)
	pub := &fakePublisher{fail: func(call int, _ string, _ []*message.Message) error {
		if call < 2 {
			return errors.New("broker unreachable")
		}
		return nil
	}}
	r := e.relay(t, pub, fast)

	for i := range 2 {
		res, err := r.RelayOnce(ctx)
		require.NoError(t, err)
		assert.Equal(t, outbox.BatchResult{Claimed: 2, Failed: 2}, res, "attempt %d", i)
		s := e.row(t, "m-0")
		assert.False(t, s.Published)
		assert.Equal(t, i+1, s.Attempts)
		require.NotNil(t, s.LastError)
		assert.Contains(t, *s.LastError, "broker unreachable")
		time.Sleep(10 * time.Millisecond) // past the backoff
	}
	res, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, outbox.BatchResult{Claimed: 2, Published: 2}, res)
	s := e.row(t, "m-1")
	assert.True(t, s.Published)
	assert.Equal(t, 2, s.Attempts, "failed attempts stay counted")
	assert.Nil(t, s.LastError)
}

func TestRelayBacksOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.write(t, "t", msgs("m", 1)...)
	pub := &fakePublisher{fail: func(int, string, []*message.Message) error { return errors.New("down") }}
	r := e.relay(t, pub, outbox.RelayConfig{MinBackoff: time.Hour, MaxBackoff: 2 * time.Hour})
	_, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	res, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, outbox.BatchResult{}, res, "not retried before next_attempt_at")
	assert.Equal(t, 1, e.count(t, "next_attempt_at > now() + interval '45 minutes'"))
}

func TestRelayMarksOnlyConfirmedRowsOnPartialFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.write(t, "t", msgs("m", 4)...)
	pub := &fakePublisher{fail: failIDs("m-1", "m-3")}
	r := e.relay(t, pub, fast)
	res, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, outbox.BatchResult{Claimed: 4, Published: 2, Failed: 2}, res)
	for id, published := range map[string]bool{"m-0": true, "m-1": false, "m-2": true, "m-3": false} {
		s := e.row(t, id)
		assert.Equal(t, published, s.Published, id)
		assert.Equal(t, map[bool]int{true: 0, false: 1}[published], s.Attempts, id)
	}
}

// A row the broker refuses permanently is parked after MaxAttempts tries and
// never holds back the rows written after it (no strict order here).
func TestRelayParksAPoisonRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.write(t, "t", message.NewMessage("poison", []byte(`{}`)))
	e.write(t, "t", msgs("ok", 3)...)
	pub := &fakePublisher{fail: refuseIDs("poison")}
	reg := prometheus.NewRegistry()
	cfg := fast
	cfg.MaxAttempts, cfg.BatchSize, cfg.Registerer = 3, 2, reg
	r := e.relay(t, pub, cfg)

	for range 10 {
		_, err := r.RelayOnce(ctx)
		require.NoError(t, err)
		time.Sleep(5 * time.Millisecond)
	}
	s := e.row(t, "poison")
	assert.True(t, s.Parked)
	assert.False(t, s.Published)
	assert.Equal(t, 3, s.Attempts)
	assert.Equal(t, 3, pub.sent()["poison"], "not tried after parking")
	assert.Equal(t, 3, e.count(t, "published_at IS NOT NULL"))

	assert.InDelta(t, 3, testutil.ToFloat64(prometheusCounter(reg, t, "eventpipe_outbox_published_total")), 0)
	assert.InDelta(t, 3, testutil.ToFloat64(prometheusCounter(reg, t, "eventpipe_outbox_failed_total")), 0)
	assert.InDelta(t, 1, testutil.ToFloat64(prometheusCounter(reg, t, "eventpipe_outbox_parked_total")), 0)
}

// prometheusCounter sums a counter family over its labels, as a collector
// testutil can read.
func prometheusCounter(reg *prometheus.Registry, t *testing.T, name string) prometheus.Collector {
	t.Helper()
	fams, err := reg.Gather()
	require.NoError(t, err)
	var sum float64
	for _, f := range fams {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "sum"})
	c.Add(sum)
	return c
}

func TestRelayGauges(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newEnv(t)
	e.write(t, "t", msgs("poison", 2)...)
	e.write(t, "t", msgs("waiting", 3)...)
	_, err := e.pool.Exec(ctx, `UPDATE `+e.q("outbox")+` SET next_attempt_at = now() + interval '1 hour', created_at = now() - interval '1 minute' WHERE event_id LIKE 'waiting-%'`)
	require.NoError(t, err)

	reg := prometheus.NewRegistry()
	pub := &fakePublisher{fail: refuseIDs("poison-0", "poison-1")}
	cfg := fast
	cfg.Registerer, cfg.PollInterval = reg, time.Hour
	r := e.relay(t, pub, cfg)
	// A second relay on the same registry shares the collectors.
	_ = e.relay(t, pub, cfg)

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	require.Eventually(t, func() bool { return e.count(t, "parked_at IS NOT NULL") == 2 }, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		return gauge(t, reg, "eventpipe_outbox_parked") == 2
	}, 10*time.Second, 10*time.Millisecond)
	assert.InDelta(t, 3, gauge(t, reg, "eventpipe_outbox_backlog"), 0)
	assert.GreaterOrEqual(t, gauge(t, reg, "eventpipe_outbox_lag_seconds"), 59.0)
	stop()
	require.NoError(t, <-done)
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// Two relays over one table publish every row exactly once (disputes LLD §5,
// last test).
func TestConcurrentRelaysPublishEachRowOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newEnv(t)
	const total = 500
	for i := range 10 {
		e.write(t, fmt.Sprintf("topic-%d", i%3), msgs(fmt.Sprintf("w%d", i), total/10)...)
	}
	pub := &fakePublisher{delay: time.Millisecond}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 2 {
		r := e.relay(t, pub, outbox.RelayConfig{BatchSize: 20, PollInterval: 50 * time.Millisecond})
		wg.Go(func() { assert.NoError(t, r.Run(runCtx)) })
	}
	require.Eventually(t, func() bool { return e.count(t, "published_at IS NULL") == 0 }, 50*time.Second, 20*time.Millisecond)
	stop()
	wg.Wait()

	sent := pub.sent()
	assert.Len(t, sent, total)
	for id, n := range sent {
		assert.Equal(t, 1, n, "times %s was published", id)
	}
	assert.Greater(t, pub.callCount(), total/20, "work was split into batches")
}

// With strict order, a key's rows are published in write order, even when
// the first one fails for a while and two relays compete.
func TestRelayStrictOrderPerKey(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newEnv(t)
	const keys, perKey = 4, 15
	var want [keys][]string
	for i := range perKey {
		for k := range keys {
			m := message.NewMessage(fmt.Sprintf("k%d-%02d", k, i), []byte(`{}`))
			m.Metadata.Set(outbox.OrderingKeyMetadata, fmt.Sprintf("key-%d", k))
			e.write(t, "ordered", m)
			want[k] = append(want[k], m.UUID)
		}
	}
	var fails atomic.Int32
	pub := &fakePublisher{delay: time.Millisecond, fail: func(_ int, _ string, msgs []*message.Message) error {
		for _, m := range msgs {
			if m.UUID == "k0-00" && fails.Add(1) <= 3 {
				return partialError{failed: []string{"k0-00"}}
			}
		}
		return nil
	}}
	cfg := fast
	cfg.StrictOrderTopics, cfg.PollInterval = []string{"ordered"}, 20*time.Millisecond

	// One claim takes at most one row per key.
	res, err := e.relay(t, pub, cfg).RelayOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, keys, res.Claimed)

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 2 {
		r := e.relay(t, pub, cfg)
		wg.Go(func() { assert.NoError(t, r.Run(runCtx)) })
	}
	require.Eventually(t, func() bool { return e.count(t, "published_at IS NULL") == 0 }, 50*time.Second, 20*time.Millisecond)
	stop()
	wg.Wait()

	// Published order per key = write order (the failed attempts of k0-00
	// come first, all before k0-01).
	var got [keys][]string
	seen := map[string]bool{}
	for _, id := range pub.order() {
		var k int
		_, _ = fmt.Sscanf(id, "k%d-", &k)
		if !seen[id] || id == "k0-00" {
			if !seen[id] {
				got[k] = append(got[k], id)
			}
			seen[id] = true
		}
	}
	assert.Equal(t, want, got)
	assert.Equal(t, int32(4), fails.Load(), "k0-00: 3 failures, then sent")
	for id, n := range pub.sent() {
		if id != "k0-00" {
			assert.Equal(t, 1, n, "times %s was sent", id)
		}
	}
}

// Without strict order, keyed rows are claimed together.
func TestRelayWithoutStrictOrderIgnoresKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ms := msgs("m", 5)
	for _, m := range ms {
		m.Metadata.Set(outbox.OrderingKeyMetadata, "same")
	}
	e.write(t, "t", ms...)
	res, err := e.relay(t, &fakePublisher{}, outbox.RelayConfig{StrictOrderTopics: []string{"other"}}).RelayOnce(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 5, res.Published)
}

// A crash after the broker accepted the messages and before they were marked
// publishes them twice; the consumer's inbox applies the effect once.
func TestCrashAfterPublishIsDeduplicatedByTheInbox(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newEnv(t)
	_, err := e.pool.Exec(ctx, `CREATE TABLE `+e.q("reviews")+` (event_id text)`)
	require.NoError(t, err)
	store, err := inbox.NewPostgres(e.pool, e.schema)
	require.NoError(t, err)

	ps, err := memory.New(memory.Config{}, nil)
	require.NoError(t, err)
	defer func() { _ = ps.Close() }()
	sub, err := ps.Subscribe(ctx, "domain-events")
	require.NoError(t, err)
	var deliveries, duplicates atomic.Int32
	consumed := make(chan struct{}, 10)
	go func() {
		for m := range sub {
			deliveries.Add(1)
			err := store.Process(m.Context(), "events-worker", m.UUID, func(ctx context.Context) error {
				tx, _ := dbtx.From(ctx)
				_, err := tx.Exec(ctx, `INSERT INTO `+e.q("reviews")+` (event_id) VALUES ($1)`, m.UUID)
				return err
			})
			if failure.Of(err) == failure.Duplicate {
				duplicates.Add(1)
				err = nil
			}
			assert.NoError(t, err)
			m.Ack()
			consumed <- struct{}{}
		}
	}()

	e.write(t, "domain-events", message.NewMessage("evt-1", []byte(`{}`)))
	r := e.relay(t, ps, fast)
	crashed := false
	outbox.SetAfterPublish(r, func(context.Context) error {
		if !crashed {
			crashed = true
			return errors.New("simulated crash before marking")
		}
		return nil
	})
	_, err = r.RelayOnce(ctx)
	require.ErrorContains(t, err, "simulated crash")
	assert.False(t, e.row(t, "evt-1").Published)
	assert.Equal(t, 0, e.row(t, "evt-1").Attempts, "a crash records nothing")

	res, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, res.Published)
	for range 2 {
		select {
		case <-consumed:
		case <-ctx.Done():
			require.FailNow(t, "consumer did not get both deliveries")
		}
	}
	assert.Equal(t, int32(2), deliveries.Load(), "published twice")
	assert.Equal(t, int32(1), duplicates.Load())
	var effects int
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FROM `+e.q("reviews")).Scan(&effects))
	assert.Equal(t, 1, effects, "effect applied once")
}

// The listener reconnects after its connection is killed and keeps waking
// the relay without waiting for the poll interval.
func TestRelayListenerReconnects(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newEnv(t)
	pub := &fakePublisher{}
	r := e.relay(t, pub, outbox.RelayConfig{PollInterval: time.Hour})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()

	waitListening(t, e)
	var killed int
	require.NoError(t, e.pool.QueryRow(ctx,
		`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, outbox.ListenerAppName(e.schema)).Scan(&killed))
	require.Equal(t, 1, killed)
	time.Sleep(50 * time.Millisecond)
	waitListening(t, e)

	e.write(t, "t", msgs("after-kill", 1)...)
	require.Eventually(t, func() bool { return pub.sent()["after-kill-0"] == 1 }, 10*time.Second, 10*time.Millisecond)
	stop()
	require.NoError(t, <-done)
}

func TestNewRelayValidates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, err := outbox.NewRelay(e.pool, &fakePublisher{}, outbox.RelayConfig{BatchSize: -1, MinBackoff: time.Hour, MaxBackoff: time.Second, Schema: "X"}, nil)
	require.Error(t, err)
	for _, want := range []string{"batch size", "backoff", "schema"} {
		assert.ErrorContains(t, err, want)
	}
	_, err = outbox.NewRelay(nil, nil, outbox.RelayConfig{}, nil)
	require.Error(t, err)
}

// A partial error naming an unknown message cannot say which one failed:
// nothing of the call is marked.
func TestRelayDistrustsAPartialErrorWithUnknownIDs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write(t, "t", msgs("m", 3)...)
	pub := &fakePublisher{fail: func(int, string, []*message.Message) error {
		return partialError{failed: []string{"m-1", "(unknown entry 7)"}}
	}}
	res, err := e.relay(t, pub, fast).RelayOnce(context.Background())
	require.NoError(t, err)
	assert.Equal(t, outbox.BatchResult{Claimed: 3, Failed: 3}, res)
}
