package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// buildEventpipe builds the binary under test into dir, as `make build`
// does, once per harness run.
func buildEventpipe(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "eventpipe")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./app/cmd/eventpipe")
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./app/cmd/eventpipe: %v\n%s", err, out)
	}
	return bin
}

// repoRoot is the module root (the test runs in app/chaos).
func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}

// exitRecord is how one run of a process ended.
type exitRecord struct {
	start     int
	requested string // "", "sigkill", "sigterm", "stop"
	code      int    // -1 when killed by a signal
	signal    string
	at        time.Time
	log       string
}

// process is one `eventpipe serve` the harness starts, kills and restarts.
// Each start logs (JSON) to a file of its own.
type process struct {
	name string
	bin  string
	env  []string
	dir  string

	mu        sync.Mutex
	cmd       *exec.Cmd
	done      chan struct{}
	starts    int
	logPath   string
	admin     string
	requested string
	exits     []exitRecord
}

func newProcess(name, bin, dir string, env []string) *process {
	return &process{name: name, bin: bin, dir: dir, env: env}
}

// start launches the process and waits (at most timeout) until its /readyz
// answers 200.
func (p *process) start(ctx context.Context, timeout time.Duration) error {
	p.mu.Lock()
	if p.cmd != nil {
		p.mu.Unlock()
		return fmt.Errorf("%s: already running", p.name)
	}
	p.starts++
	p.logPath = filepath.Join(p.dir, fmt.Sprintf("%s-%02d.log", p.name, p.starts))
	logFile, err := os.Create(p.logPath)
	if err != nil {
		p.mu.Unlock()
		return err
	}
	cmd := exec.Command(p.bin, "serve")
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The children die with the harness, whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		p.mu.Unlock()
		_ = logFile.Close()
		return fmt.Errorf("%s: start: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.admin, p.requested = cmd, done, "", ""
	start, logPath := p.starts, p.logPath
	p.mu.Unlock()

	go func() {
		_ = cmd.Wait() // the exit is read from ProcessState
		_ = logFile.Close()
		rec := exitRecord{start: start, code: cmd.ProcessState.ExitCode(), at: time.Now(), log: logPath}
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			rec.signal = ws.Signal().String()
		}
		p.mu.Lock()
		rec.requested = p.requested
		p.exits = append(p.exits, rec)
		p.cmd = nil
		p.mu.Unlock()
		close(done)
	}()
	return p.waitReady(ctx, done, logPath, timeout)
}

// waitReady finds the admin address in the log ("http server listening",
// server admin) and polls its /readyz.
func (p *process) waitReady(ctx context.Context, done chan struct{}, logPath string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: 2 * time.Second}
	admin := ""
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("%s: exited while starting; see %s", p.name, logPath)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if admin == "" {
			admin = adminAddrFromLog(logPath)
			if admin == "" {
				continue
			}
			p.mu.Lock()
			p.admin = admin
			p.mu.Unlock()
		}
		resp, err := client.Get("http://" + admin + "/readyz")
		if err != nil {
			continue
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
	}
	return fmt.Errorf("%s: not ready within %s (admin %q); see %s", p.name, timeout, admin, logPath)
}

func adminAddrFromLog(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var line struct {
			Msg    string `json:"msg"`
			Server string `json:"server"`
			Addr   string `json:"addr"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "http server listening" && line.Server == "admin" {
			return line.Addr
		}
	}
	return ""
}

// running reports whether the process runs, and its done channel.
func (p *process) running() (bool, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil, p.done
}

// signal sends sig and waits at most wait for the exit; past it the process
// is killed. It returns how long the exit took and whether it came in time.
func (p *process) signal(sig syscall.Signal, why string, wait time.Duration) (time.Duration, bool) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	if cmd == nil {
		p.mu.Unlock()
		return 0, true
	}
	p.requested = why
	p.mu.Unlock()
	t0 := time.Now()
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return time.Since(t0), true
	case <-time.After(wait):
	}
	_ = cmd.Process.Kill()
	<-done
	return time.Since(t0), false
}

func (p *process) kill() { p.signal(syscall.SIGKILL, "sigkill", time.Minute) }

// lastExit is the record of the latest exit.
func (p *process) lastExit() (exitRecord, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.exits) == 0 {
		return exitRecord{}, false
	}
	return p.exits[len(p.exits)-1], true
}

// unexpectedExits are the exits nobody asked for, and the SIGTERMs that did
// not end in exit code 0.
func (p *process) unexpectedExits() []exitRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []exitRecord
	for _, e := range p.exits {
		switch {
		case e.requested == "":
			out = append(out, e)
		case (e.requested == "sigterm" || e.requested == "stop") && e.code != 0:
			out = append(out, e)
		}
	}
	return out
}

func (e exitRecord) String() string {
	how := fmt.Sprintf("exit code %d", e.code)
	if e.signal != "" {
		how = "killed by " + e.signal
	}
	why := e.requested
	if why == "" {
		why = "nobody asked"
	}
	return fmt.Sprintf("start %d ended (%s; %s) at %s, log %s", e.start, how, why, e.at.Format("15:04:05.000"), e.log)
}

// logLines counts, over every log file of the processes in dir, the lines
// at WARN or ERROR by level and message, for the report's evidence.
func logLines(dir string) (map[string]int, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		return nil, err
	}
	counts := map[string]int{}
	var errs []error
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			var line struct {
				Level string `json:"level"`
				Msg   string `json:"msg"`
			}
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				if s := strings.TrimSpace(sc.Text()); s != "" {
					counts["(not JSON) "+truncate(s, 120)]++
				}
				continue
			}
			if line.Level == "WARN" || line.Level == "ERROR" {
				counts[line.Level+" "+line.Msg]++
			}
		}
		errs = append(errs, sc.Err(), f.Close())
	}
	return counts, errors.Join(errs...)
}

// grepLogs returns up to max lines of the log files in dir containing s.
func grepLogs(dir, s string, max int) []string {
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	var out []string
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() && len(out) < max {
			if strings.Contains(sc.Text(), s) {
				out = append(out, filepath.Base(path)+": "+truncate(sc.Text(), 400))
			}
		}
		_ = f.Close()
	}
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// countLogMsg counts the log lines, over every process in dir, whose msg is
// msg.
func countLogMsg(dir, msg string) int {
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	n := 0
	needle := `"msg":` + strconvQuote(msg)
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			if strings.Contains(sc.Text(), needle) {
				n++
			}
		}
		_ = f.Close()
	}
	return n
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
