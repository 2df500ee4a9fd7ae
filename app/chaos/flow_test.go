package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	epsqs "github.com/eventpipe/eventpipe/app/broker/sqs"
)

func numCPU() int { return runtime.NumCPU() }

// flowSpec is what a flow adds to the common run: its processes, its
// producer, when it has settled and what it counts.
type flowSpec interface {
	// title names the flow in the table.
	title() string
	// start starts the flow's processes and whatever its producer needs.
	start(ctx context.Context, r *flowRun) error
	// faultKinds are the faults injected into this flow.
	faultKinds(r *flowRun) []string
	// produce sends the flow's messages, spread until until; it returns
	// when all are sent or ctx ends.
	produce(ctx context.Context, r *flowRun, until time.Time)
	// settled reports whether every sent message has its effect and every
	// poison message is in the DLQ.
	settled(ctx context.Context, r *flowRun) (bool, string)
	// count fills the row's counts and returns the evidence of what went
	// wrong.
	count(ctx context.Context, r *flowRun, row *Row) []string
	close()
}

// flowFaults is implemented by a flow with faults of its own (stackup's
// slow-handler): inject injects kind and returns its detail, ok false when
// kind is not the flow's.
type flowFaults interface {
	inject(ctx context.Context, r *flowRun, kind string) (detail string, ok bool)
}

// duplicator is implemented by a flow the duplicates fault can run on:
// resend sends n already-confirmed messages again, with their original
// ids, and returns how many the broker confirmed.
type duplicator interface {
	resend(ctx context.Context, r *flowRun, n int) (int, error)
}

// faultRecord is one injected fault.
type faultRecord struct {
	kind    string
	at, end time.Time
	detail  string
}

// flowRun is one flow on one broker: its scope on the services, its fault
// proxies, its processes and what happened to them.
type flowRun struct {
	t *testing.T
	// kind is the broker (rabbitmq, sqs, postgres), broker the
	// CHAOS_BROKERS entry (rabbitmq-quorum is kind rabbitmq).
	kind   string
	broker brokerRun
	flow   string
	// only, when set, lists the fault kinds to inject (CHAOS_FAULTS).
	only []string
	spec flowSpec
	m    mode
	bin  string
	dir  string
	sc   *scope

	// brokerProxy stands between eventpipe and the broker, dbProxy between
	// eventpipe and PostgreSQL; on the Postgres broker they are one.
	brokerProxy, dbProxy *Proxy

	// procMu is held by whoever acts on the processes: a fault, the
	// supervisor.
	procMu sync.Mutex
	procs  []*process
	// consumer and relay are the targets of kill-consumer and kill-relay.
	consumer, relay *process

	mu     sync.Mutex
	rng    *rand.Rand
	faults []faultRecord
	notes  []string
	// unsent is what the producer could not send of what the mode planned.
	unsent  int
	started time.Time
	ended   time.Time
	// dupSent counts the duplicates the duplicates fault sent.
	dupSent int
}

