package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eventpipe/eventpipe/app/cli"
)

// allSpecs enables the five specs on serve with nothing outside the process:
// the embedded broker, in-memory stores (no postgres.dsn), stackup's three
// roles with its sample processors, the realtime and admin servers on free
// ports. joinlink needs a bulkRegister URL to start (nothing calls it here)
// and interviews an LLM key to exist (nothing uses it here).
var allSpecs = []string{
	"EVENTPIPE_BOOKING_ENABLED=true",
	"EVENTPIPE_DISPUTES_ENABLED=true",
	"EVENTPIPE_INTERVIEWS_ENABLED=true",
	"EVENTPIPE_JOINLINK_ENABLED=true",
	"EVENTPIPE_JOINLINK_BULK_REGISTER_URL=http://127.0.0.1:9/bulk-register",
	"EVENTPIPE_STACKUP_ENABLED=true",
	"EVENTPIPE_STACKUP_PROCESSORS=sample",
	"EVENTPIPE_DISPUTES_API_ADDR=127.0.0.1:0",
	"EVENTPIPE_INTERVIEWS_API_ADDR=127.0.0.1:0",
	"EVENTPIPE_REALTIME_ADDR=127.0.0.1:0",
	"EVENTPIPE_REALTIME_TOKEN_SECRET=bench-start-up-secret-not-for-production-use",
	"OPENAI_API_KEY=not-a-real-key",
}

// startupPair: `eventpipe serve` with all five specs on the memory broker,
// from exec to the first 200 of /readyz, against serve with no spec (what
// the specs add to a start). The binary is built once, before the first
// repetition, as `make build` builds it. The smoke pass, which measures
// nothing, runs this test binary as the command instead (TestMain) rather
// than spend seconds linking.
func startupPair(m mode) pair {
	var bin binary
	command := func(tb testing.TB) (string, []string) { return bin.path(tb), nil }
	if m.name == smokeMode.name {
		command = func(tb testing.TB) (string, []string) {
			self, err := os.Executable()
			if err != nil {
				tb.Fatal(err)
			}
			return self, []string{runServeEnv + "=1"}
		}
	}
	p := pair{id: "SC", scenario: "serve start-up to /readyz 200", kind: startup,
		settings: "broker=memory, booking disputes interviews joinlink stackup (roles core,ai-worker,realtime), in-memory stores; exec of the built binary to the first 200"}
	for _, s := range []struct {
		name string
		env  []string
	}{{"eventpipe", allSpecs}, {"serve with no spec", nil}} {
		p.sides = append(p.sides, side{name: s.name, run: func(tb testing.TB) Sample {
			bin, env := command(tb)
			return Sample{Messages: 1, Elapsed: startServe(tb, bin, append(env, s.env...))}
		}})
	}
	return p
}

// runServeEnv, set to 1, makes this test binary `eventpipe serve` (TestMain).
// It has no EVENTPIPE_ prefix: serve refuses unknown EVENTPIPE_ variables.
const runServeEnv = "BENCH_RUN_SERVE"

// TestMain runs the tests, or, with BENCH_RUN_SERVE=1, `eventpipe serve` as
// app/cmd/eventpipe's main does.
func TestMain(m *testing.M) {
	if os.Getenv(runServeEnv) != "1" {
		os.Exit(m.Run())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, []string{"serve"}, os.Stdin, os.Stdout, os.Stderr, os.Environ())
	stop()
	os.Exit(code)
}

// binary builds ./app/cmd/eventpipe once, into a directory removed when the
// test ends.
type binary struct {
	once sync.Once
	bin  string
	err  error
}

func (b *binary) path(tb testing.TB) string {
	tb.Helper()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "eventpipe-bench-")
		if err != nil {
			b.err = err
			return
		}
		tb.Cleanup(func() { _ = os.RemoveAll(dir) })
		b.bin = filepath.Join(dir, "eventpipe")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		// The test runs in app/bench; the module root is two levels up.
		cmd := exec.CommandContext(ctx, "go", "build", "-o", b.bin, "../cmd/eventpipe")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build ./app/cmd/eventpipe: %w\n%s", err, out)
		}
	})
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.bin
}

// startServe starts `bin serve` with only PATH, HOME and the embedded broker
// in its environment (so no EVENTPIPE_* of the developer's leaks in) plus
// env, and returns the time from the start of exec until /readyz answered
// 200. It then stops the process with SIGTERM, untimed.
func startServe(tb testing.TB, bin string, env []string) time.Duration {
	tb.Helper()
	cmd := exec.Command(bin, "serve")
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + tb.TempDir(),
		"EVENTPIPE_BROKER=memory", "EVENTPIPE_ADMIN_ADDR=127.0.0.1:0", "EVENTPIPE_LOG_FORMAT=json"}, env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s serve: %v", bin, err)
	}
	addr, lines := make(chan string, 1), &lastLines{}
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		readAdminAddr(out, addr, lines)
		_ = cmd.Wait()
	}()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(45 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			tb.Errorf("serve did not exit within 45 s of SIGTERM")
		}
	}()
	deadline := time.After(runTimeout)
	var admin string
	select {
	case admin = <-addr:
	case <-exited:
		tb.Fatalf("serve exited while starting:\n%s", lines)
	case <-deadline:
		tb.Fatalf("serve logged no admin address within %s:\n%s", runTimeout, lines)
	}
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		if resp, err := client.Get("http://" + admin + "/readyz"); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(start)
			}
		}
		select {
		case <-exited:
			tb.Fatalf("serve exited while starting:\n%s", lines)
		case <-deadline:
			tb.Fatalf("serve's /readyz not 200 within %s:\n%s", runTimeout, lines)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// readAdminAddr reads serve's JSON log until it ends, sending the admin
// server's address ("http server listening", server admin) to addr once and
// keeping the last lines for an error message.
func readAdminAddr(r io.Reader, addr chan<- string, lines *lastLines) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	sent := false
	for sc.Scan() {
		lines.add(sc.Text())
		var line struct {
			Msg, Server, Addr string
		}
		if !sent && json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "http server listening" && line.Server == "admin" {
			addr <- line.Addr
			sent = true
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, os.ErrClosed) {
		lines.add("reading the log: " + err.Error())
	}
}

// lastLines keeps the last 20 lines of a process's output.
type lastLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *lastLines) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
	if len(l.lines) > 20 {
		l.lines = l.lines[1:]
	}
}

func (l *lastLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out string
	for _, s := range l.lines {
		out += s + "\n"
	}
	return out
}
