package disputes_test

// The events-worker's follow-ups on both stores: the reminder sweep (each
// due reminder fires once, across sweepers) and the reversal worker (the
// HTTP reverser's contract, transient retried, permanent recorded, one call
// per reversal on a redelivery, a crash between the call and the record
// asking again with the same idempotency key, two workers at once).

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/handlers/disputes"
)

// logBuffer is a concurrency-safe log sink.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newMetrics(t *testing.T, s disputes.Store) (*disputes.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := disputes.NewMetrics(reg, s)
	require.NoError(t, err)
	return m, reg
}

func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
				}
				if !found {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	require.Failf(t, "no metric", "%s %v", name, labels)
	return 0
}

func TestReminderSweep(t *testing.T) {
	t.Parallel()
	for name, newStore := range storeKinds {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := newStore(t)
			now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
			due := disputes.Reminder{DisputeID: "dsp_due", EventID: "evt_due", TxnID: "txn_due", TATDueAt: now.Add(24 * time.Hour), RemindAt: now.Add(-time.Second)}
			require.NoError(t, s.ScheduleReminder(ctx, due))
			require.NoError(t, s.ScheduleReminder(ctx, disputes.Reminder{DisputeID: "dsp_later", EventID: "evt_later", TxnID: "txn_later",
				TATDueAt: now.Add(48 * time.Hour), RemindAt: now.Add(24 * time.Hour)}))
			m, reg := newMetrics(t, s)
			var logs logBuffer
			clk := &clock{now: now}
			sweep := func() *disputes.ReminderSweep {
				return &disputes.ReminderSweep{Store: s, Logger: logs.logger(), Metrics: m, Now: clk.Now}
			}

			// Two sweepers at once: the due reminder fires once.
			var wg sync.WaitGroup
			var fired atomic.Int64
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					n, err := sweep().Tick(ctx)
					assert.NoError(t, err)
					fired.Add(int64(n))
				}()
			}
			wg.Wait()
			assert.Equal(t, int64(1), fired.Load())
			n, err := sweep().Tick(ctx)
			require.NoError(t, err)
			assert.Zero(t, n, "fired once")
			assert.Equal(t, 1, strings.Count(logs.String(), `msg="dispute reminder due"`))
			assert.Contains(t, logs.String(), `msg="dispute reminder due" dispute_id=dsp_due txn_id=txn_due tat_due_at=2026-12-02T10:00:00.000Z`)
			assert.NotContains(t, logs.String(), "dsp_later", "not due yet")
			assert.InDelta(t, 1, metricValue(t, reg, "eventpipe_disputes_reminders_fired_total"), 0)
			r, _, err := s.Reminder(ctx, "dsp_later")
			require.NoError(t, err)
			assert.Nil(t, r.FiredAt)

			clk.advance(24 * time.Hour)
			n, err = sweep().Tick(ctx)
			require.NoError(t, err)
			assert.Equal(t, 1, n, "its time came")
			assert.InDelta(t, 2, metricValue(t, reg, "eventpipe_disputes_reminders_fired_total"), 0)

			// Run sweeps at once, then every interval, until ctx ends.
			require.NoError(t, s.ScheduleReminder(ctx, disputes.Reminder{DisputeID: "dsp_run", EventID: "evt_run", TxnID: "txn_run",
				TATDueAt: now, RemindAt: now}))
			runCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				done <- (&disputes.ReminderSweep{Store: s, Interval: time.Hour, Logger: logs.logger(), Metrics: m, Now: clk.Now}).Run(runCtx)
			}()
			require.Eventually(t, func() bool { return strings.Contains(logs.String(), "dispute_id=dsp_run") }, 5*time.Second, 10*time.Millisecond)
			cancel()
			require.NoError(t, <-done)
		})
	}
}

// reversalServer is the payment system's reversal endpoint: it records what
// it is sent and answers from script (then 200) — reversing once per
// idempotency key, as the contract asks of it.
type reversalServer struct {
	*httptest.Server
	mu       sync.Mutex
	script   []int
	requests []reversalCall
	reversed map[string]string // idempotency key → reversal id
}

type reversalCall struct {
	method, path, auth, ctype, key string
	body                           map[string]any
}