func newFlowRun(t *testing.T, b brokerRun, flow string, spec flowSpec, m mode, only []string, bin, dir, sqsEndpoint string, keep bool, rng *rand.Rand) *flowRun {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	kind := b.kind
	r := &flowRun{t: t, kind: kind, broker: b, flow: flow, only: only, spec: spec, m: m, bin: bin, dir: dir, rng: rng}
	r.sc = newScope(t, b, flow, sqsEndpoint, keep)
	var err error
	if r.dbProxy, err = NewProxy("127.0.0.1:5432"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.dbProxy.Close() })
	switch kind {
	case "rabbitmq":
		r.brokerProxy, err = NewProxy("127.0.0.1:5672")
	case "sqs":
		var host string
		if host, err = endpointHostPort(sqsEndpoint); err == nil {
			r.brokerProxy, err = NewProxy(host)
		}
	case "postgres":
		r.brokerProxy = r.dbProxy
	default:
		t.Fatalf("CHAOS_BROKERS: unknown broker %q (rabbitmq, sqs, postgres)", kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	if r.brokerProxy != r.dbProxy {
		t.Cleanup(func() { _ = r.brokerProxy.Close() })
	}
	t.Cleanup(spec.close)
	return r
}

func endpointHostPort(endpoint string) (string, error) {
	rest, ok := strings.CutPrefix(endpoint, "http://")
	if !ok {
		return "", fmt.Errorf("SQS endpoint %q: want http://host:port", endpoint)
	}
	host, _, _ := strings.Cut(rest, "/")
	if _, _, err := net.SplitHostPort(host); err != nil {
		return "", fmt.Errorf("SQS endpoint %q: %w", endpoint, err)
	}
	return host, nil
}

// serveEnv is a process's whole environment: nothing is inherited but PATH
// and HOME, so a developer's EVENTPIPE_* variables cannot leak in.
func (r *flowRun) serveEnv(extra ...string) []string {
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"EVENTPIPE_BROKER=" + r.kind,
		"EVENTPIPE_POSTGRES_DSN=postgres://postgres@" + r.dbProxy.Addr() + "/test?sslmode=disable",
		"EVENTPIPE_POSTGRES_SCHEMA=" + r.sc.schema,
		"EVENTPIPE_ADMIN_ADDR=127.0.0.1:0",
		"EVENTPIPE_DISPUTES_API_ADDR=127.0.0.1:0", // several serve processes on one host
		"EVENTPIPE_LOG_FORMAT=json",
		"EVENTPIPE_LOG_LEVEL=info",
	}
	switch r.kind {
	case "rabbitmq":
		env = append(env, "EVENTPIPE_RABBITMQ_URL=amqp://guest:guest@"+r.brokerProxy.Addr()+"/"+r.sc.vhost)
		if r.broker.queueType != "" {
			env = append(env, "EVENTPIPE_RABBITMQ_QUEUE_TYPE="+r.broker.queueType)
		}
	case "sqs":
		env = append(env, "EVENTPIPE_SQS_ENDPOINT=http://"+r.brokerProxy.Addr(), "EVENTPIPE_SQS_REGION="+sqsRegion,
			"AWS_REGION="+sqsRegion, "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_EC2_METADATA_DISABLED=true")
	}
	return append(env, extra...)
}

// directEnv is serveEnv with the broker and the database reached directly,
// for the CLI commands the harness runs to count (dlq peek).
func (r *flowRun) directEnv(extra ...string) []string {
	env := r.serveEnv(extra...)
	for i, kv := range env {
		switch {
		case strings.HasPrefix(kv, "EVENTPIPE_POSTGRES_DSN="):
			env[i] = "EVENTPIPE_POSTGRES_DSN=" + r.sc.pgDirect
		case strings.HasPrefix(kv, "EVENTPIPE_RABBITMQ_URL="):
			env[i] = "EVENTPIPE_RABBITMQ_URL=" + r.sc.amqpDirect
		case strings.HasPrefix(kv, "EVENTPIPE_SQS_ENDPOINT="):
			env[i] = "EVENTPIPE_SQS_ENDPOINT=" + r.sc.sqsEndpoint
		}
	}
	return env
}

// addProcess registers a serve process (not started).
func (r *flowRun) addProcess(name string, env []string) *process {
	p := newProcess(name, r.bin, r.dir, env)
	r.procs = append(r.procs, p)
	return p
}

// startAll starts every process, one after the other.
func (r *flowRun) startAll(ctx context.Context) error {
	for _, p := range r.procs {
		if err := p.start(ctx, readyTimeout); err != nil {
			return err
		}
	}
	return nil
}

func (r *flowRun) stopAll() {
	for _, p := range r.procs {
		p.signal(syscall.SIGTERM, "stop", termWait)
	}
}

// short records that the producer sent only sent of planned messages: the
// row fails.
func (r *flowRun) short(sent, planned int, what string) {
	r.note("the producer stopped after %d of %d %s (ran out of time)", sent, planned, what)
	r.mu.Lock()
	r.unsent += planned - sent
	r.mu.Unlock()
}

