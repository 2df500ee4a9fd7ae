package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// mode sizes a harness run. Every loop of the harness is bounded by these
// counts and times.
type mode struct {
	name string
	// disputes is how many business changes the disputes producer commits
	// (half disputes raised, half transactions flagged).
	disputes int
	// sessions × perSession booking-session events are published.
	sessions, perSession int
	// traffic is how long the producers spread their messages over, and
	// how long faults are injected.
	traffic time.Duration
	// faultGap bounds the random pause before each fault.
	faultGap [2]time.Duration
	// maxFaults bounds the faults of one flow run.
	maxFaults int
	// settle bounds the wait, after the traffic, for every effect (longer
	// than the slowest redelivery: SQS's 60 s visibility on domain-events).
	settle time.Duration
	// linger is the extra wait after everything settled, for late
	// duplicates.
	linger time.Duration
	// disputePoison and bookingPoison are messages sent to be
	// dead-lettered (the expected dead letters). A disputes poison takes 5
	// attempts with 10 s → 60 s backoff (over two minutes), too slow for
	// the quick pass.
	disputePoison, bookingPoison int
	// producers is how many goroutines publish (or commit) concurrently.
	producers int
	// burst groups the traffic: the messages due within one burst leave
	// together at its start, as fast as the producers go, so that a fault
	// often finds a backlog (messages queued, prefetched, in flight)
	// rather than an idle consumer.
	burst time.Duration
}

// due is when the idx-th message of a producer's schedule leaves: evenly
// spread, grouped in bursts.
func (m mode) due(start time.Time, idx int, interval time.Duration) time.Time {
	return start.Add((time.Duration(idx) * interval).Truncate(m.burst))
}

// fullEvents is the full mode's size: at least this many messages per
// broker per flow.
const fullEvents = 100_000

var (
	fullMode = mode{
		name: "full", disputes: fullEvents, sessions: 1000, perSession: fullEvents / 1000,
		traffic: 12 * time.Minute, faultGap: [2]time.Duration{5 * time.Second, 15 * time.Second}, maxFaults: 200,
		settle: 6 * time.Minute, linger: 30 * time.Second, disputePoison: 5, bookingPoison: 3, producers: 4, burst: 5 * time.Second,
	}
	quickMode = mode{
		name: "quick", disputes: 2000, sessions: 30, perSession: 60,
		traffic: 45 * time.Second, faultGap: [2]time.Duration{1500 * time.Millisecond, 4 * time.Second}, maxFaults: 16,
		settle: 100 * time.Second, linger: 5 * time.Second, disputePoison: 0, bookingPoison: 1, producers: 4, burst: 3 * time.Second,
	}
)

// termWait bounds the wait for a process to exit after SIGTERM: serve's
// default shutdown_timeout (30 s, which the processes keep) and a margin.
// A process still running then is a finding, and is killed.
const termWait = 45 * time.Second

// readyTimeout bounds a start: the process up and /readyz 200.
const readyTimeout = 90 * time.Second

// TestChaos is `make chaos`: for each broker, the disputes outbox flow and
// the booking FIFO flow run side by side against separately started
// `eventpipe serve` processes while faults are injected, then every message
// is counted from the outside. It fails when an effect is lost or
// duplicated or a session's events are applied out of order. It runs only
// with EVENTPIPE_CHAOS=1 (CHAOS_QUICK=1: the quick pass).
func TestChaos(t *testing.T) {
	if os.Getenv("EVENTPIPE_CHAOS") == "" {
		t.Skip("the chaos harness runs with EVENTPIPE_CHAOS=1: `make chaos` (CHAOS_QUICK=1 for the quick pass)")
	}
	m := fullMode
	if os.Getenv("CHAOS_QUICK") != "" {
		m = quickMode
	}
	brokers := list("CHAOS_BROKERS", "rabbitmq,sqs,postgres")
	flows := list("CHAOS_FLOWS", "disputes,booking")
	restarts := os.Getenv("CHAOS_BROKER_RESTART") == "1"
	keep := os.Getenv("CHAOS_KEEP") == "1"
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED: %v", err)
		}
		seed = v
	}
	out := os.Getenv("CHAOS_OUT")
	if out == "" {
		var err error
		if out, err = os.MkdirTemp("", "eventpipe-chaos-"); err != nil {
			t.Fatal(err)
		}
	} else if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if restarts {
		t.Cleanup(func() { ensureServices(t) })
	}

	start := time.Now()
	commit := gitCommit(t)
	t.Logf("chaos %s mode, seed %d, logs and report in %s", m.name, seed, out)
	bin := buildEventpipe(t, out)
	var sqsEndpoint string
	if slices.Contains(brokers, "sqs") {
		sqsEndpoint = sqsEmulator(t)
	}

	var report strings.Builder
	fmt.Fprintf(&report, "eventpipe chaos harness, %s mode, %s, commit %s, seed %d, GOMAXPROCS default on %d CPUs\n",
		m.name, time.Now().UTC().Format(time.RFC3339), commit, seed, numCPU())
	fmt.Fprintf(&report, "broker restarts: %v (CHAOS_BROKER_RESTART=1 to inject them)\n\n", restarts)
	var failed []string
	for i, kind := range brokers {
		t.Run(kind, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			rows, notes := runBroker(t, kind, flows, m, bin, filepath.Join(out, kind), sqsEndpoint, restarts, keep, rng)
			var b strings.Builder
			title := fmt.Sprintf("%s (%s)", kind, brokerVariant(kind))
			if err := Render(&b, title, rows); err != nil {
				t.Fatal(err)
			}
			if kind == "rabbitmq" {
				notes = append(notes, "quorum-queue variant not run: no topology declares type: quorum and serve has no switch to declare one "+
					"(config/topology/*.yaml are embedded; a quorum queue declared beforehand makes eventpipe's declare fail with "+
					"PRECONDITION_FAILED inequivalent arg 'x-queue-type' on RabbitMQ 3.10)")
			}
			for _, n := range notes {
				fmt.Fprintf(&b, "  - %s\n", n)
			}
			b.WriteString("\n")
			fmt.Print(b.String())
			report.WriteString(b.String())
			for _, r := range rows {
				if r.Failed() {
					failed = append(failed, fmt.Sprintf("%s %s: lost %d, duplicated %d, out of order %d", kind, r.Flow, r.Lost, r.Duplicated, r.OutOfOrder))
				}
			}
		})
	}
	fmt.Fprintf(&report, "took %s; logs of every process in %s\n", time.Since(start).Round(time.Second), out)
	fmt.Print("\n" + report.String())
	if err := os.WriteFile(filepath.Join(out, "report.txt"), []byte(report.String()), 0o644); err != nil {
		t.Error(err)
	}
	for _, f := range failed {
		t.Errorf("reliability contract broken: %s (details above, logs in %s)", f, out)
	}
}

