package joinlink_test

// The spec on every broker, through the router and the one middleware chain:
// memory runs the memory store and schedules; the durable brokers run the
// Postgres store and the join_link_schedules table.

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/handlers/joinlink"
)

func TestSpecOnEveryBroker(t *testing.T) {
	t.Parallel()
	testbrokers.RunEach(t, []testbrokers.Case{
		{Name: "schedule, due, processed once, COMPLETED", Run: testScheduledToCompleted},
		{Name: "duplicate delivery, one generation", Run: testDuplicate},
		{Name: "stale IN_PROGRESS reclaimed, COMPLETED never", Run: testStaleReclaim},
		{Name: "retryable failure then success", Run: testRetryThenSuccess},
		{Name: "non-retryable failure, FAILED and acked", Run: testNonRetryable},
		{Name: "event older than 24 h acked unprocessed", Run: testAgedOut},
		{Name: "past 5 receives acked with a log line", Run: testPastMaxReceives},
		{Name: "invalid body acked, not retried", Run: testInvalidBody},
	})
}

// handled records each handler call's message id and result.
type handled struct {
	mu   sync.Mutex
	errs map[string][]error
}

func (h *handled) wrap(next message.NoPublishHandlerFunc) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		err := next(msg)
		h.mu.Lock()
		h.errs[msg.UUID] = append(h.errs[msg.UUID], err)
		h.mu.Unlock()
		return err
	}
}

func (h *handled) of(id string) []error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]error(nil), h.errs[id]...)
}

// logRecorder keeps every log message.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }
func (l *logRecorder) has(substr string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.msgs {
		if strings.Contains(m, substr) {
			return true
		}
	}
	return false
}

type flow struct {
	b       testbrokers.Kind
	ps      message.Publisher
	store   joinlink.Store
	gen     *joinlink.MemoryGenerator
	svc     *joinlink.Service
	queue   string
	handled *handled
	logs    *logRecorder
	clock   *clock
}

type clock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

var short = route.Backoff{Initial: 200 * time.Millisecond, Multiplier: 1.5, Max: 400 * time.Millisecond, Jitter: 0.1}

func newFlow(t *testing.T, b testbrokers.Kind) *flow {
	t.Helper()
	ps := testbrokers.New(t, b.Name, testbrokers.Scope(t, b.Name))
	queue := "ept-" + strings.ToLower(watermill.NewShortUUID()) + "-" + joinlink.Queue
	logs := &logRecorder{}
	logger := slog.New(logs)
	f := &flow{b: b, ps: ps, queue: queue, gen: joinlink.NewMemoryGenerator(), handled: &handled{errs: map[string][]error{}}, logs: logs, clock: &clock{}}
	var schedules joinlink.DueSchedules
	if b.Durable {
		pool, schema := dbtest.Schema(t)
		s, err := joinlink.NewPostgres(pool, schema)
		require.NoError(t, err)
		f.store = s
		ps, err := joinlink.NewPostgresSchedules(pool, schema)
		require.NoError(t, err)
		schedules = ps
	} else {
		f.store = joinlink.NewMemory()
		schedules = joinlink.NewMemorySchedules()
	}
	f.svc = &joinlink.Service{
		Store: f.store, Generator: f.gen, Logger: logger, Now: f.clock.now,
		Scheduler: &joinlink.Scheduler{Enabled: true, Schedules: schedules, Logger: logger},
	}
	h := joinlink.Handlers{Service: f.svc, Logger: logger, Backoff: short, Now: f.clock.now}
	r := h.Routes()[0]
	assert.Equal(t, route.Policy{MaxAttempts: 5, Redelivery: route.Broker, Backoff: short, OnPermanent: route.Drop}, r.Policy)
	r.Queue = queue
	r.Handle = f.handled.wrap(r.Handle)
	if init, ok := ps.(message.SubscribeInitializer); ok {
		require.NoError(t, init.SubscribeInitialize(queue))
	}
	testbrokers.StartRoutes(t, ps, nil, logger, r)
	// Registered after StartRoutes: stopped before the router closes ps.
	d := &joinlink.Dispatcher{Schedules: schedules, Publisher: ps, Topic: queue, Interval: 100 * time.Millisecond, Logger: logger}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return f
}