func (r *flowRun) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

func (r *flowRun) recordFault(kind string, at, end time.Time, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, faultRecord{kind: kind, at: at, end: end, detail: detail})
}

func (r *flowRun) randDuration(lo, hi time.Duration) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(r.rng.Int64N(int64(hi-lo)))
}

func (r *flowRun) randIntN(n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rng.IntN(n)
}

// run is the flow's life after start: traffic with faults, the settle, a
// graceful stop.
func (r *flowRun) run(ctx context.Context) {
	r.started = time.Now()
	trafficEnd := r.started.Add(r.m.traffic)
	supCtx, stopSupervisor := context.WithCancel(ctx)
	var supervisor, injector sync.WaitGroup
	supervisor.Go(func() { r.supervise(supCtx) })
	injector.Go(func() { r.injectFaults(ctx, trafficEnd) })
	if d, ok := r.spec.(duplicator); ok && r.faultOn(FaultDuplicates) && r.m.duplicates[r.flow] > 0 {
		injector.Go(func() { r.duplicate(ctx, d) })
	}

	// The producer may run late (a stalled database); it gets the traffic
	// time again at most.
	prodCtx, stopProducer := context.WithDeadline(ctx, trafficEnd.Add(r.m.traffic))
	r.spec.produce(prodCtx, r, trafficEnd)
	stopProducer()
	// Faults end with the traffic; the last one may still be under way.
	injector.Wait()

	deadline := time.Now().Add(r.m.settle)
	var state string
	settled := false
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var ok bool
		if ok, state = r.spec.settled(ctx, r); ok {
			settled = true
			break
		}
		sleep(ctx, time.Second)
	}
	if !settled {
		r.note("not settled %s after the traffic: %s", r.m.settle, state)
	} else {
		sleep(ctx, r.m.linger)
	}
	r.ended = time.Now()
	stopSupervisor()
	supervisor.Wait()
	r.procMu.Lock()
	r.stopAll()
	r.procMu.Unlock()
}

// supervise restarts a process that exited without a fault asking it to (a
// crash is a finding, recorded with its exit).
func (r *flowRun) supervise(ctx context.Context) {
	for restarts := 0; restarts < 20; {
		if !sleep(ctx, time.Second) {
			return
		}
		r.procMu.Lock()
		for _, p := range r.procs {
			if up, _ := p.running(); up {
				continue
			}
			e, _ := p.lastExit()
			r.note("process %s crashed: %s", p.name, e)
			restarts++
			if err := p.start(ctx, readyTimeout); err != nil {
				r.note("restart of %s after its crash: %v", p.name, err)
			}
		}
		r.procMu.Unlock()
	}
}

// faultOn reports whether kind is among the faults to inject
// (CHAOS_FAULTS, default every kind).
func (r *flowRun) faultOn(kind string) bool { return len(r.only) == 0 || slices.Contains(r.only, kind) }

