package joinlink_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/robfig/cron/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/handlers/joinlink"
)

func TestServices(t *testing.T) {
	t.Parallel()
	for name, newStore := range newStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			t.Run("concurrent triggers, one generation", func(t *testing.T) { testConcurrentGenerate(t, newStore(t)) })
			t.Run("fallback sweep", func(t *testing.T) { testSweep(t, newStore(t)) })
			t.Run("set link generation", func(t *testing.T) { testSetLinkGeneration(t, newStore(t)) })
		})
	}
}

func testConcurrentGenerate(t *testing.T, s joinlink.Store) {
	ctx := context.Background()
	gen := joinlink.NewMemoryGenerator()
	gen.Block = make(chan struct{})
	svc := &joinlink.Service{Store: s, Generator: gen}
	id, err := s.CreateSession(ctx, time.Now())
	require.NoError(t, err)
	at := time.Now().Add(time.Minute)
	_, err = svc.SetLinkGeneration(ctx, id, &at, 0)
	require.NoError(t, err)
	var mu sync.Mutex
	outcomes := map[joinlink.Outcome]int{}
	var wg sync.WaitGroup
	for range 6 { // the event, its duplicate and the cron at once
		wg.Go(func() {
			out, err := svc.GenerateForSession(ctx, joinlink.Data{ProgramSessionID: id})
			assert.NoError(t, err)
			mu.Lock()
			outcomes[out]++
			mu.Unlock()
		})
	}
	testbrokers.Eventually(t, 5*time.Second, "losers return", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return outcomes[joinlink.Skipped] == 5
	})
	close(gen.Block)
	wg.Wait()
	assert.Equal(t, map[joinlink.Outcome]int{joinlink.Generated: 1, joinlink.Skipped: 5}, outcomes)
	assert.Equal(t, 1, gen.Calls(id))

	_, err = svc.GenerateForSession(ctx, joinlink.Data{ProgramSessionID: id + 1000})
	require.ErrorIs(t, err, joinlink.ErrNotFound)
}

func testSweep(t *testing.T, s joinlink.Store) {
	ctx := context.Background()
	c := &clock{}
	gen := joinlink.NewMemoryGenerator()
	svc := &joinlink.Service{Store: s, Generator: gen, Now: c.now}
	mk := func(at time.Time) int64 {
		id, err := s.CreateSession(ctx, c.now())
		require.NoError(t, err)
		_, err = s.SetLinkGeneration(ctx, id, &at, 0, c.now(), c.now().Add(-joinlink.StaleAfter))
		require.NoError(t, err)
		return id
	}
	base := c.now()
	var overdue []int64
	for i := range 53 {
		overdue = append(overdue, mk(base.Add(-time.Hour-time.Duration(i)*time.Second)))
	}
	inGrace := mk(base.Add(-10 * time.Minute))
	failing := overdue[len(overdue)-1] // the oldest: in the first tick
	gen.FailNext(failing, errors.New("zoom 503"))

	r, err := svc.Sweep(ctx)
	require.NoError(t, err)
	assert.Equal(t, joinlink.SweepResult{Found: 50, Generated: 49, Failed: 1}, r, "≤ 50 per tick")
	r, err = svc.Sweep(ctx)
	require.NoError(t, err)
	assert.Equal(t, joinlink.SweepResult{Found: 4, Generated: 4}, r, "the rest, then the FAILED one again")
	assert.Zero(t, gen.Calls(inGrace), "inside the grace window")
	c.advance(joinlink.Grace)
	r, err = svc.Sweep(ctx)
	require.NoError(t, err)
	assert.Equal(t, joinlink.SweepResult{Found: 1, Generated: 1}, r)
	for _, id := range append(overdue, inGrace) {
		sess, err := s.Session(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, joinlink.Completed, sess.Status)
	}
	assert.Equal(t, 2, gen.Calls(failing))
	r, err = svc.Sweep(ctx)
	require.NoError(t, err)
	assert.Equal(t, joinlink.SweepResult{}, r, "COMPLETED never swept again")

}

