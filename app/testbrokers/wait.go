package testbrokers

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Logger returns a logger that writes to the test's log (shown on failure
// or with -v), at debug level.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Eventually waits until cond holds, checking every 50 ms, and fails the
// test naming what when timeout passes first.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// NoMessage fails the test if msgs yields a message within d (acking it,
// so it does not come back).
func NoMessage(t testing.TB, msgs <-chan *message.Message, d time.Duration, what string) {
	t.Helper()
	select {
	case m := <-msgs:
		if m != nil {
			m.Ack()
			t.Fatalf("%s: got message %s", what, m.UUID)
		}
	case <-time.After(d):
	}
}