// scheduled makes a SCHEDULED session whose schedule fires in an hour (the
// dispatcher leaves it alone): the tests publish its event themselves.
func (f *flow) scheduled(t *testing.T) int64 {
	t.Helper()
	ctx := context.Background()
	id, err := f.store.CreateSession(ctx, f.clock.now())
	require.NoError(t, err)
	at := f.clock.now().Add(time.Hour)
	_, err = f.store.SetLinkGeneration(ctx, id, &at, 1, f.clock.now(), f.clock.now().Add(-joinlink.StaleAfter))
	require.NoError(t, err)
	return id
}

func (f *flow) publish(t *testing.T, id int64, ts time.Time) *message.Message {
	t.Helper()
	msg, err := joinlink.NewWatermillMessage(joinlink.NewMessage(joinlink.Data{ProgramSessionID: id, Role: "attendee"}, ts))
	require.NoError(t, err)
	require.NoError(t, f.ps.Publish(f.queue, msg))
	return msg
}

func (f *flow) status(t *testing.T, id int64) joinlink.Status {
	t.Helper()
	s, err := f.store.Session(context.Background(), id)
	require.NoError(t, err)
	return s.Status
}

func testScheduledToCompleted(t *testing.T, b testbrokers.Kind) {
	f := newFlow(t, b)
	ctx := context.Background()
	id, err := f.store.CreateSession(ctx, f.clock.now())
	require.NoError(t, err)
	at := f.clock.now().Add(500 * time.Millisecond)
	sess, err := f.svc.SetLinkGeneration(ctx, id, &at, 7)
	require.NoError(t, err)
	assert.Equal(t, joinlink.Scheduled, sess.Status)
	testbrokers.Eventually(t, 2*f.b.Redelivery, "COMPLETED", func() bool { return f.status(t, id) == joinlink.Completed })
	time.Sleep(time.Second)
	assert.Equal(t, 1, f.gen.Calls(id), "processed once")
	assert.Equal(t, joinlink.Completed, f.status(t, id))
}

func testDuplicate(t *testing.T, b testbrokers.Kind) {
	f := newFlow(t, b)
	id := f.scheduled(t)
	msg, err := joinlink.NewWatermillMessage(joinlink.NewMessage(joinlink.Data{ProgramSessionID: id}, f.clock.now()))
	require.NoError(t, err)
	for range 2 { // at-least-once: the same event delivered twice
		require.NoError(t, f.ps.Publish(f.queue, msg.Copy()))
	}
	testbrokers.Eventually(t, 2*f.b.Redelivery, "two deliveries", func() bool { return len(f.handled.of(msg.UUID)) >= 2 })
	time.Sleep(500 * time.Millisecond)
	assert.Equal(t, []error{nil, nil}, f.handled.of(msg.UUID), "both acked: a lost claim is no failure")
	assert.Equal(t, 1, f.gen.Calls(id), "one generation")
	assert.Equal(t, joinlink.Completed, f.status(t, id))
}

func testStaleReclaim(t *testing.T, b testbrokers.Kind) {
	f := newFlow(t, b)
	ctx := context.Background()
	id := f.scheduled(t)
	crashed := f.clock.now().Add(-31 * time.Minute) // a run that died 31 min ago
	won, err := f.store.Claim(ctx, id, 0, crashed, crashed.Add(-joinlink.StaleAfter))
	require.NoError(t, err)
	require.True(t, won)
	live := f.scheduled(t)
	won, err = f.store.Claim(ctx, live, 0, f.clock.now().Add(-time.Minute), f.clock.now().Add(-time.Minute-joinlink.StaleAfter))
	require.NoError(t, err)
	require.True(t, won)

	m1 := f.publish(t, id, f.clock.now())
	m2 := f.publish(t, live, f.clock.now())
	testbrokers.Eventually(t, 2*f.b.Redelivery, "stale run reclaimed", func() bool { return f.status(t, id) == joinlink.Completed })
	testbrokers.Eventually(t, 2*f.b.Redelivery, "live run left alone", func() bool { return len(f.handled.of(m2.UUID)) == 1 })
	assert.Equal(t, []error{nil}, f.handled.of(m1.UUID))
	assert.Equal(t, joinlink.InProgress, f.status(t, live), "a live IN_PROGRESS is not reclaimed")
	assert.Zero(t, f.gen.Calls(live))

	again := f.publish(t, id, f.clock.now()) // a late event for a COMPLETED session
	f.clock.advance(2 * time.Hour)           // long past any stale window
	testbrokers.Eventually(t, 2*f.b.Redelivery, "late event acked", func() bool { return len(f.handled.of(again.UUID)) == 1 })
	assert.Equal(t, []error{nil}, f.handled.of(again.UUID))
	assert.Equal(t, 1, f.gen.Calls(id), "COMPLETED is never reclaimed")
	assert.Equal(t, joinlink.Completed, f.status(t, id))
}

