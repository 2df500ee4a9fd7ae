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

	// stackup is how many StackUp AI requests the foreign producer sends
	// (generate.questions and generate.followup alternately); refusals of
	// them make the model refuse (expected: a FAILED callback);
	// stackupPoison malformed requests are expected in the DLQ.
	stackup, refusals, stackupPoison int
	// duplicates is, per flow, how many already-confirmed messages the
	// duplicates fault re-sends with their ids over the traffic (the full
	// mode's sum over the three flows is 10,000).
	duplicates map[string]int
	// killWeight is how often kill-consumer and kill-relay appear in each
	// round of faults (the other kinds once), so the full run reaches
	// killTarget of each.
	killWeight int
	// faultCap bounds the injections of a kind per flow run (a slow-handler
	// window stalls every AI worker for a minute).
	faultCap map[string]int
	// slowWindow is how long a slow-handler fault lasts: every model call
	// that starts in it answers after slowDelay.
	slowWindow time.Duration
}

// The StackUp model server's timing. A normal answer takes modelDelay; in a
// slow-handler window slowDelay, which straddles the AI worker's
// llmTimeout (set for the stackup processes): a call shorter than it
// outlives the inbox lease (30 s, aiworker.DefaultLeaseTTL), the SQS
// visibility timeout (30 s, the queues declare none) and the Postgres
// broker's ack deadline (30 s) and must be kept alive by their renewals;
// a longer one is cancelled by the client's deadline and retried in
// process. The route's own handler timeout (aiworker.RequestTimeout, 5 min)
// is not reached.
var (
	modelDelay = [2]time.Duration{50 * time.Millisecond, 800 * time.Millisecond}
	slowDelay  = [2]time.Duration{35 * time.Second, 80 * time.Second}
)

const llmTimeout = 60 * time.Second

// killTarget is how many kill-consumer and kill-relay faults the full run
// must reach per flow (the "×20"); fewer is noted in the report.
const killTarget = 20

// due is when the idx-th message of a producer's schedule leaves: evenly
// spread, grouped in bursts.
func (m mode) due(start time.Time, idx int, interval time.Duration) time.Time {
	return start.Add((time.Duration(idx) * interval).Truncate(m.burst))
}

// fullEvents is the full mode's size: at least this many messages per
// broker, summed over the three flows (disputes 50,000, booking 50,000,
// stackup 3,000, and 10,000 duplicates).
const fullEvents = 100_000