func newReversalServer(t *testing.T, script ...int) *reversalServer {
	rs := &reversalServer{script: script, reversed: map[string]string{}}
	rs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		c := reversalCall{method: r.Method, path: r.URL.Path, auth: r.Header.Get("Authorization"),
			ctype: r.Header.Get("Content-Type"), key: r.Header.Get(disputes.IdempotencyKeyHeader)}
		_ = json.Unmarshal(b, &c.body)
		rs.mu.Lock()
		rs.requests = append(rs.requests, c)
		status := http.StatusOK
		if len(rs.script) > 0 {
			status, rs.script = rs.script[0], rs.script[1:]
		}
		id, ok := rs.reversed[c.key]
		if status == http.StatusOK && !ok {
			id = "rev_" + c.body["dispute_id"].(string)
			rs.reversed[c.key] = id
		}
		rs.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		if status == http.StatusOK {
			_, _ = io.WriteString(w, `{"reversal_id":"`+id+`","status":"reversed"}`)
			return
		}
		_, _ = io.WriteString(w, `{"error":"scripted"}`)
	}))
	t.Cleanup(rs.Close)
	return rs
}

func (rs *reversalServer) calls() []reversalCall {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return append([]reversalCall(nil), rs.requests...)
}

func (rs *reversalServer) reversals() int {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return len(rs.reversed)
}

// The HTTP reverser against its contract: the request, and how each answer
// is classed.
func TestHTTPReverser(t *testing.T) {
	t.Parallel()
	rs := newReversalServer(t)
	h := &disputes.HTTPReverser{URL: rs.URL + "/v1/reversals", Token: "s3cret", Timeout: 500 * time.Millisecond}
	req := disputes.ReversalRequest{DisputeID: "dsp_1", TxnID: "txn_1", IdempotencyKey: disputes.ReversalIdempotencyKey("dsp_1")}
	res, err := h.Reverse(context.Background(), req)
	require.NoError(t, err)
	assert.Equal(t, disputes.ReversalResult{Reference: "rev_dsp_1"}, res)
	calls := rs.calls()
	require.Len(t, calls, 1)
	assert.Equal(t, reversalCall{method: http.MethodPost, path: "/v1/reversals", auth: "Bearer s3cret", ctype: "application/json",
		key: "dispute-reversal:dsp_1", body: map[string]any{"dispute_id": "dsp_1", "txn_id": "txn_1"}}, calls[0])

	_, err = (&disputes.HTTPReverser{URL: rs.URL}).Reverse(context.Background(), req)
	require.NoError(t, err)
	assert.Empty(t, rs.calls()[1].auth, "no token, no Authorization header")

	for name, c := range map[string]struct {
		status     int
		retryAfter string
		body       string
		class      failure.Class
		retryIn    time.Duration
		reference  string
	}{
		"202 without a body": {status: 202, class: -1},
		"201 not JSON":       {status: 201, body: "ok", class: -1},
		"500":                {status: 500, class: failure.Transient},
		"503 Retry-After":    {status: 503, retryAfter: "120", class: failure.Transient, retryIn: 2 * time.Minute},
		"429":                {status: 429, class: failure.Transient},
		"409 key in flight":  {status: 409, class: failure.Transient},
		"408":                {status: 408, class: failure.Transient},
		"400":                {status: 400, class: failure.Permanent},
		"401 bad token":      {status: 401, class: failure.Permanent},
		"404":                {status: 404, class: failure.Permanent},
		"422 key reused":     {status: 422, class: failure.Permanent},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if c.retryAfter != "" {
					w.Header().Set("Retry-After", c.retryAfter)
				}
				w.WriteHeader(c.status)
				_, _ = io.WriteString(w, c.body)
			}))
			t.Cleanup(srv.Close)
			res, err := (&disputes.HTTPReverser{URL: srv.URL}).Reverse(context.Background(), req)
			if c.class == -1 {
				require.NoError(t, err)
				assert.Empty(t, res.Reference)
				return
			}
			require.Error(t, err)
			assert.Equal(t, c.class, failure.Of(err), "%v", err)
			assert.Equal(t, c.retryIn, failure.RetryAfter(err))
			assert.Contains(t, err.Error(), "reverse dispute dsp_1")
		})
	}

	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}))
		t.Cleanup(srv.Close)
		_, err := (&disputes.HTTPReverser{URL: srv.URL, Timeout: 100 * time.Millisecond}).Reverse(context.Background(), req)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, failure.Transient, failure.Of(err))
	})
	t.Run("connection refused", func(t *testing.T) {
		t.Parallel()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := l.Addr().String()
		require.NoError(t, l.Close())
		_, err = (&disputes.HTTPReverser{URL: "http://" + addr + "/v1/reversals"}).Reverse(context.Background(), req)
		require.Error(t, err)
		assert.Equal(t, failure.Transient, failure.Of(err))
	})
}