func brokerVariant(kind string) string {
	switch kind {
	case "rabbitmq":
		return "classic queues: the topology declares no quorum queue and serve has no switch to declare one"
	case "sqs":
		return "fauxqs emulator"
	case "postgres":
		return "eventpipe's Postgres broker"
	}
	return kind
}

func list(key, def string) []string {
	v := os.Getenv(key)
	if v == "" {
		v = def
	}
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func gitCommit(t *testing.T) string {
	cmd := exec.Command("git", "describe", "--always", "--dirty")
	cmd.Dir = repoRoot(t)
	b, err := cmd.Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// runBroker runs the flows on one broker side by side and returns their
// rows and the evidence behind them.
func runBroker(t *testing.T, kind string, flows []string, m mode, bin, dir, sqsEndpoint string, restarts, keep bool, rng *rand.Rand) ([]Row, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), m.traffic*3+m.settle+10*time.Minute)
	defer cancel()
	var runs []*flowRun
	for _, f := range flows {
		var spec flowSpec
		switch f {
		case "disputes":
			spec = &disputesFlow{}
		case "booking":
			spec = &bookingFlow{}
		default:
			t.Fatalf("CHAOS_FLOWS: unknown flow %q (disputes, booking)", f)
		}
		r := newFlowRun(t, kind, f, spec, m, bin, filepath.Join(dir, f), sqsEndpoint, keep, rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())))
		// serve declares RabbitMQ's topology and creates the Postgres
		// broker's tables itself, but on SQS it only creates a missing
		// queue with SQS's default attributes (no redrive policy, no
		// visibility timeout): the README provisions first, and so does
		// the harness unless CHAOS_SQS_SERVE_ONLY=1.
		if kind == "sqs" && os.Getenv("CHAOS_SQS_SERVE_ONLY") == "" {
			if err := r.applyTopology(ctx); err != nil {
				t.Fatalf("%s %s: %v", kind, f, err)
			}
		}
		if err := spec.start(ctx, r); err != nil {
			r.stopAll()
			t.Fatalf("%s %s: start: %v", kind, f, err)
		}
		runs = append(runs, r)
	}

	var wg sync.WaitGroup
	restartCtx, stopRestarts := context.WithCancel(ctx)
	if restarts {
		wg.Go(func() { injectRestarts(restartCtx, kind, m, runs, rng) })
	}
	var flowsDone sync.WaitGroup
	for _, r := range runs {
		flowsDone.Go(func() { r.run(ctx) })
	}
	flowsDone.Wait()
	stopRestarts()
	wg.Wait()

	var rows []Row
	var notes []string
	for _, r := range runs {
		row, n := r.result(ctx)
		rows = append(rows, row)
		notes = append(notes, n...)
	}
	return rows, notes
}

// injectRestarts restarts the shared services now and then while the
// traffic flows (CHAOS_BROKER_RESTART=1 only): RabbitMQ on the RabbitMQ
// runs, PostgreSQL on every run (it holds the outbox, the inbox and the
// stores, and is the Postgres broker). Each restart is a fault of every
// flow running.
func injectRestarts(ctx context.Context, kind string, m mode, runs []*flowRun, rng *rand.Rand) {
	kinds := []string{FaultPostgresRestart}
	if kind == "rabbitmq" {
		kinds = append(kinds, FaultRabbitMQRestart)
	}
	end := time.Now().Add(m.traffic)
	gap := m.traffic / time.Duration(2*len(kinds)+1)
	for i := 0; i < 10*len(kinds) && time.Now().Add(gap).Before(end); i++ {
		if !sleep(ctx, gap/2+time.Duration(rng.Int64N(int64(gap)))) {
			return
		}
		k := kinds[i%len(kinds)]
		at := time.Now()
		var err error
		switch k {
		case FaultRabbitMQRestart:
			err = restartRabbitMQ(ctx, time.Duration(1+rng.IntN(4))*time.Second)
		case FaultPostgresRestart:
			err = restartPostgres(ctx)
		}
		detail := "restarted"
		if err != nil {
			detail = "restart failed: " + err.Error()
		}
		for _, r := range runs {
			r.recordFault(k, at, time.Now(), detail)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
