package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
)

// mode sizes a run: repetitions per side and a scale on message counts.
type mode struct {
	name  string
	reps  int
	scale float64
}

var (
	fullMode  = mode{name: "full", reps: 5, scale: 1}
	quickMode = mode{name: "quick", reps: 3, scale: 0.2}
	// smokeMode runs each scenario once on a handful of messages: it checks
	// that the benchmarks still work, it measures nothing.
	smokeMode = mode{name: "smoke", reps: 1, scale: 0.005}
)

// n scales a full-run message count, keeping at least 20 messages.
func (m mode) n(full int) int { return max(int(float64(full)*m.scale), 20) }

// runTimeout bounds one repetition.
const runTimeout = 3 * time.Minute

// side is one contestant of a pair; run is one repetition, which purges and
// prepares what it needs before it starts its clock.
type side struct {
	name string
	run  func(tb testing.TB) Sample
}

type pairKind int

const (
	throughput pairKind = iota
	latency
	// startup: Elapsed is the time until the process answered.
	startup
)

// check is a target of the issue against one baseline.
type check struct {
	target string
	pass   func(ours, base summary) bool
}

// pair is one line (or a few) of the table: sides[0] is eventpipe, the others
// are what it is compared with, each with its own check (nil: none).
type pair struct {
	id, scenario, settings string
	kind                   pairKind
	sides                  []side
	checks                 []*check
	// callsID, when set, adds a row of SQS API calls per message with this id.
	callsID    string
	callsCheck *check
	// idleScenario, when set, adds a row of that scenario: what the
	// subscriptions cost when idle (Sample.Queues, Goroutines, HeapBytes).
	idleScenario string
	// measure, when set, replaces the alternating repetitions of sides: a
	// figure observed on both sides at once, or sides taken in turns within
	// each repetition (sides then only name them, or are empty).
	measure func(tb testing.TB) []Row
}

// summary is the medians of one side's repetitions.
type summary struct {
	rate, p50, p99, calls float64
	// elapsed is the median Elapsed, in seconds.
	elapsed float64
	// queues, goroutines and heap: the idle cost of the subscriptions.
	queues           int
	goroutines, heap float64
	reps             int
}

func summarize(samples []Sample) summary {
	var rates, p50s, p99s, calls, elapsed, gs, heaps []float64
	sum := summary{reps: len(samples)}
	for _, s := range samples {
		rates = append(rates, s.Rate())
		calls = append(calls, s.CallsPerMessage())
		elapsed = append(elapsed, s.Elapsed.Seconds())
		if len(s.Latencies) > 0 {
			p50s = append(p50s, float64(Percentile(s.Latencies, 50)))
			p99s = append(p99s, float64(Percentile(s.Latencies, 99)))
		}
		if s.Queues > 0 {
			sum.queues = s.Queues
			gs = append(gs, float64(s.Goroutines))
			heaps = append(heaps, float64(s.HeapBytes))
		}
	}
	sum.rate, sum.p50, sum.p99, sum.calls, sum.elapsed = Median(rates), Median(p50s), Median(p99s), Median(calls), Median(elapsed)
	sum.goroutines, sum.heap = Median(gs), Median(heaps)
	return sum
}

// runPair runs reps repetitions of every side, alternating: the sides in
// order on even repetitions, reversed on odd ones, so that neither always
// follows the other.
func runPair(tb testing.TB, p pair, reps int) []summary {
	tb.Helper()
	samples := make([][]Sample, len(p.sides))
	for r := range reps {
		for k := range p.sides {
			i := k
			if r%2 == 1 {
				i = len(p.sides) - 1 - k
			}
			s := p.sides[i].run(tb)
			if s.Messages == 0 || s.Elapsed <= 0 {
				tb.Fatalf("%s %s, %s: empty sample %+v", p.id, p.scenario, p.sides[i].name, s)
			}
			samples[i] = append(samples[i], s)
		}
	}
	sums := make([]summary, len(p.sides))
	for i := range p.sides {
		sums[i] = summarize(samples[i])
	}
	return sums
}