var (
	fullMode = mode{
		name: "full", disputes: 50_000, sessions: 500, perSession: 100,
		traffic: 12 * time.Minute, faultGap: [2]time.Duration{2 * time.Second, 6 * time.Second}, maxFaults: 200,
		settle: 6 * time.Minute, linger: 30 * time.Second, disputePoison: 5, bookingPoison: 3, producers: 4, burst: 5 * time.Second,
		stackup: 3000, refusals: 5, stackupPoison: 4,
		duplicates: map[string]int{"disputes": 4000, "booking": 4000, "stackup": 2000},
		killWeight: 3, faultCap: map[string]int{FaultSlowHandler: 3, FaultSIGTERMMidCall: 1}, slowWindow: 15 * time.Second,
	}
	quickMode = mode{
		name: "quick", disputes: 2000, sessions: 30, perSession: 60,
		traffic: 45 * time.Second, faultGap: [2]time.Duration{1500 * time.Millisecond, 4 * time.Second}, maxFaults: 16,
		settle: 100 * time.Second, linger: 5 * time.Second, disputePoison: 0, bookingPoison: 1, producers: 4, burst: 3 * time.Second,
		stackup: 200, refusals: 2, stackupPoison: 2,
		duplicates: map[string]int{"disputes": 120, "booking": 120, "stackup": 60},
		killWeight: 1, faultCap: map[string]int{FaultSlowHandler: 1, FaultSIGTERMMidCall: 1}, slowWindow: 10 * time.Second,
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
	brokers := list("CHAOS_BROKERS", "rabbitmq,rabbitmq-quorum,sqs,postgres")
	flows := list("CHAOS_FLOWS", "disputes,booking,stackup")
	faults := list("CHAOS_FAULTS", "")
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
	for _, b := range brokers {
		if _, ok := brokerKinds[b]; !ok {
			t.Fatalf("CHAOS_BROKERS: unknown broker %q (rabbitmq, rabbitmq-quorum, sqs, postgres)", b)
		}
	}
	for _, f := range faults {
		if !slices.Contains(faultOrder, f) {
			t.Fatalf("CHAOS_FAULTS: unknown fault %q (%s)", f, strings.Join(faultOrder, ", "))
		}
	}
	if slices.Contains(brokers, "sqs") {
		sqsEndpoint = sqsEmulator(t)
	}

	var report strings.Builder
	fmt.Fprintf(&report, "eventpipe chaos harness, %s mode, %s, commit %s, seed %d, GOMAXPROCS default on %d CPUs\n",
		m.name, time.Now().UTC().Format(time.RFC3339), commit, seed, numCPU())
	fmt.Fprintf(&report, "broker restarts: %v (CHAOS_BROKER_RESTART=1 to inject them)\n", restarts)
	if len(faults) > 0 {
		fmt.Fprintf(&report, "faults: only %s (CHAOS_FAULTS)\n", strings.Join(faults, ", "))
	}
	report.WriteString("\n")
	var failed []string
	for i, name := range brokers {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			b := brokerKinds[name]
			b.name = name
			rows, notes := runBroker(t, b, flows, faults, m, bin, filepath.Join(out, name), sqsEndpoint, restarts, keep, rng)
			var w strings.Builder
			title := fmt.Sprintf("%s (%s)", name, b.variant)
			if err := Render(&w, title, rows); err != nil {
				t.Fatal(err)
			}
			total := 0
			for _, r := range rows {
				total += r.Sent + r.PoisonSent + r.DuplicatesSent
			}
			msg := fmt.Sprintf("messages sent on this broker: %d (requests, events and business changes, poison and duplicates, over %d flows)", total, len(rows))
			if m.name == fullMode.name && total < fullEvents {
				msg += fmt.Sprintf(", below the full run's %d", fullEvents)
			}
			notes = append(notes, msg)
			for _, n := range notes {
				fmt.Fprintf(&w, "  - %s\n", n)
			}
			w.WriteString("\n")
			fmt.Print(w.String())
			report.WriteString(w.String())
			for _, r := range rows {
				if r.Failed() {
					failed = append(failed, fmt.Sprintf("%s %s: lost %d, duplicated %d, out of order %d", name, r.Flow, r.Lost, r.Duplicated, r.OutOfOrder))
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

// brokerRun is one entry of CHAOS_BROKERS: the broker kind eventpipe is
// configured with and what the entry changes.
type brokerRun struct {
	// name is the CHAOS_BROKERS entry, kind the broker (EVENTPIPE_BROKER).
	name, kind string
	// queueType, when set, is EVENTPIPE_RABBITMQ_QUEUE_TYPE for every
	// serve process (the quorum variant).
	queueType string
	variant   string
}

// brokerKinds are the CHAOS_BROKERS entries. rabbitmq-quorum runs exactly
// like rabbitmq, on virtual hosts of its own, with every spec queue and DLQ
// declared quorum by rabbitmq.queue_type (EVENTPIPE_RABBITMQ_QUEUE_TYPE);
// the harness reads the declared types back and says in the notes when
// they are not what was asked for (a build without that key ignores the
// variable and declares what the topology says).
var brokerKinds = map[string]brokerRun{
	"rabbitmq":        {kind: "rabbitmq", variant: "queues as the topology declares them: classic"},
	"rabbitmq-quorum": {kind: "rabbitmq", queueType: "quorum", variant: "EVENTPIPE_RABBITMQ_QUEUE_TYPE=quorum: every spec queue and DLQ quorum"},
	"sqs":             {kind: "sqs", variant: "fauxqs emulator"},
	"postgres":        {kind: "postgres", variant: "eventpipe's Postgres broker"},
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
func runBroker(t *testing.T, b brokerRun, flows, faults []string, m mode, bin, dir, sqsEndpoint string, restarts, keep bool, rng *rand.Rand) ([]Row, []string) {
	t.Helper()
	kind := b.kind
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
		case "stackup":
			spec = &stackupFlow{}
		default:
			t.Fatalf("CHAOS_FLOWS: unknown flow %q (disputes, booking, stackup)", f)
		}
		r := newFlowRun(t, b, f, spec, m, faults, bin, filepath.Join(dir, f), sqsEndpoint, keep, rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())))
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
	if b.kind == "rabbitmq" {
		notes = append(notes, queueTypes(ctx, b, runs))
	}
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