// The sweep runs at start and then on its schedule, one replica at a time:
// a replica that finds the advisory lock held skips (counted), the next
// sweep of a replica that gets it generates, stamped by the system actor.
// The FAILED gauge counts the sessions left FAILED. On PostgreSQL, two
// services on one schema.
func TestFallbackOneSweeperAtStartAndOnSchedule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := dbtest.Schema(t)
	newService := func(reg prometheus.Registerer, gen *joinlink.MemoryGenerator) (*joinlink.Service, *joinlink.Postgres) {
		s, err := joinlink.NewPostgres(pool, schema)
		require.NoError(t, err)
		m, err := joinlink.NewMetrics(reg, s)
		require.NoError(t, err)
		return &joinlink.Service{Store: s, Generator: gen, SweepLock: s.SweepLock(), SystemActorID: 99, Metrics: m}, s
	}
	regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
	gen := joinlink.NewMemoryGenerator()
	a, store := newService(regA, gen)
	b, _ := newService(regB, gen)
	overdue := func() int64 {
		id, err := store.CreateSession(ctx, time.Now())
		require.NoError(t, err)
		at := time.Now().Add(-time.Hour)
		_, err = store.SetLinkGeneration(ctx, id, &at, 7, time.Now(), time.Now().Add(-joinlink.StaleAfter))
		require.NoError(t, err)
		return id
	}
	first, failing := overdue(), overdue()
	gen.FailNext(failing, errors.New("zoom 503"))

	release, ok, err := store.SweepLock().TryLock(ctx, time.Time{}) // another replica is sweeping
	require.NoError(t, err)
	require.True(t, ok)
	rarely, err := cron.ParseStandard("@yearly") // never within the test
	require.NoError(t, err)
	runA, stopA := context.WithCancel(ctx)
	doneA := make(chan error, 1)
	go func() { doneA <- a.RunFallback(runA, rarely) }()
	testbrokers.Eventually(t, 10*time.Second, "A's start sweep skipped", func() bool {
		return counterValue(t, regA, "eventpipe_joinlink_sweeps_total", "skipped") == 1
	})
	assert.Zero(t, gen.Calls(first), "nothing generated while the lock is held")
	release()

	often, err := cron.ParseStandard("@every 200ms")
	require.NoError(t, err)
	runB, stopB := context.WithCancel(ctx)
	doneB := make(chan error, 1)
	go func() { doneB <- b.RunFallback(runB, often) }()
	testbrokers.Eventually(t, 10*time.Second, "B sweeps at start", func() bool { return gen.Calls(first) == 1 })
	sess, err := store.Session(ctx, first)
	require.NoError(t, err)
	assert.Equal(t, joinlink.Completed, sess.Status)
	assert.Equal(t, int64(99), sess.UpdatedBy, "the sweep's writes are stamped by the system actor")
	testbrokers.Eventually(t, 10*time.Second, "the FAILED one again on B's next sweep", func() bool { return gen.Calls(failing) == 2 })
	later := overdue()
	testbrokers.Eventually(t, 10*time.Second, "a session due later, on a later sweep", func() bool { return gen.Calls(later) == 1 })
	stopA()
	stopB()
	require.NoError(t, <-doneA)
	require.NoError(t, <-doneB)
	assert.Equal(t, 1, gen.Calls(first), "one generation across both replicas")
	assert.Equal(t, float64(1), counterValue(t, regA, "eventpipe_joinlink_sweeps_total", "skipped"), "A's scheduled sweep never came")
	assert.GreaterOrEqual(t, counterValue(t, regB, "eventpipe_joinlink_sweeps_total", "swept"), float64(3))
	assert.Equal(t, float64(1), counterValue(t, regB, "eventpipe_joinlink_generations_total", "failed"))
}

// sweepLines collects the sweep's log lines (JSON) of several replicas.
type sweepLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *sweepLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// byTick maps each scheduled tick to the replicas that logged it, with
// their outcome ("done" or "skipped").
func (l *sweepLines) byTick(t *testing.T) map[string]map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ticks := map[string]map[string]string{}
	for _, line := range bytes.Split(l.buf.Bytes(), []byte("\n")) {
		var rec struct{ Msg, Trigger, Tick, Replica string }
		if json.Unmarshal(line, &rec) != nil || rec.Trigger != "schedule" {
			continue
		}
		outcome := ""
		switch {
		case strings.HasPrefix(rec.Msg, "join-link fallback sweep done"):
			outcome = "done"
		case strings.HasPrefix(rec.Msg, "join-link fallback sweep skipped"):
			outcome = "skipped"
		default:
			continue
		}
		if ticks[rec.Tick] == nil {
			ticks[rec.Tick] = map[string]string{}
		}
		assert.Empty(t, ticks[rec.Tick][rec.Replica], "replica %s logged tick %s once", rec.Replica, rec.Tick)
		ticks[rec.Tick][rec.Replica] = outcome
	}
	return ticks
}