// injectFaults injects the flow's faults one after the other, at random
// gaps, until until: each kind in turn, in an order shuffled per round,
// kill-consumer and kill-relay m.killWeight times per round, a kind with a
// cap (m.faultCap) no more often than that.
func (r *flowRun) injectFaults(ctx context.Context, until time.Time) {
	var kinds []string
	for _, k := range r.spec.faultKinds(r) {
		if !r.faultOn(k) || k == FaultDuplicates {
			continue
		}
		n := 1
		if k == FaultKillConsumer || k == FaultKillRelay {
			n = max(r.m.killWeight, 1)
		}
		for range n {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) == 0 {
		return
	}
	injected := map[string]int{}
	var queue []string
	for i := 0; i < r.m.maxFaults; i++ {
		gap := r.randDuration(r.m.faultGap[0], r.m.faultGap[1])
		if time.Now().Add(gap).After(until) || !sleep(ctx, gap) {
			return
		}
		kind := ""
		for kind == "" {
			if len(queue) == 0 {
				queue = slices.DeleteFunc(slices.Clone(kinds), func(k string) bool {
					c, capped := r.m.faultCap[k]
					return capped && injected[k] >= c
				})
				if len(queue) == 0 {
					return
				}
				r.mu.Lock()
				r.rng.Shuffle(len(queue), func(i, j int) { queue[i], queue[j] = queue[j], queue[i] })
				r.mu.Unlock()
			}
			kind, queue = queue[0], queue[1:]
			if c, capped := r.m.faultCap[kind]; capped && injected[kind] >= c {
				kind = ""
			}
		}
		injected[kind]++
		r.inject(ctx, kind)
	}
}

// duplicate is the duplicates fault: the flow's budget of re-sends
// (m.duplicates), spread over the traffic in one batch per burst, each
// batch recorded as a fault.
func (r *flowRun) duplicate(ctx context.Context, d duplicator) {
	budget := r.m.duplicates[r.flow]
	batches := max(int(r.m.traffic/r.m.burst), 1)
	sent := 0
	defer func() {
		r.mu.Lock()
		r.dupSent = sent
		r.mu.Unlock()
	}()
	for i := 1; i <= batches; i++ {
		// The first batch after one burst: something is confirmed by then.
		if !sleep(ctx, time.Until(r.started.Add(time.Duration(i)*r.m.burst))) {
			return
		}
		at := time.Now()
		n, err := d.resend(ctx, r, budget*i/batches-sent)
		sent += n
		detail := fmt.Sprintf("%d messages re-sent with their original ids (%d of %d so far)", n, sent, budget)
		if err != nil {
			detail += "; last error: " + err.Error()
		}
		r.recordFault(FaultDuplicates, at, time.Now(), detail)
	}
}

// inject injects one fault and waits until it is over (the process ready
// again, the proxy forwarding again).
func (r *flowRun) inject(ctx context.Context, kind string) {
	at := time.Now()
	detail := ""
	switch kind {
	case FaultKillConsumer, FaultKillRelay:
		p := r.consumer
		if kind == FaultKillRelay {
			p = r.relay
		}
		r.procMu.Lock()
		p.kill()
		pause := r.randDuration(500*time.Millisecond, 3*time.Second)
		sleep(ctx, pause)
		detail = fmt.Sprintf("%s killed, restarted after %s", p.name, pause.Round(time.Millisecond))
		if err := p.start(ctx, readyTimeout); err != nil {
			r.note("%s: restart: %v", kind, err)
		}
		r.procMu.Unlock()
	case FaultSIGTERM:
		p := r.procs[r.randIntN(len(r.procs))]
		r.procMu.Lock()
		took, inTime := p.signal(syscall.SIGTERM, "sigterm", termWait)
		e, _ := p.lastExit()
		detail = fmt.Sprintf("%s exited after %s (%s)", p.name, took.Round(time.Millisecond), e)
		if !inTime {
			r.note("SIGTERM did not end %s within %s: killed (%s)", p.name, termWait, e.log)
		} else if e.code != 0 {
			r.note("SIGTERM: %s exited with code %d after %s (%s)", p.name, e.code, took.Round(time.Millisecond), e.log)
		}
		if err := p.start(ctx, readyTimeout); err != nil {
			r.note("sigterm: restart: %v", err)
		}
		r.procMu.Unlock()
	case FaultCut:
		down := r.randDuration(0, 3*time.Second)
		n := r.brokerProxy.Cut(down)
		sleep(ctx, down)
		detail = fmt.Sprintf("%d broker connections reset, new ones refused for %s", n, down.Round(time.Millisecond))
	case FaultDBCut:
		down := r.randDuration(0, 2*time.Second)
		n := r.dbProxy.Cut(down)
		sleep(ctx, down)
		detail = fmt.Sprintf("%d database connections reset, new ones refused for %s", n, down.Round(time.Millisecond))
	case FaultStall:
		d := r.randDuration(3*time.Second, 10*time.Second)
		n := r.brokerProxy.Open()
		r.brokerProxy.Stall(d)
		detail = fmt.Sprintf("%d broker connections stalled for %s", n, d.Round(time.Millisecond))
	default:
		detail = "unknown fault"
		if f, ok := r.spec.(flowFaults); ok {
			if d, ok := f.inject(ctx, r, kind); ok {
				detail = d
			}
		}
	}
	r.recordFault(kind, at, time.Now(), detail)
}

// result is the flow's row: the flow's counts, the faults and the longest
// recovery, and the notes.
func (r *flowRun) result(ctx context.Context) (Row, []string) {
	row := Row{Flow: r.spec.title(), OutOfOrder: -1, Faults: map[string]int{}}
	evidence := r.spec.count(ctx, r, &row)
	r.mu.Lock()
	faults := slices.Clone(r.faults)
	notes := slices.Clone(r.notes)
	row.Unsent = r.unsent
	r.mu.Unlock()
	for _, f := range faults {
		row.Faults[f.kind]++
	}
	// Recovery: from each fault to the first effect recorded after it. A
	// batch of duplicates stops nothing, so it has no recovery.
	perKind := map[string]time.Duration{}
	for _, f := range faults {
		if f.kind == FaultDuplicates {
			continue
		}
		var first *time.Time
		err := r.sc.pool.QueryRow(ctx, `SELECT min(at) FROM `+r.sc.table("chaos_effects")+` WHERE at > $1`, f.at).Scan(&first)
		if err != nil {
			notes = append(notes, fmt.Sprintf("recovery after %s: %v", f.kind, err))
			continue
		}
		if first == nil {
			row.NoRecovery++
			continue
		}
		d := first.Sub(f.at)
		if row.MaxRecoveryKind == "" || d > row.MaxRecovery {
			row.MaxRecovery, row.MaxRecoveryKind = d, f.kind
		}
		perKind[f.kind] = max(perKind[f.kind], d)
	}
	if len(perKind) > 0 {
		var parts []string
		for _, k := range faultOrder {
			if d, ok := perKind[k]; ok {
				parts = append(parts, fmt.Sprintf("%s %s", k, d.Round(100*time.Millisecond)))
			}
		}
		notes = append(notes, "longest recovery by fault: "+strings.Join(parts, ", ")+" (faults in "+filepath.Join(r.dir, "faults.txt")+")")
	}
	r.mu.Lock()
	dupSent := r.dupSent
	r.mu.Unlock()
	row.DuplicatesSent = dupSent
	if row.Faults[FaultDuplicates] > 0 {
		notes = append(notes, fmt.Sprintf("duplicates fault: %d already-confirmed messages re-sent with their original ids in %d batches (budget %d)",
			dupSent, row.Faults[FaultDuplicates], r.m.duplicates[r.flow]))
	}
	if r.m.killWeight > 1 {
		for _, k := range []string{FaultKillConsumer, FaultKillRelay} {
			if slices.Contains(r.spec.faultKinds(r), k) && r.faultOn(k) && row.Faults[k] < killTarget {
				notes = append(notes, fmt.Sprintf("%s reached %d, below the full run's target of %d", k, row.Faults[k], killTarget))
			}
		}
	}
	for _, p := range r.procs {
		for _, e := range p.unexpectedExits() {
			notes = append(notes, fmt.Sprintf("%s: %s", p.name, e))
		}
	}
	if counts, err := logLines(r.dir); err == nil && len(counts) > 0 {
		keys := make([]string, 0, len(counts))
		for k := range counts {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return counts[keys[i]] > counts[keys[j]] })
		var parts []string
		for i, k := range keys {
			if i == 12 {
				parts = append(parts, fmt.Sprintf("… %d more kinds", len(keys)-i))
				break
			}
			parts = append(parts, fmt.Sprintf("%q ×%d", k, counts[k]))
		}
		notes = append(notes, "warnings and errors logged: "+strings.Join(parts, ", "))
	}
	if err := r.writeFaultLog(faults); err != nil {
		notes = append(notes, "fault log: "+err.Error())
	}
	out := make([]string, 0, len(notes)+len(evidence))
	for _, n := range append(evidence, notes...) {
		out = append(out, r.spec.title()+": "+n)
	}
	return row, out
}

