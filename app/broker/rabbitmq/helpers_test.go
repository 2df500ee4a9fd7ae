package rabbitmq_test

import (
	"bytes"
	"context"
	"encoding/binary"
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
	"github.com/stretchr/testify/assert"
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
// network would, or block them the way RabbitMQ does under a resource alarm,
// without touching the broker.
type tcpProxy struct {
	t      testing.TB
	target string
	l      net.Listener
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  []*proxiedConn
	killed bool
}

// proxiedConn is one client connection and its connection to the target.
type proxiedConn struct {
	client, server net.Conn
	// writeMu keeps injected frames between the server's frames.
	writeMu sync.Mutex

	// serverMu keeps held frames in order with new ones.
	serverMu sync.Mutex

	mu        sync.Mutex
	blocking  string   // the reason while a resource alarm is simulated
	blocked   bool     // connection.blocked sent: the client published
	held      [][]byte // the frames the "broker" has not read while blocked
	handshake []byte   // the client's first bytes: its connection properties
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
		c := &proxiedConn{client: in, server: out}
		p.mu.Lock()
		if p.killed {
			p.mu.Unlock()
			c.close()
			return
		}
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); c.clientToServer() }()
		go func() { defer p.wg.Done(); c.serverToClient() }()
	}
}

// clientToServer forwards the client's frames. Under a simulated alarm it
// does what RabbitMQ does: it goes on reading until the client publishes,
// then sends connection.blocked and passes nothing more until the alarm
// clears — except heartbeats: RabbitMQ does not read a blocked connection,
// but it does not drop it for missed heartbeats either.
func (c *proxiedConn) clientToServer() {
	defer c.close()
	protocolHeader := make([]byte, 8)
	if _, err := io.ReadFull(c.client, protocolHeader); err != nil {
		return
	}
	c.record(protocolHeader)
	if err := c.writeToServer(protocolHeader); err != nil {
		return
	}
	for {
		frame, err := readFrame(c.client)
		if err != nil {
			return
		}
		c.record(frame)
		if c.hold(frame) {
			continue
		}
		if err := c.writeToServer(frame); err != nil {
			return
		}
	}
}

// hold keeps frame from the server if the connection is blocked (or this
// publish blocks it).
func (c *proxiedConn) hold(frame []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.blocking != "" && !c.blocked && isBasicPublish(frame) {
		c.blocked = true
		reason := c.blocking
		go func() { _ = c.writeToClient(connectionMethodFrame(60, append([]byte{byte(len(reason))}, reason...))) }()
	}
	const heartbeat = 8
	if !c.blocked || frame[0] == heartbeat {
		return false
	}
	c.held = append(c.held, frame)
	return true
}

func (c *proxiedConn) writeToServer(frame []byte) error {
	c.serverMu.Lock()
	defer c.serverMu.Unlock()
	_, err := c.server.Write(frame)
	return err
}

func (c *proxiedConn) record(b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.handshake) < 4<<10 {
		c.handshake = append(c.handshake, b...)
	}
}

// readFrame reads one AMQP frame: type, channel, payload size, payload, end.
func readFrame(r io.Reader) ([]byte, error) {
	header := make([]byte, 7)
	if _, err := io.ReadFull(r, header); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(header[3:])
	frame := make([]byte, 7+int(size)+1)
	copy(frame, header)
	_, err := io.ReadFull(r, frame[7:])
	return frame, err
}

// isBasicPublish reports whether frame is the method frame of basic.publish
// (class 60, method 40).
func isBasicPublish(frame []byte) bool {
	return len(frame) >= 11 && frame[0] == 1 &&
		binary.BigEndian.Uint16(frame[7:]) == 60 && binary.BigEndian.Uint16(frame[9:]) == 40
}

// serverToClient forwards the server's AMQP frames one by one, so that
// frames can be injected between them.
func (c *proxiedConn) serverToClient() {
	defer c.close()
	for {
		frame, err := readFrame(c.server)
		if err != nil {
			return
		}
		if err := c.writeToClient(frame); err != nil {
			return
		}
	}
}

func (c *proxiedConn) writeToClient(frame []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	_, err := c.client.Write(frame)
	return err
}

// setBlocking starts (reason) or ends ("") a simulated alarm. Ending it
// passes on the frames held, then tells the client it is unblocked.
func (c *proxiedConn) setBlocking(reason string) {
	c.serverMu.Lock()
	defer c.serverMu.Unlock()
	c.mu.Lock()
	wasBlocked := c.blocked
	held := c.held
	c.blocking = reason
	if reason == "" {
		c.blocked, c.held = false, nil
	}
	c.mu.Unlock()
	if reason != "" || !wasBlocked {
		return
	}
	for _, frame := range held {
		if _, err := c.server.Write(frame); err != nil {
			return
		}
	}
	_ = c.writeToClient(connectionMethodFrame(61, nil))
}

func (c *proxiedConn) close() {
	_ = c.client.Close()
	_ = c.server.Close()
}

// connectionMethodFrame is an AMQP method frame of the connection class on
// channel 0 (method 60 connection.blocked, 61 connection.unblocked).
func connectionMethodFrame(method uint16, args []byte) []byte {
	payload := binary.BigEndian.AppendUint16(nil, 10)
	payload = binary.BigEndian.AppendUint16(payload, method)
	payload = append(payload, args...)
	frame := []byte{1, 0, 0}
	frame = binary.BigEndian.AppendUint32(frame, uint32(len(payload)))
	frame = append(frame, payload...)
	return append(frame, 0xCE)
}

// block simulates a memory or disk alarm on the connections whose handshake
// contains name (a connection name, e.g. "eventpipe publish"), as RabbitMQ
// treats a connection under an alarm: the next time it publishes, the broker
// sends connection.blocked with reason and stops reading from it. It returns
// how many connections it blocks.
func (p *tcpProxy) block(name, reason string) int {
	conns := p.matching(name)
	for _, c := range conns {
		c.setBlocking(reason)
	}
	return len(conns)
}

// unblock clears the alarm: connection.unblocked to the connections told
// they were blocked, and reading resumes.
func (p *tcpProxy) unblock(name string) {
	for _, c := range p.matching(name) {
		c.setBlocking("")
	}
}

func (p *tcpProxy) matching(name string) []*proxiedConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*proxiedConn
	for _, c := range p.conns {
		c.mu.Lock()
		if bytes.Contains(c.handshake, []byte(name)) {
			out = append(out, c)
		}
		c.mu.Unlock()
	}
	return out
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
		c.close()
	}
	p.wg.Wait()
}

// closeConnectionsViaAPI closes every client connection in vhost with the
// management API (DELETE /api/connections/{name}), as an operator or a
// broker-side failure would: cheaper than rabbitmqctl, which boots an Erlang
// VM per call.
func closeConnectionsViaAPI(t *testing.T, amqpURL, vhost string, want int) {
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
	// The API lists a connection a moment after it opens: wait until it
	// lists every one the caller opened, or some would stay up.
	var conns []struct {
		Name string `json:"name"`
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		if assert.NoError(c, json.Unmarshal(do(http.MethodGet, "/vhosts/"+url.PathEscape(vhost)+"/connections"), &conns)) {
			assert.GreaterOrEqual(c, len(conns), want)
		}
	}, 10*time.Second, 100*time.Millisecond, "fewer than %d connections to close in vhost %s", want, vhost)
	for _, c := range conns {
		do(http.MethodDelete, "/connections/"+url.PathEscape(c.Name))
	}
}
