package main_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var binary string

// TestMain compiles the real binary once for the whole package.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "eventpipe-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "eventpipe")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build eventpipe: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// lines collects a process's output and signals when a wanted line appears.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lines) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.WriteString(s + "\n")
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func start(t *testing.T, env []string, args ...string) (*exec.Cmd, *lines, <-chan error) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}, env...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	out := &lines{}
	done := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			out.add(sc.Text())
		}
		done <- cmd.Wait()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, out, done
}

// `make run`: the embedded default shows messages published and handled with
// their message and trace ids, and SIGINT drains and exits 0.
func TestServeDemoThenInterrupt(t *testing.T) {
	t.Parallel()
	cmd, out, done := start(t, []string{"EVENTPIPE_BROKER=memory", "EVENTPIPE_DEMO_ENABLED=true", "EVENTPIPE_DEMO_INTERVAL=50ms", "EVENTPIPE_ADMIN_ADDR=127.0.0.1:0"}, "serve")

	if !assert.Eventually(t, func() bool { return strings.Contains(out.String(), "msg=greeted") },
		20*time.Second, 50*time.Millisecond) {
		require.Failf(t, "no message flowed", "output:\n%s", out.String())
	}
	logs := out.String()
	assert.Contains(t, logs, "msg=\"greeting published\"")
	assert.Contains(t, logs, "msg=\"greeting handled\"")
	assert.Regexp(t, `msg="greeting handled" message_id=\S+ trace_id=[0-9a-f]{32}`, logs)

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	select {
	case err := <-done:
		require.NoError(t, err, "exit status after SIGINT; output:\n%s", out.String())
	case <-time.After(40 * time.Second):
		require.FailNow(t, "serve did not exit after SIGINT")
	}
	assert.Contains(t, out.String(), "eventpipe stopped cleanly")
}

// A broker that is unreachable at start is retried with a clear log line;
// SIGINT while waiting exits cleanly, without a panic.
func TestServeRetriesUnreachableBroker(t *testing.T) {
	t.Parallel()
	cmd, out, done := start(t, []string{"EVENTPIPE_BROKER=rabbitmq", "EVENTPIPE_RABBITMQ_URL=amqp://guest:guest@127.0.0.1:1/", "EVENTPIPE_ADMIN_ADDR="}, "serve")

	if !assert.Eventually(t, func() bool { return strings.Count(out.String(), "unreachable, retrying") >= 2 },
		30*time.Second, 100*time.Millisecond) {
		require.Failf(t, "no retry log line", "output:\n%s", out.String())
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	select {
	case err := <-done:
		require.NoError(t, err, "output:\n%s", out.String())
	case <-time.After(30 * time.Second):
		require.FailNow(t, "serve did not exit after SIGINT")
	}
	assert.NotContains(t, out.String(), "panic")
}

func TestInvalidConfigExitsTwo(t *testing.T) {
	t.Parallel()
	_, out, done := start(t, []string{"EVENTPIPE_BROKER=kafka", "EVENTPIPE_SQS_BATCH_SIZE=50"}, "serve")
	err := <-done
	var exitErr *exec.ExitError
	require.ErrorAs(t, err, &exitErr)
	assert.Equal(t, 2, exitErr.ExitCode())
	assert.Contains(t, out.String(), "broker.kind")
	assert.Contains(t, out.String(), "sqs.batch_size")
}