func (r *flowRun) writeFaultLog(faults []faultRecord) error {
	var b strings.Builder
	for _, f := range faults {
		fmt.Fprintf(&b, "%s +%6.1fs %-16s %5.1fs  %s\n", f.at.Format("15:04:05.000"), f.at.Sub(r.started).Seconds(), f.kind, f.end.Sub(f.at).Seconds(), f.detail)
	}
	return os.WriteFile(filepath.Join(r.dir, "faults.txt"), []byte(b.String()), 0o644)
}

// --- dead-letter queues ----------------------------------------------------

// dlqDepth is how many messages the dead-letter queue holds (0 when it does
// not exist yet).
func (r *flowRun) dlqDepth(ctx context.Context, queue string) (int, error) {
	switch r.kind {
	case "rabbitmq":
		n, err := rabbitQueueDepth(ctx, r.sc.vhost, queue)
		return max(n, 0), err
	case "postgres":
		var n int
		err := r.sc.pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{r.sc.schema, "queue_" + queue}.Sanitize()).Scan(&n)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
			return 0, nil // no table: nothing dead-lettered yet
		}
		return n, err
	case "sqs":
		c := sqsClient(r.sc.sqsEndpoint)
		u, err := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(epsqs.QueueName("", queue))})
		if err != nil {
			var nf *types.QueueDoesNotExist
			if errors.As(err, &nf) {
				return 0, nil
			}
			return 0, err
		}
		out, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: u.QueueUrl, AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		}})
		if err != nil {
			return 0, err
		}
		var n int
		for _, k := range []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible} {
			var v int
			_, _ = fmt.Sscan(out.Attributes[string(k)], &v)
			n += v
		}
		return n, nil
	}
	return 0, fmt.Errorf("unknown broker %q", r.kind)
}

