package rabbitmq_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/rabbitmq"
	"github.com/eventpipe/eventpipe/app/testenv"
)

// rabbitmqctl and newVhost are testenv's, named as this package's tests
// always called them.
func rabbitmqctl(t testing.TB, args ...string) string { return testenv.RabbitMQCtl(t, args...) }

func newVhost(t testing.TB) (amqpURL, vhost string) { return testenv.RabbitMQVhost(t) }

// dropConnections makes RabbitMQ close every client connection in vhost, as
// a network failure or broker-side kill would; the broker stays up.
func dropConnections(t *testing.T, vhost string) {
	t.Helper()
	rabbitmqctl(t, "close_all_connections", "-p", vhost, "eventpipe test: dropping connections")
}

// newPubSub connects to amqpURL, with optional changes to the default
// configuration, and closes the broker when the test ends.
func newPubSub(t testing.TB, amqpURL string, change func(*rabbitmq.Config)) *rabbitmq.PubSub {
	t.Helper()
	cfg := rabbitmq.Config{URL: amqpURL}
	if change != nil {
		change(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ps, err := rabbitmq.New(ctx, cfg, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ps.Close() })
	return ps
}

// logLine is one line a recordingLogger saw.
type logLine struct {
	level  string
	msg    string
	err    error
	fields watermill.LogFields
}

// recordingLogger keeps every log line so that a test can check what an
// operator would read.
type recordingLogger struct {
	mu     *sync.Mutex
	lines  *[]logLine
	fields watermill.LogFields
}

func newRecordingLogger() recordingLogger {
	return recordingLogger{mu: &sync.Mutex{}, lines: &[]logLine{}}
}

func (l recordingLogger) add(level, msg string, err error, fields watermill.LogFields) {
	l.mu.Lock()
	defer l.mu.Unlock()
	*l.lines = append(*l.lines, logLine{level, msg, err, l.fields.Add(fields)})
}

func (l recordingLogger) Error(msg string, err error, fields watermill.LogFields) {
	l.add("error", msg, err, fields)
}
func (l recordingLogger) Info(msg string, fields watermill.LogFields) {
	l.add("info", msg, nil, fields)
}
func (l recordingLogger) Debug(msg string, fields watermill.LogFields) {
	l.add("debug", msg, nil, fields)
}
func (l recordingLogger) Trace(msg string, fields watermill.LogFields) {
	l.add("trace", msg, nil, fields)
}
func (l recordingLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return recordingLogger{mu: l.mu, lines: l.lines, fields: l.fields.Add(fields)}
}

// find returns the lines whose message is msg.
func (l recordingLogger) find(msg string) []logLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []logLine
	for _, line := range *l.lines {
		if line.msg == msg {
			out = append(out, line)
		}
	}
	return out
}

func (l logLine) String() string {
	return fmt.Sprintf("%s %q err=%v %v", l.level, l.msg, l.err, l.fields)
}