// Two replicas on one schema, started a second apart on "@every 2s", the
// second one's clock 300 ms behind: they share every tick, and one of them
// sweeps it. (Seen before: an @every schedule counted from each replica's
// start gave the two replicas ticks of their own, a second apart, and each
// swept every one of its own; and a replica whose timer fired after the
// other's sweep of the same tick had ended found the lock free and swept
// that tick again.)
func TestFallbackOneSweepPerTickAcrossReplicas(t *testing.T) {
	t.Parallel()
	pool, schema := dbtest.Schema(t)
	lines := &sweepLines{}
	logger := slog.New(slog.NewJSONHandler(lines, nil))
	every2s, err := cron.ParseStandard("@every 2s")
	require.NoError(t, err)
	run := func(name string, skew time.Duration) (stop func()) {
		s, err := joinlink.NewPostgres(pool, schema)
		require.NoError(t, err)
		svc := &joinlink.Service{Store: s, Generator: joinlink.NewMemoryGenerator(), SweepLock: s.SweepLock(),
			Logger: logger.With(slog.String("replica", name)), Now: func() time.Time { return time.Now().Add(skew) }}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- svc.RunFallback(ctx, every2s) }()
		return func() { cancel(); require.NoError(t, <-done) }
	}
	// A starts half-way through a second, B a second later with its clock
	// at .2 s: counted from their starts, their 2 s ticks would never meet.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(1500 * time.Millisecond)))
	stopA := run("a", 0)
	time.Sleep(time.Second)
	stopB := run("b", -300*time.Millisecond)
	shared := func() (n int) {
		for _, replicas := range lines.byTick(t) {
			if len(replicas) == 2 {
				n++
			}
		}
		return n
	}
	testbrokers.Eventually(t, 15*time.Second, "three ticks seen by both replicas", func() bool { return shared() >= 3 })
	stopA()
	stopB()
	ticks := lines.byTick(t)
	for tick, replicas := range ticks {
		done := 0
		for _, outcome := range replicas {
			if outcome == "done" {
				done++
			}
		}
		assert.Equal(t, 1, done, "tick %s: one sweep, by one replica: %v", tick, replicas)
	}
}

// The Postgres sweep lock gives each tick once, in order, and a sweep of no
// tick (at start) whenever the lock is free.
func TestSweepLockTakesEachTickOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := dbtest.Schema(t)
	s, err := joinlink.NewPostgres(pool, schema)
	require.NoError(t, err)
	lock := s.SweepLock()
	take := func(tick time.Time) bool {
		release, ok, err := lock.TryLock(ctx, tick)
		require.NoError(t, err)
		if ok {
			release()
		}
		return ok
	}
	tick := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	assert.True(t, take(tick), "a new tick")
	assert.False(t, take(tick), "taken already")
	assert.False(t, take(tick.Add(-4*time.Hour)), "an older tick")
	assert.True(t, take(time.Time{}), "a sweep at start")
	assert.True(t, take(time.Time{}), "another start")
	assert.True(t, take(tick.Add(4*time.Hour)), "the next tick")

	release, ok, err := lock.TryLock(ctx, time.Time{})
	require.NoError(t, err)
	require.True(t, ok)
	assert.False(t, take(tick.Add(8*time.Hour)), "the lock is held")
	release()
	assert.True(t, take(tick.Add(8*time.Hour)), "not taken while the lock was held")
}

func TestFailedSessionsGauge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, newStore := range newStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			reg := prometheus.NewRegistry()
			m, err := joinlink.NewMetrics(reg, s)
			require.NoError(t, err)
			gen := joinlink.NewMemoryGenerator()
			svc := &joinlink.Service{Store: s, Generator: gen, Metrics: m}
			id, err := s.CreateSession(ctx, time.Now())
			require.NoError(t, err)
			at := time.Now().Add(time.Minute)
			_, err = svc.SetLinkGeneration(ctx, id, &at, 7)
			require.NoError(t, err)
			n, err := testutil.GatherAndCount(reg, "eventpipe_joinlink_failed_sessions")
			require.NoError(t, err)
			require.Equal(t, 1, n)
			assert.Zero(t, gaugeValue(t, reg, "eventpipe_joinlink_failed_sessions"))
			gen.FailNext(id, errors.New("zoom 503"))
			_, err = svc.GenerateForSession(ctx, joinlink.Data{ProgramSessionID: id})
			require.Error(t, err)
			assert.Equal(t, float64(1), gaugeValue(t, reg, "eventpipe_joinlink_failed_sessions"))
		})
	}
}

// counterValue is the value of family name's series with label outcome.
func counterValue(t *testing.T, reg *prometheus.Registry, name, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no series %s{outcome=%q}", name, outcome)
	return 0
}

// gaugeValue is the value of the one-series gauge family name.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// failingSchedules fails every call: scheduling is best effort.
type failingSchedules struct{}

func (failingSchedules) Upsert(context.Context, joinlink.Schedule) error {
	return errors.New("aws down")
}
func (failingSchedules) Delete(context.Context, string) error { return errors.New("aws down") }

