package rabbitmq_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
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

// tcpProxy forwards TCP connections to a target (RabbitMQ) until the test
// ends, so that a test can cut them the way a dying process or a broken
// network would, without touching the broker.
type tcpProxy struct {
	t      testing.TB
	target string
	l      net.Listener
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  []net.Conn
	killed bool
}

// newTCPProxy listens on addr ("127.0.0.1:0" for any port) and forwards to
// target. It may run outside the test's goroutine: when it cannot listen it
// fails the test and returns nil.
func newTCPProxy(t testing.TB, addr, target string) *tcpProxy {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Errorf("proxy listen %s: %v", addr, err)
		return nil
	}
	p := &tcpProxy{t: t, target: target, l: l}
	t.Cleanup(p.kill)
	p.wg.Add(1)
	go p.accept()
	return p
}

// proxyURL returns amqpURL with its host replaced by a new tcpProxy's.
func proxyURL(t testing.TB, amqpURL string) (*tcpProxy, string) {
	t.Helper()
	u, err := url.Parse(amqpURL)
	require.NoError(t, err)
	p := newTCPProxy(t, "127.0.0.1:0", u.Host)
	if p == nil {
		t.FailNow()
	}
	u.Host = p.l.Addr().String()
	return p, u.String()
}

func (p *tcpProxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.mu.Lock()
		if p.killed {
			p.mu.Unlock()
			_ = in.Close()
			_ = out.Close()
			return
		}
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); _, _ = io.Copy(out, in); _ = out.Close() }()
		go func() { defer p.wg.Done(); _, _ = io.Copy(in, out); _ = in.Close() }()
	}
}

// kill closes every connection and stops accepting new ones: to the broker,
// the client is gone (as after kill -9), and the client cannot reconnect.
func (p *tcpProxy) kill() {
	p.mu.Lock()
	p.killed = true
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	_ = p.l.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
}

// closeConnectionsViaAPI closes every client connection in vhost with the
// management API (DELETE /api/connections/{name}), as an operator or a
// broker-side failure would: cheaper than rabbitmqctl, which boots an Erlang
// VM per call.
func closeConnectionsViaAPI(t *testing.T, amqpURL, vhost string) {
	t.Helper()
	u, err := url.Parse(amqpURL)
	require.NoError(t, err)
	api := "http://" + net.JoinHostPort(u.Hostname(), "15672") + "/api"
	user := u.User.Username()
	pass, _ := u.User.Password()
	do := func(method, path string) []byte {
		req, err := http.NewRequest(method, api+path, nil)
		require.NoError(t, err)
		req.SetBasicAuth(user, pass)
		req.Header.Set("X-Reason", "eventpipe test: dropping connections")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Less(t, resp.StatusCode, 300, "%s %s: %s", method, path, body)
		return body
	}
	// The API lists a connection a moment after it opens.
	var conns []struct {
		Name string `json:"name"`
	}
	require.Eventually(t, func() bool {
		require.NoError(t, json.Unmarshal(do(http.MethodGet, "/vhosts/"+url.PathEscape(vhost)+"/connections"), &conns))
		return len(conns) > 0
	}, 10*time.Second, 100*time.Millisecond, "no connection to close in vhost %s", vhost)
	for _, c := range conns {
		do(http.MethodDelete, "/connections/"+url.PathEscape(c.Name))
	}
}