// rows turns a pair's summaries into table rows.
func (p pair) rows(sums []summary) []Row {
	ours := sums[0]
	var rows []Row
	for i := 1; i < len(p.sides); i++ {
		base := sums[i]
		r := Row{ID: p.id, Scenario: p.scenario, Settings: p.settings}
		switch p.kind {
		case throughput:
			r.Ours = FormatRate(ours.rate)
			r.Baseline = FormatRate(base.rate) + " (" + p.sides[i].name + ")"
			r.Ratio = ratio(ours.rate, base.rate)
		case latency:
			d := func(x float64) string { return FormatLatency(time.Duration(x)) }
			r.Ours = "p50 " + d(ours.p50) + ", p99 " + d(ours.p99)
			r.Baseline = "p50 " + d(base.p50) + ", p99 " + d(base.p99) + " (" + p.sides[i].name + ")"
			r.Ratio = "p50 " + ratio(ours.p50, base.p50) + ", p99 " + ratio(ours.p99, base.p99)
		case startup:
			d := func(x float64) string { return FormatLatency(time.Duration(x * float64(time.Second))) }
			r.Ours = d(ours.elapsed)
			r.Baseline = d(base.elapsed) + " (" + p.sides[i].name + ")"
			r.Ratio = ratio(ours.elapsed, base.elapsed)
		}
		var c *check
		if i-1 < len(p.checks) {
			c = p.checks[i-1]
		}
		r.Target, r.Verdict = verdict(c, ours, base)
		rows = append(rows, r)
		if p.callsID != "" {
			cr := Row{ID: p.callsID, Scenario: strings.Replace(p.scenario, "end to end", "API calls per message", 1), Settings: p.settings,
				Ours:     fmt.Sprintf("%.3f calls/msg", ours.calls),
				Baseline: fmt.Sprintf("%.3f calls/msg (%s)", base.calls, p.sides[i].name),
				Ratio:    ratio(ours.calls, base.calls),
			}
			cr.Target, cr.Verdict = verdict(p.callsCheck, ours, base)
			rows = append(rows, cr)
		}
		if p.idleScenario != "" {
			rows = append(rows, Row{ID: p.id, Scenario: p.idleScenario, Settings: p.settings,
				Ours:     idleCost(ours),
				Baseline: idleCost(base) + " (" + p.sides[i].name + ")",
				Ratio:    "goroutines " + ratio(ours.goroutines, base.goroutines) + ", heap " + ratio(ours.heap, base.heap),
			})
		}
	}
	return rows
}

// idleCost prints the goroutines and heap a side's subscriptions kept once
// idle, in all and per queue.
func idleCost(s summary) string {
	q := float64(max(s.queues, 1))
	plus := func(x float64) string {
		if x >= 0 {
			return "+"
		}
		return ""
	}
	return fmt.Sprintf("%+.0f goroutines (%.1f/queue), %s%s heap (%s/queue)", s.goroutines, s.goroutines/q, plus(s.heap), FormatBytes(s.heap), FormatBytes(s.heap/q))
}

func verdict(c *check, ours, base summary) (target, v string) {
	if c == nil {
		return "", ""
	}
	if c.pass(ours, base) {
		return c.target, "met"
	}
	return c.target, "MISSED"
}

func ratio(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.3f×", a/b)
}

func atLeast(x float64) *check {
	return &check{target: fmt.Sprintf("≥ %.2g× baseline", x), pass: func(o, b summary) bool { return o.rate >= x*b.rate }}
}

// capacity collects the baseline's end-to-end rates; the latency pair runs
// at half their median.
type capacity struct {
	mu    sync.Mutex
	rates []float64
	// fallback is used before any rate was measured (a lone benchmark).
	fallback float64
}

