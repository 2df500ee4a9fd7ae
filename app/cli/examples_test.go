package cli_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/cli"
	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/app/testenv"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// exampleMarkers are log lines that show each spec's sample traffic went
// through on the broker: one per spec and the demo.
var exampleMarkers = []string{
	`msg="greeting handled"`,
	`msg="interview settled"`,
	`msg="stackup analysis applied"`,
	`msg="disputes sample traffic: done"`,
	`msg="booking-session event applied"`,
	`msg="join-link generation dispatched"`,
}

// config/examples/<broker>.yaml runs every spec on its broker: serve starts
// from the file alone (plus the realtime secret and this test's isolation:
// its own vhost, queue prefix or schema, free ports), each spec's sample
// traffic goes through, and an interrupt stops it cleanly.
func TestExamplesRunEverySpecOnTheirBroker(t *testing.T) {
	// The AWS SDK reads its credentials from the process environment; the
	// emulator takes any.
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	// Secrets come from the process environment too (never from a file).
	t.Setenv("EVENTPIPE_REALTIME_TOKEN_SECRET", "examples-test-secret-of-at-least-32-bytes")
	for _, kind := range []string{"rabbitmq", "sqs", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			scope := testbrokers.Scope(t, "postgres")
			environ := []string{
				"EVENTPIPE_POSTGRES_DSN=" + testenv.PostgresDSN(t), "EVENTPIPE_POSTGRES_SCHEMA=" + scope,
				"EVENTPIPE_ADMIN_ADDR=127.0.0.1:0", "EVENTPIPE_REALTIME_ADDR=127.0.0.1:0", "EVENTPIPE_BOOKING_GATEWAY_ADDR=127.0.0.1:0",
				"EVENTPIPE_DISPUTES_API_ADDR=127.0.0.1:0", "EVENTPIPE_INTERVIEWS_API_ADDR=127.0.0.1:0",
			}
			switch kind {
			case "rabbitmq":
				environ = append(environ, "EVENTPIPE_RABBITMQ_URL="+testbrokers.Scope(t, "rabbitmq"))
			case "sqs":
				environ = append(environ, "EVENTPIPE_SQS_ENDPOINT="+testenv.SQSEndpoint(t),
					"EVENTPIPE_SQS_QUEUE_PREFIX="+strings.ReplaceAll(testbrokers.Scope(t, "sqs"), "_", "-")+"-")
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var stdout, stderr syncBuffer
			done := make(chan int, 1)
			go func() {
				done <- cli.Run(ctx, []string{"serve", "--config", "../../config/examples/" + kind + ".yaml"}, strings.NewReader(""), &stdout, &stderr, environ)
			}()
			var missing []string
			deadline := time.Now().Add(90 * time.Second)
			for time.Now().Before(deadline) {
				missing = missing[:0]
				log := stderr.String()
				for _, m := range exampleMarkers {
					if !strings.Contains(log, m) {
						missing = append(missing, m)
					}
				}
				if len(missing) == 0 {
					break
				}
				select {
				case code := <-done:
					require.Failf(t, "serve stopped", "exit %d before every spec ran:\n%s", code, stderr.String())
				case <-time.After(200 * time.Millisecond):
				}
			}
			assert.Empty(t, missing, "every spec's sample traffic went through on %s:\n%s", kind, stderr.String())
			assert.Contains(t, stderr.String(), "broker="+kind)
			cancel()
			select {
			case code := <-done:
				assert.Equal(t, cli.ExitOK, code, stderr.String())
			case <-time.After(60 * time.Second):
				require.Fail(t, "serve did not stop after the interrupt")
			}
			assert.NotContains(t, stderr.String(), "level=ERROR")
		})
	}
}