// deadLetter is one line of `eventpipe dlq peek`.
type deadLetter struct {
	ID      string `json:"id"`
	History *struct {
		Reason   string `json:"reason"`
		Class    string `json:"class"`
		Attempts int    `json:"attempts"`
	} `json:"history"`
}

// peekDLQ lists the dead letters with `eventpipe dlq peek`, the operator's
// own view.
func (r *flowRun) peekDLQ(ctx context.Context, queue string, max int, extra ...string) ([]deadLetter, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.bin, "dlq", "peek", "--queue", queue, "--max", fmt.Sprint(max))
	cmd.Env = r.directEnv(extra...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("eventpipe dlq peek --queue %s: %w: %s", queue, err, truncate(stderr.String(), 600))
	}
	return parsePeek(out)
}

// parsePeek reads the JSON lines of `eventpipe dlq peek`: one per dead
// letter, then a {"groups": …} line that is none.
func parsePeek(out []byte) ([]deadLetter, error) {
	var dls []deadLetter
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		var d struct {
			deadLetter
			// Groups marks peek's last line, the count by group: not a
			// dead letter (read as one, it was an "other" without an id).
			Groups json.RawMessage `json:"groups"`
		}
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			return dls, fmt.Errorf("dlq peek line %q: %w", truncate(line, 200), err)
		}
		if d.Groups != nil {
			continue
		}
		dls = append(dls, d.deadLetter)
	}
	return dls, nil
}