func TestReversalIdempotencyKey(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "dispute-reversal:dsp_01JD3K5Z7M2B8C4D6F8H0J2K4L", disputes.ReversalIdempotencyKey("dsp_01JD3K5Z7M2B8C4D6F8H0J2K4L"))
	k := disputes.ReversalIdempotencyKey("dispute №7 with spaces")
	assert.True(t, strings.HasPrefix(k, "dispute-reversal:sha256:"), k)
	assert.Equal(t, k, disputes.ReversalIdempotencyKey("dispute №7 with spaces"), "stable")
}

// flakyRecord fails RecordReversal while failRecords > 0: the worker dies
// (or loses the database) between the call and the record.
type flakyRecord struct {
	disputes.Store
	failRecords atomic.Int64
}

func (f *flakyRecord) RecordReversal(ctx context.Context, r disputes.Reversal) (bool, error) {
	if f.failRecords.Add(-1) >= 0 {
		return false, errConnReset
	}
	return f.Store.RecordReversal(ctx, r)
}

func TestReversalWorker(t *testing.T) {
	t.Parallel()
	for name, newStore := range storeKinds {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, c := range []struct {
				name string
				run  func(t *testing.T, s disputes.Store)
			}{
				{"transient retried, then reversed", testReversalTransientThenReversed},
				{"permanent recorded as failed", testReversalPermanent},
				{"out of attempts", testReversalOutOfAttempts},
				{"redelivered DisputeRaised: one call", testReversalRedelivered},
				{"crash between call and record", testReversalCrashAfterCall},
				{"two workers", testReversalTwoWorkers},
			} {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.run(t, newStore(t))
				})
			}
		})
	}
}

// eligible stores an eligible reminder (DisputeRaised's effect) for id.
func eligible(t *testing.T, s disputes.Store, id string) {
	t.Helper()
	now := time.Now().UTC()
	require.NoError(t, s.ScheduleReminder(context.Background(), disputes.Reminder{DisputeID: id, EventID: "evt_" + id, TxnID: "txn_" + id,
		TATDueAt: now.Add(48 * time.Hour), RemindAt: now.Add(24 * time.Hour), AutoReverse: true}))
}

// reversalWorker is a worker on s calling rs, its clock one second after
// the rows' creation and advanced by the test.
func reversalWorker(t *testing.T, s disputes.Store, rs *reversalServer, clk *clock) (*disputes.ReversalWorker, *prometheus.Registry, *logBuffer) {
	t.Helper()
	m, reg := newMetrics(t, s)
	logs := &logBuffer{}
	return &disputes.ReversalWorker{
		Store: s, Reverser: &disputes.HTTPReverser{URL: rs.URL + "/v1/reversals", Token: "tok"},
		Timeout: time.Second, MaxAttempts: 4, Backoff: route.Backoff{Initial: time.Minute, Multiplier: 2, Max: time.Hour},
		Logger: logs.logger(), Metrics: m, Now: clk.Now,
	}, reg, logs
}

func newClock() *clock { return &clock{now: time.Now().Add(time.Second)} }

func reversalOf(t *testing.T, s disputes.Store, id string) disputes.Reversal {
	t.Helper()
	r, ok, err := s.Reversal(context.Background(), id)
	require.NoError(t, err)
	require.True(t, ok)
	return r
}