func (c *capacity) add(r float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rates = append(c.rates, r)
}

func (c *capacity) half() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.rates) == 0 {
		return c.fallback / 2
	}
	return Median(c.rates) / 2
}

// publishN publishes n bodies of size bytes from workers goroutines, batch
// per call. With rate > 0 the k-th message is due at start + k/rate (open
// loop: a slow call does not push the schedule back).
func publishN(ctx context.Context, p pipe, topic string, n, workers, batch, size int, rate float64) error {
	var next atomic.Int64
	start := time.Now()
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for {
				k := int(next.Add(int64(batch))) - batch
				if k >= n || ctx.Err() != nil {
					return
				}
				if rate > 0 {
					due := start.Add(time.Duration(float64(k) / rate * float64(time.Second)))
					if d := time.Until(due); d > 0 {
						time.Sleep(d)
					}
				}
				bodies := make([][]byte, min(batch, n-k))
				for i := range bodies {
					bodies[i] = stampedBody(size)
				}
				if err := p.publish(ctx, topic, bodies); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// env is one broker with eventpipe's client and the baseline's.
type env struct {
	kind     string
	ours     pipe
	base     pipe
	baseName string
	// ensure declares topic's queue or table; purge empties it.
	ensure func(tb testing.TB, topic string)
	purge  func(tb testing.TB, topic string)
	// calls counts API requests per side (SQS), else nil.
	oursCalls, baseCalls func() int64
	// keeps says the broker holds messages for absent consumers.
	keeps bool
	// freshTopics: a repetition over many queues needs queues of its own.
	// On the SQS emulator a long poll that a stopped consumer abandoned
	// still takes the next message sent to its queue, which then stays
	// invisible for the queue's visibility timeout (30 s): with 15 or 100
	// queues, some repetition always stalled for it.
	freshTopics bool
}

func (e *env) topic(tb testing.TB) string {
	tb.Helper()
	t := "bench_" + strings.ToLower(watermill.NewShortUUID())
	e.ensure(tb, t)
	return t
}

func (e *env) calls(i int) func() int64 {
	if i == 0 {
		return e.oursCalls
	}
	return e.baseCalls
}

func (e *env) sidePipe(i int) pipe {
	if i == 0 {
		return e.ours
	}
	return e.base
}

func (e *env) sideName(i int) string {
	if i == 0 {
		return "eventpipe"
	}
	return e.baseName
}

func timed(tb testing.TB, calls func() int64, f func() Sample) Sample {
	tb.Helper()
	var before int64
	if calls != nil {
		before = calls()
	}
	s := f()
	if calls != nil {
		s.Calls = calls() - before
	}
	return s
}

// publishPair: n messages, workers × batch.
// A further baseline (another client of the same broker) may follow, with no
// target.
func (e *env) publishPair(tb testing.TB, id string, n, workers, batch, size int, settings string, c *check, extra ...namedPipe) pair {
	topic := e.topic(tb)
	p := pair{id: id, scenario: e.kind + " publish", kind: throughput, checks: []*check{c},
		settings: fmt.Sprintf("body=%s workers=%d batch=%d %s n=%d", sizeName(size), workers, batch, settings, n)}
	contestants := []namedPipe{{e.sideName(0), e.ours, e.oursCalls}, {e.sideName(1), e.base, e.baseCalls}}
	for _, c := range append(contestants, extra...) {
		pp, calls, name := c.pipe, c.calls, c.name
		p.sides = append(p.sides, side{name: name, run: func(tb testing.TB) Sample {
			e.purge(tb, topic)
			return timed(tb, calls, func() Sample {
				ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
				defer cancel()
				start := time.Now()
				if err := publishN(ctx, pp, topic, n, workers, batch, size, 0); err != nil {
					tb.Fatalf("%s publish: %v", name, err)
				}
				return Sample{Messages: n, Elapsed: time.Since(start)}
			})
		}})
	}
	return p
}

// consumePair: n messages already queued (published by the side's own
// client, untimed), consumed from the first delivery to the last.
func (e *env) consumePair(tb testing.TB, id string, n, size int, settings string, c *check) pair {
	topic := e.topic(tb)
	p := pair{id: id, scenario: e.kind + " consume", kind: throughput, checks: []*check{c},
		settings: fmt.Sprintf("body=%s %s n=%d, timed first to last delivery", sizeName(size), settings, n)}
	for i := range 2 {
		pp := e.sidePipe(i)
		p.sides = append(p.sides, side{name: e.sideName(i), run: func(tb testing.TB) Sample {
			e.purge(tb, topic)
			ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
			defer cancel()
			if err := publishN(ctx, pp, topic, n, 4, 100, size, 0); err != nil {
				tb.Fatalf("%s prefill: %v", e.sideName(i), err)
			}
			var first atomic.Int64
			cnt := newCounter(n)
			stop := pp.consume(tb, topic, func(b []byte) {
				first.CompareAndSwap(0, time.Now().UnixNano())
				cnt.handle(b)
			})
			cnt.wait(tb, e.kind+" consume "+e.sideName(i), runTimeout)
			end := time.Now()
			stop()
			return Sample{Messages: n - 1, Elapsed: end.Sub(time.Unix(0, first.Load()))}
		}})
	}
	return p
}

// e2ePair: a consumer runs, then n messages are published (workers × batch,
// paced at rate() msg/s when rate is set) and the clock stops at the n-th
// handled. It records publish-to-handler latencies. With capture, the
// baseline's rates are added to it.
func (e *env) e2ePair(tb testing.TB, id string, kind pairKind, n, workers, batch, size int, settings string, rate *capacity, capture *capacity, checks ...*check) pair {
	topic := e.topic(tb)
	scenario := e.kind + " end to end"
	if kind == latency {
		scenario += " latency at ½ baseline capacity"
	}
	p := pair{id: id, scenario: scenario, kind: kind, checks: checks,
		settings: fmt.Sprintf("body=%s publishers=%d batch=%d %s n=%d", sizeName(size), workers, batch, settings, n)}
	for i := range 2 {
		pp, calls := e.sidePipe(i), e.calls(i)
		p.sides = append(p.sides, side{name: e.sideName(i), run: func(tb testing.TB) Sample {
			e.purge(tb, topic)
			r, count := 0.0, n
			if rate != nil {
				r = rate.half()
				// A latency run lasts about 3 s, at most n messages.
				count = min(n, max(int(r*3), 20))
			}
			s := timed(tb, calls, func() Sample {
				ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
				defer cancel()
				cnt := newCounter(count)
				stop := pp.consume(tb, topic, cnt.handle)
				start := time.Now()
				if err := publishN(ctx, pp, topic, count, workers, batch, size, r); err != nil {
					stop()
					tb.Fatalf("%s publish: %v", e.sideName(i), err)
				}
				cnt.wait(tb, scenario+" "+e.sideName(i), runTimeout)
				el := time.Since(start)
				stop()
				return Sample{Messages: count, Elapsed: el, Latencies: cnt.lat}
			})
			if capture != nil && i == 1 {
				capture.add(s.Rate())
			}
			return s
		}})
	}
	if rate != nil {
		p.settings = fmt.Sprintf("body=%s publishers=%d batch=%d %s, paced at ½ of the baseline's median end-to-end rate, ≤3 s", sizeName(size), workers, batch, settings)
	}
	return p
}

// namedPipe is a contestant of a publish pair.
type namedPipe struct {
	name  string
	pipe  pipe
	calls func() int64
}

func sizeName(size int) string {
	if size >= 1024 && size%1024 == 0 {
		return fmt.Sprintf("%dKiB", size/1024)
	}
	return fmt.Sprintf("%dB", size)
}