func sqsClient(endpoint string) *awssqs.Client {
	return awssqs.NewFromConfig(aws.Config{
		Region:       sqsRegion,
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
}

// duplicates counts the extra committed applications of an effect (event
// ids with more than one audit row) and describes a few.
func duplicates(ctx context.Context, r *flowRun) (int, []string) {
	rows, err := r.sc.pool.Query(ctx, `SELECT event_id, count(*), string_agg(to_char(at, 'HH24:MI:SS.MS') || ' pid ' || backend, ', ' ORDER BY at)
		FROM `+r.sc.table("chaos_effects")+` GROUP BY event_id HAVING count(*) > 1 ORDER BY min(at)`)
	if err != nil {
		return 0, []string{"duplicates: " + err.Error()}
	}
	defer rows.Close()
	extra := 0
	var sample []string
	for rows.Next() {
		var id, when string
		var n int
		if err := rows.Scan(&id, &n, &when); err != nil {
			return extra, append(sample, "duplicates: "+err.Error())
		}
		extra += n - 1
		if len(sample) < 3 {
			sample = append(sample, fmt.Sprintf("%s applied %d times (%s)", id, n, when))
		}
	}
	return extra, sample
}

// classify splits dead letters into the expected ones (their id is one of
// expected) and the others.
func classify(dls []deadLetter, expected []string) (exp, other int) {
	for _, d := range dls {
		if slices.Contains(expected, d.ID) {
			exp++
		} else {
			other++
		}
	}
	return exp, other
}

// deadSample describes up to n unexpected dead letters.
func deadSample(dls []deadLetter, expected []string, n int) []string {
	var out []string
	for _, d := range dls {
		if slices.Contains(expected, d.ID) || len(out) == n {
			continue
		}
		s := d.ID
		if d.History != nil {
			s += fmt.Sprintf(" (%s after %d attempts: %s)", d.History.Class, d.History.Attempts, truncate(d.History.Reason, 160))
		} else {
			s += " (no history: the broker dead-lettered it on its own)"
		}
		out = append(out, s)
	}
	return out
}

// deadLetteredLines are the "message dead-lettered" log lines, shortened.
func deadLetteredLines(dir string, n int) []string {
	var out []string
	for _, l := range grepLogs(dir, `"msg":"message dead-lettered"`, n) {
		out = append(out, truncate(l, 260))
	}
	return out
}

// missingPoison describes the poison messages that are not in the DLQ: how
// often they failed and the last error, from the logs.
func missingPoison(r *flowRun, dls []deadLetter, poison []string) []string {
	var out []string
	for _, id := range poison {
		if slices.ContainsFunc(dls, func(d deadLetter) bool { return d.ID == id }) {
			continue
		}
		lines := grepLogs(r.dir, `"message_id":"`+id+`"`, 100000)
		failed, last := 0, ""
		for _, l := range lines {
			if strings.Contains(l, `"msg":"message failed"`) {
				failed++
				last = l
			}
		}
		if len(lines) == 0 {
			continue // the other id of the same poison (SQS's MessageId or ours)
		}
		s := fmt.Sprintf("poison %s not in the DLQ: %d log lines name it, %d \"message failed\"", id, len(lines), failed)
		if last != "" {
			s += "; last: " + truncate(last, 700)
		}
		out = append(out, s)
	}
	return out
}

// sqsAttribute is one attribute of an SQS queue, or why it is unknown.
func sqsAttribute(ctx context.Context, endpoint, queue string, name types.QueueAttributeName) string {
	c := sqsClient(endpoint)
	u, err := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(epsqs.QueueName("", queue))})
	if err != nil {
		return err.Error()
	}
	out, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: u.QueueUrl, AttributeNames: []types.QueueAttributeName{name}})
	if err != nil {
		return err.Error()
	}
	if v, ok := out.Attributes[string(name)]; ok {
		return v
	}
	return "(not set)"
}

// applyTopology provisions the flow's spec topology on the broker with
// `eventpipe topology apply`, as the README does before serve.
func (r *flowRun) applyTopology(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	file := filepath.Join(repoRoot(r.t), "config", "topology", r.flow+".yaml")
	cmd := exec.CommandContext(ctx, r.bin, "topology", "apply", "-f", file)
	cmd.Env = r.directEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("eventpipe topology apply -f %s: %w: %s", file, err, truncate(string(out), 800))
	}
	return os.WriteFile(filepath.Join(r.dir, "topology-apply.txt"), out, 0o644)
}