func tick(t *testing.T, w *disputes.ReversalWorker) int {
	t.Helper()
	n, err := w.Tick(context.Background())
	require.NoError(t, err)
	return n
}

func testReversalTransientThenReversed(t *testing.T, s disputes.Store) {
	eligible(t, s, "dsp_t")
	rs := newReversalServer(t, 503, 500)
	clk := newClock()
	w, reg, logs := reversalWorker(t, s, rs, clk)
	assert.Equal(t, 1, tick(t, w))
	r := reversalOf(t, s, "dsp_t")
	assert.Equal(t, disputes.ReversalPending, r.Status)
	assert.Contains(t, r.LastError, "503")
	assert.Equal(t, clk.Now().Add(time.Minute).UTC().Truncate(time.Millisecond), r.NextAttemptAt.Truncate(time.Millisecond), "backoff 1 min")
	assert.Zero(t, tick(t, w), "not due during the backoff")
	clk.advance(time.Minute)
	assert.Equal(t, 1, tick(t, w))
	clk.advance(2 * time.Minute)
	assert.Equal(t, 1, tick(t, w))
	r = reversalOf(t, s, "dsp_t")
	assert.Equal(t, disputes.ReversalReversed, r.Status)
	assert.Equal(t, "rev_dsp_t", r.Reference)
	assert.Equal(t, 3, r.Attempts)
	assert.Empty(t, r.LastError)
	require.NotNil(t, r.CompletedAt)
	clk.advance(time.Hour)
	assert.Zero(t, tick(t, w), "never called again")
	calls := rs.calls()
	require.Len(t, calls, 3)
	for _, c := range calls {
		assert.Equal(t, "dispute-reversal:dsp_t", c.key, "every attempt sends the same key")
		assert.Equal(t, "Bearer tok", c.auth)
		assert.Equal(t, map[string]any{"dispute_id": "dsp_t", "txn_id": "txn_dsp_t"}, c.body)
	}
	assert.InDelta(t, 2, metricValue(t, reg, "eventpipe_disputes_reversals_total", "outcome", "retried"), 0)
	assert.InDelta(t, 1, metricValue(t, reg, "eventpipe_disputes_reversals_total", "outcome", "reversed"), 0)
	assert.InDelta(t, 0, metricValue(t, reg, "eventpipe_disputes_reversals_pending"), 0)
	assert.Contains(t, logs.String(), `msg="dispute auto-reversed" dispute_id=dsp_t txn_id=txn_dsp_t attempt=3 reference=rev_dsp_t`)
}

func testReversalPermanent(t *testing.T, s disputes.Store) {
	eligible(t, s, "dsp_p")
	rs := newReversalServer(t, 422)
	clk := newClock()
	w, reg, _ := reversalWorker(t, s, rs, clk)
	assert.InDelta(t, 1, metricValue(t, reg, "eventpipe_disputes_reversals_pending"), 0)
	assert.Equal(t, 1, tick(t, w))
	r := reversalOf(t, s, "dsp_p")
	assert.Equal(t, disputes.ReversalFailed, r.Status)
	assert.Contains(t, r.LastError, "422")
	assert.NotContains(t, r.LastError, "permanent:", "the reason, not the class marker")
	require.NotNil(t, r.CompletedAt)
	clk.advance(24 * time.Hour)
	assert.Zero(t, tick(t, w), "a failed reversal is not retried")
	assert.Len(t, rs.calls(), 1)
	assert.InDelta(t, 1, metricValue(t, reg, "eventpipe_disputes_reversals_total", "outcome", "failed"), 0)
	assert.InDelta(t, 0, metricValue(t, reg, "eventpipe_disputes_reversals_pending"), 0)
}

func testReversalOutOfAttempts(t *testing.T, s disputes.Store) {
	eligible(t, s, "dsp_o")
	rs := newReversalServer(t, 500, 500, 500, 500, 500)
	clk := newClock()
	w, _, _ := reversalWorker(t, s, rs, clk)
	for range 6 {
		tick(t, w)
		clk.advance(time.Hour)
	}
	r := reversalOf(t, s, "dsp_o")
	assert.Equal(t, disputes.ReversalFailed, r.Status)
	assert.Equal(t, 4, r.Attempts)
	assert.Contains(t, r.LastError, "gave up after 4 attempts")
	assert.Len(t, rs.calls(), 4, "MaxAttempts calls")
}