func testSetLinkGeneration(t *testing.T, s joinlink.Store) {
	ctx := context.Background()
	schedules := joinlink.NewMemorySchedules()
	sch := &joinlink.Scheduler{Enabled: true, Schedules: schedules}
	svc := &joinlink.Service{Store: s, Generator: joinlink.NewMemoryGenerator(), Scheduler: sch}
	id, err := s.CreateSession(ctx, time.Now())
	require.NoError(t, err)
	name := joinlink.ScheduleName(id)

	past := time.Now().Add(-time.Minute)
	_, err = svc.SetLinkGeneration(ctx, id, &past, 1)
	require.ErrorIs(t, err, joinlink.ErrInvalidTime)
	at := time.Now().Add(time.Hour).UTC()
	for range 2 { // idempotent re-submission
		sess, err := svc.SetLinkGeneration(ctx, id, &at, 1)
		require.NoError(t, err)
		assert.Equal(t, joinlink.Scheduled, sess.Status)
	}
	got, ok := schedules.Get(name)
	require.True(t, ok)
	assert.Equal(t, at, got.FireAt)
	m, err := joinlink.Decode(got.Body)
	require.NoError(t, err)
	require.NoError(t, joinlink.Validate(got.Body))
	assert.Equal(t, joinlink.Data{ProgramSessionID: id, ActorUserID: 1}, m.Data)
	assert.Equal(t, name, m.CorrelationID)

	_, err = svc.SetLinkGeneration(ctx, id, nil, 1)
	require.NoError(t, err)
	_, ok = schedules.Get(name)
	assert.False(t, ok, "cleared → schedule deleted")
	_, err = svc.SetLinkGeneration(ctx, id+1000, &at, 1)
	require.ErrorIs(t, err, joinlink.ErrNotFound)

	sch.Schedules = failingSchedules{}
	sess, err := svc.SetLinkGeneration(ctx, id, &at, 1)
	require.NoError(t, err, "a scheduler error never fails the write (dec-01)")
	assert.Equal(t, joinlink.Scheduled, sess.Status)
	sch.Schedules, sch.Enabled = schedules, false
	_, err = svc.SetLinkGeneration(ctx, id, &at, 1)
	require.NoError(t, err)
	_, ok = schedules.Get(name)
	assert.False(t, ok, "flag off: nothing scheduled")
}

func TestPostgresSchedules(t *testing.T) {
	t.Parallel()
	pool, schema := dbtest.Schema(t)
	ps, err := joinlink.NewPostgresSchedules(pool, schema)
	require.NoError(t, err)
	for name, s := range map[string]joinlink.DueSchedules{"memory": joinlink.NewMemorySchedules(), "postgres": ps} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
			for i, at := range []time.Time{now.Add(-time.Minute), now.Add(-2 * time.Minute), now.Add(time.Minute)} {
				id := int64(i + 1)
				require.NoError(t, s.Upsert(ctx, joinlink.Schedule{Name: joinlink.ScheduleName(id), ProgramSessionID: id, FireAt: now.Add(time.Hour), Body: []byte("old")}))
				require.NoError(t, s.Upsert(ctx, joinlink.Schedule{Name: joinlink.ScheduleName(id), ProgramSessionID: id, FireAt: at, Body: []byte{byte('a' + i)}}))
			}
			require.NoError(t, s.Delete(ctx, "join-link-404"), "deleting a missing schedule is fine")
			var got []string
			refuse := true
			n, err := s.PublishDue(ctx, now, 10, func(sc joinlink.Schedule) error {
				if refuse && sc.Name == "join-link-1" {
					refuse = false
					return errors.New("broker down")
				}
				got = append(got, sc.Name+"="+string(sc.Body))
				return nil
			})
			require.Error(t, err)
			assert.Equal(t, 1, n)
			assert.Equal(t, []string{"join-link-2=b"}, got, "due only, upserted body")
			n, err = s.PublishDue(ctx, now, 10, func(sc joinlink.Schedule) error {
				got = append(got, sc.Name+"="+string(sc.Body))
				return nil
			})
			require.NoError(t, err)
			assert.Equal(t, 1, n, "the refused one stayed")
			n, err = s.PublishDue(ctx, now.Add(time.Hour), 10, func(joinlink.Schedule) error { return nil })
			require.NoError(t, err)
			assert.Equal(t, 1, n)
			n, err = s.PublishDue(ctx, now.Add(2*time.Hour), 10, func(joinlink.Schedule) error { return nil })
			require.NoError(t, err)
			assert.Zero(t, n, "each schedule fires once")
		})
	}
}
