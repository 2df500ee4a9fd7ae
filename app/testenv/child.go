package testenv

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// KillChildAt runs this test binary again as a child process running only the
// test named test, with env added to its environment, waits (at most 60 s)
// for a line of its output that starts with prefix, kills the child with
// SIGKILL (no ack, no nack, no Close: a crash) and returns the rest of that
// line. Crash tests use it to kill a consumer in the middle of its work.
func KillChildAt(t testing.TB, test, prefix string, env ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("child %s: %v", test, err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child %s: %v", test, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), prefix); ok {
				select {
				case lines <- rest:
				default:
				}
			}
		}
	}()
	var rest string
	select {
	case rest = <-lines:
	case <-time.After(60 * time.Second):
		t.Fatalf("child %s never printed %q", test, prefix)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("kill child %s: %v", test, err)
	}
	_ = cmd.Wait()
	return rest
}