func testRetryThenSuccess(t *testing.T, b testbrokers.Kind) {
	f := newFlow(t, b)
	id := f.scheduled(t)
	f.gen.FailNext(id, errors.New("bulkRegister: zoom 503"))
	msg := f.publish(t, id, f.clock.now())
	testbrokers.Eventually(t, 3*f.b.Redelivery, "COMPLETED after a retry", func() bool { return f.status(t, id) == joinlink.Completed })
	errs := f.handled.of(msg.UUID)
	require.Len(t, errs, 2)
	assert.Equal(t, failure.Transient, failure.Of(errs[0]), "generation errors are retryable")
	require.NoError(t, errs[1])
	assert.Equal(t, 2, f.gen.Calls(id))
}

func testNonRetryable(t *testing.T, b testbrokers.Kind) {
	f := newFlow(t, b)
	id := f.scheduled(t)
	f.gen.FailNext(id, failure.Permanentf("session has no online details"))
	msg := f.publish(t, id, f.clock.now())
	testbrokers.Eventually(t, 2*f.b.Redelivery, "handled", func() bool { return len(f.handled.of(msg.UUID)) == 1 })
	testbrokers.Eventually(t, f.b.Redelivery, "FAILED", func() bool { return f.status(t, id) == joinlink.Failed })
	time.Sleep(time.Second)
	errs := f.handled.of(msg.UUID)
	require.Len(t, errs, 1, "acked, not retried")
	assert.Equal(t, failure.Permanent, failure.Of(errs[0]))
	assert.Equal(t, 1, f.gen.Calls(id))
	testbrokers.Eventually(t, time.Second, "drop log line", func() bool { return f.logs.has("message dropped") })
}

func testAgedOut(t *testing.T, b testbrokers.Kind) {
	f := newFlow(t, b)
	id := f.scheduled(t)
	msg := f.publish(t, id, f.clock.now().Add(-25*time.Hour))
	testbrokers.Eventually(t, 2*f.b.Redelivery, "handled", func() bool { return len(f.handled.of(msg.UUID)) == 1 })
	time.Sleep(500 * time.Millisecond)
	assert.Equal(t, []error{nil}, f.handled.of(msg.UUID), "acked")
	assert.Zero(t, f.gen.Calls(id), "not processed")
	assert.Equal(t, joinlink.Scheduled, f.status(t, id), "left to the sweep")
	assert.True(t, f.logs.has("older than its max age"))
}

func testPastMaxReceives(t *testing.T, b testbrokers.Kind) {
	f := newFlow(t, b)
	id := f.scheduled(t)
	boom := errors.New("bulkRegister: zoom 429")
	f.gen.FailNext(id, boom, boom, boom, boom, boom, boom, boom, boom)
	msg := f.publish(t, id, f.clock.now())
	testbrokers.Eventually(t, 6*f.b.Redelivery, "5 attempts", func() bool { return len(f.handled.of(msg.UUID)) >= joinlink.MaxRetryAttempts })
	testbrokers.Eventually(t, 2*time.Second, "exhausted log line", func() bool { return f.logs.has("attempts exhausted") })
	time.Sleep(2 * time.Second)
	assert.Len(t, f.handled.of(msg.UUID), joinlink.MaxRetryAttempts, "acked after 5 receives, not delivered again")
	assert.Equal(t, joinlink.MaxRetryAttempts, f.gen.Calls(id))
	assert.Equal(t, joinlink.Failed, f.status(t, id), "FAILED: the sweep's candidate")
}

func testInvalidBody(t *testing.T, b testbrokers.Kind) {
	f := newFlow(t, b)
	msg := message.NewMessage(watermill.NewUUID(), []byte(`{"subType":"JOIN_LINK_GENERATION","data":{}}`))
	require.NoError(t, f.ps.Publish(f.queue, msg))
	testbrokers.Eventually(t, 2*f.b.Redelivery, "handled", func() bool { return len(f.handled.of(msg.UUID)) == 1 })
	time.Sleep(500 * time.Millisecond)
	errs := f.handled.of(msg.UUID)
	require.Len(t, errs, 1, "dropped, not retried")
	assert.ErrorIs(t, errs[0], joinlink.ErrInvalidMessage)
	assert.Equal(t, failure.Permanent, failure.Of(errs[0]))
}