// A redelivered DisputeRaised (the inbox lets a second event id for the
// same dispute through; the same event id never reaches the store) adds no
// reversal: one call.
func testReversalRedelivered(t *testing.T, s disputes.Store) {
	eligible(t, s, "dsp_r")
	rs := newReversalServer(t)
	clk := newClock()
	w, _, _ := reversalWorker(t, s, rs, clk)
	assert.Equal(t, 1, tick(t, w))
	eligible(t, s, "dsp_r")
	clk.advance(time.Hour)
	assert.Zero(t, tick(t, w))
	assert.Len(t, rs.calls(), 1)
	assert.Equal(t, disputes.ReversalReversed, reversalOf(t, s, "dsp_r").Status)
}

// The call succeeds but its outcome is not recorded (the worker died, the
// database went away): until the claim's lease ends nobody calls; then the
// next claim calls with the same key, and the payment system reverses once.
func testReversalCrashAfterCall(t *testing.T, s disputes.Store) {
	eligible(t, s, "dsp_c")
	flaky := &flakyRecord{Store: s}
	flaky.failRecords.Store(1)
	rs := newReversalServer(t)
	clk := newClock()
	w, _, _ := reversalWorker(t, flaky, rs, clk)
	_, err := w.Tick(context.Background())
	require.ErrorIs(t, err, errConnReset)
	assert.Equal(t, disputes.ReversalPending, reversalOf(t, s, "dsp_c").Status)
	clk.advance(30 * time.Second)
	assert.Zero(t, tick(t, w), "leased: timeout 1 s + 30 s margin")
	clk.advance(2 * time.Second)
	assert.Equal(t, 1, tick(t, w))
	calls := rs.calls()
	require.Len(t, calls, 2)
	assert.Equal(t, calls[0].key, calls[1].key, "the same idempotency key")
	assert.Equal(t, 1, rs.reversals(), "reversed once")
	r := reversalOf(t, s, "dsp_c")
	assert.Equal(t, disputes.ReversalReversed, r.Status)
	assert.Equal(t, "rev_dsp_c", r.Reference)
}

func testReversalTwoWorkers(t *testing.T, s disputes.Store) {
	const n = 12
	for i := range n {
		eligible(t, s, "dsp_w"+string(rune('a'+i)))
	}
	rs := newReversalServer(t)
	clk := newClock()
	var wg sync.WaitGroup
	for range 2 {
		w, _, _ := reversalWorker(t, s, rs, clk)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := w.Tick(context.Background())
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	calls := rs.calls()
	assert.Len(t, calls, n, "one call per reversal")
	keys := map[string]bool{}
	for _, c := range calls {
		keys[c.key] = true
	}
	assert.Len(t, keys, n)
	pending, err := s.PendingReversals(context.Background())
	require.NoError(t, err)
	assert.Zero(t, pending)
}

// A worker stopped mid-call records nothing: the lease ends and the next
// claim asks again.
func TestReversalWorkerShutdownMidCall(t *testing.T) {
	t.Parallel()
	s := storeKinds["memory"](t)
	eligible(t, s, "dsp_s")
	started := make(chan struct{})
	w := &disputes.ReversalWorker{Store: s, Reverser: reverserFunc(func(ctx context.Context, _ disputes.ReversalRequest) (disputes.ReversalResult, error) {
		close(started)
		<-ctx.Done()
		return disputes.ReversalResult{}, ctx.Err()
	}), Interval: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-started
	cancel()
	require.NoError(t, <-done)
	r := reversalOf(t, s, "dsp_s")
	assert.Equal(t, disputes.ReversalPending, r.Status)
	assert.Empty(t, r.LastError, "nothing recorded")
	assert.Equal(t, 1, r.Attempts)
}

type reverserFunc func(ctx context.Context, req disputes.ReversalRequest) (disputes.ReversalResult, error)

func (f reverserFunc) Reverse(ctx context.Context, req disputes.ReversalRequest) (disputes.ReversalResult, error) {
	return f(ctx, req)
}
