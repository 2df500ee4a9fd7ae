package booking_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/handlers/booking"
)

// post sends body to the gateway's HTTP controller and decodes the JSON
// answer.
func post(t *testing.T, base, body string) (int, map[string]any) {
	t.Helper()
	res, err := http.Post(base+booking.HTTPPath, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer func() { _ = res.Body.Close() }()
	assert.Equal(t, "application/json", res.Header.Get("Content-Type"))
	var answer map[string]any
	require.NoError(t, json.NewDecoder(res.Body).Decode(&answer), "a JSON answer")
	return res.StatusCode, answer
}

// The HTTP controller as the gateway serves it: 202 with the derived id for
// an event, a JSON error with 400 for a malformed or invalid one, 413 for
// one too large to enqueue; nothing enqueued but the good one.
func TestGatewayHTTP(t *testing.T) {
	t.Parallel()
	ps := testbrokers.New(t, "memory", "")
	rec := &recorder{next: ps}
	gw := booking.NewGateway(booking.Producer{Publisher: rec})
	t.Cleanup(gw.Close)
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(srv.Close)

	status, answer := post(t, srv.URL, clientEvent)
	require.Equal(t, http.StatusAccepted, status, answer)
	ev, err := booking.ParseInput([]byte(clientEvent))
	require.NoError(t, err)
	want, err := booking.DeriveEventID(ev)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"eventId": want}, answer)

	// Just under the body limit, but its message (eventId added) is over
	// the broker's: 413, not a 503 that a client would retry forever.
	nearly := `{"bookingSessionId":"bks_1","type":"step-completed","occurredAt":"2026-11-30T09:14:03.512Z","data":{"blob":"` +
		strings.Repeat("x", broker.MaxPayloadBytes-120) + `"}}`
	require.Less(t, len(nearly), broker.MaxPayloadBytes)
	for _, c := range []struct {
		name, body string
		status     int
		error      string
	}{
		{"not JSON", `{"bookingSessionId":`, http.StatusBadRequest, "invalid booking-session event"},
		{"not an object", `["step-completed"]`, http.StatusBadRequest, "invalid booking-session event"},
		{"missing type", `{"bookingSessionId":"bks_1","occurredAt":"2026-11-30T09:14:03Z"}`, http.StatusBadRequest, "bookingSessionId, type and occurredAt are required"},
		{"an id of its own", strings.Replace(clientEvent, `"stepId"`, `"eventId":"mine","stepId"`, 1), http.StatusBadRequest, `unknown field "eventId"`},
		{"data not an object", strings.Replace(clientEvent, `{"b":1,"a":2}`, `"x"`, 1), http.StatusBadRequest, "data is not a JSON object"},
		{"body over 1 MiB", `{"data":"` + strings.Repeat("x", broker.MaxPayloadBytes) + `"}`, http.StatusRequestEntityTooLarge, "body too large"},
		{"message over 1 MiB", nearly, http.StatusRequestEntityTooLarge, "exceeds the 1048576-byte limit"},
	} {
		status, answer := post(t, srv.URL, c.body)
		assert.Equal(t, c.status, status, c.name)
		assert.Contains(t, answer["error"], c.error, c.name)
	}
	assert.Len(t, rec.sent(), 2, "the good event, and the one the broker refused as too large")

	res, err := http.Get(srv.URL + booking.HTTPPath)
	require.NoError(t, err)
	_ = res.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, res.StatusCode)
}

// peerResult is what testdata/node/peer.js prints.
type peerResult struct {
	Connected    bool             `json:"connected"`
	Transport    string           `json:"transport"`
	ConnectError string           `json:"connectError"`
	Error        string           `json:"error"`
	Acks         []map[string]any `json:"acks"`
}

type emit struct {
	Event string `json:"event"`
	Args  []any  `json:"args"`
}

// peerPlan is one run of testdata/node/peer.js.
type peerPlan struct {
	url string
	// namespace defaults to booking.SocketNamespace.
	namespace string
	// session goes in the handshake's auth, unless empty.
	session string
	// transport is websocket or polling; the client's default when empty.
	transport string
	emits     []emit
}

// peer runs the npm socket.io-client against the gateway
// (testdata/node/peer.js). The client must be installed
// (.ci/socketio-client, which make test runs first): a missing one fails the
// test, here as under CI — it is never skipped.
func peer(t *testing.T, p peerPlan) peerResult {
	t.Helper()
	dir := filepath.Join("testdata", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "socket.io-client", "package.json")); err != nil {
		require.FailNow(t, "the npm socket.io-client is not installed", "run .ci/socketio-client (make test does): %v", err)
	}
	node, err := exec.LookPath("node")
	require.NoError(t, err, "node is needed for the Socket.IO interop tests")
	if p.namespace == "" {
		p.namespace = booking.SocketNamespace
	}
	plan := map[string]any{"url": p.url, "namespace": p.namespace, "emits": p.emits, "timeoutMs": 10000}
	if p.session != "" {
		plan["auth"] = map[string]any{booking.SocketAuthSessionKey: p.session}
	}
	if p.transport != "" {
		plan["transports"] = []string{p.transport}
	}
	stdin, err := json.Marshal(plan)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "peer.js")
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "peer.js: %s%s", out, stderr.String())
	var res peerResult
	require.NoError(t, json.Unmarshal(out, &res), "peer.js printed %q", out)
	require.Empty(t, res.Error, "peer.js")
	return res
}

// The same logical event sent by the widget over HTTP and over Socket.IO
// (the npm client, on each Engine.IO transport) derives one id, is
// delivered twice and applied once: the inbox collapses it.
func TestGatewayBothTransportsOneEffect(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{"websocket", "polling"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			ps := testbrokers.New(t, "memory", "")
			store := booking.NewMemory()
			fx := &effects{Store: store}
			handled := &deliveries{byID: map[string]int{}}
			routes := booking.Handlers{Store: fx, Inbox: inbox.NewMemory()}.Routes()
			routes[0].Handle = handled.wrap(routes[0].Handle)
			testbrokers.StartRoutes(t, ps, nil, nil, routes...)
			gw := booking.NewGateway(booking.Producer{Publisher: ps})
			t.Cleanup(gw.Close)
			srv := httptest.NewServer(gw.Handler())
			t.Cleanup(srv.Close)

			sid := session(t)
			status, answer := post(t, srv.URL, `{"bookingSessionId":"`+sid+`","type":"step-completed","occurredAt":"2026-11-30T09:14:03.512Z","stepId":"pick-slot","data":{"slot":"10:00","durationMinutes":30}}`)
			require.Equal(t, http.StatusAccepted, status, answer)
			id, _ := answer["eventId"].(string)
			require.True(t, booking.IsEventID(id), answer)

			// The socket's copy: its session from the handshake, other key
			// order, another UTC offset, 30.0 for 30.
			res := peer(t, peerPlan{url: srv.URL, session: sid, transport: transport, emits: []emit{{Event: booking.SocketEvent, Args: []any{map[string]any{
				"data": map[string]any{"durationMinutes": 30.0, "slot": "10:00"}, "stepId": "pick-slot",
				"occurredAt": "2026-11-30T10:14:03.512+01:00", "type": "step-completed",
			}}}}})
			require.True(t, res.Connected, res)
			assert.Equal(t, transport, res.Transport)
			require.Equal(t, []map[string]any{{"eventId": id}}, res.Acks, "one id on both transports")

			testbrokers.Eventually(t, 10*time.Second, "both copies delivered", func() bool { return handled.of(id) == 2 })
			time.Sleep(200 * time.Millisecond)
			assert.Equal(t, int64(1), fx.applied.Load(), "one effect")
			evs, err := store.Events(context.Background(), sid)
			require.NoError(t, err)
			require.Len(t, evs, 1)
			assert.Equal(t, id, evs[0].EventID)
		})
	}
}

// Bad input over Socket.IO is answered with an error ack, the socket stays
// usable, nothing bad is enqueued; a socket without a session, or on the
// main namespace, is refused at the handshake.
func TestGatewaySocketIOErrors(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	gw := booking.NewGateway(booking.Producer{Publisher: rec})
	t.Cleanup(gw.Close)
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(srv.Close)
	sid := session(t)
	good := map[string]any{"type": "booking-completed", "occurredAt": "2026-11-30T09:14:03.512Z"}
	huge := map[string]any{"type": "booking-completed", "occurredAt": "2026-11-30T09:14:03.512Z",
		"data": map[string]any{"blob": strings.Repeat("x", broker.MaxPayloadBytes)}}
	for _, transport := range []string{"websocket", "polling"} {
		res := peer(t, peerPlan{url: srv.URL, session: sid, transport: transport, emits: []emit{
			{Event: booking.SocketEvent, Args: []any{`{"type":"booking-completed"`}},
			{Event: booking.SocketEvent, Args: []any{map[string]any{"type": "booking-completed"}}},
			{Event: booking.SocketEvent, Args: []any{map[string]any{"type": "booking-completed", "occurredAt": "2026-11-30T09:14:03.512Z", "eventId": "mine"}}},
			{Event: booking.SocketEvent, Args: []any{map[string]any{"bookingSessionId": "bks_other", "type": "booking-completed", "occurredAt": "2026-11-30T09:14:03.512Z"}}},
			{Event: booking.SocketEvent},
			{Event: booking.SocketEvent, Args: []any{good, good}},
			{Event: "booking-completed", Args: []any{good}},
			{Event: booking.SocketEvent, Args: []any{huge}},
			{Event: booking.SocketEvent, Args: []any{good}},
		}})
		require.True(t, res.Connected, res)
		require.Len(t, res.Acks, 9, transport)
		for i, want := range []struct {
			status float64
			error  string
		}{
			{400, "the event must be a JSON object"},
			{400, "bookingSessionId, type and occurredAt are required"},
			{400, `unknown field "eventId"`},
			{400, "is not the socket's session"},
			{400, "takes one argument, the event; got 0"},
			{400, "takes one argument, the event; got 2"},
			{400, `unknown event "booking-completed": emit session-event`},
			{413, "event too large"},
		} {
			assert.Equal(t, want.status, res.Acks[i]["status"], "%s ack %d: %v", transport, i, res.Acks[i])
			assert.Contains(t, res.Acks[i]["error"], want.error, "%s ack %d", transport, i)
			assert.NotContains(t, res.Acks[i], "eventId")
		}
		assert.True(t, booking.IsEventID(res.Acks[8]["eventId"].(string)), "%s: the socket still works: %v", transport, res.Acks[8])
	}
	sent := rec.sent()
	require.Len(t, sent, 2, "only the good event, once per transport")
	assert.Equal(t, sent[0].UUID, sent[1].UUID)

	res := peer(t, peerPlan{url: srv.URL, transport: "websocket", emits: []emit{{Event: booking.SocketEvent, Args: []any{good}}}})
	assert.Contains(t, res.ConnectError, "auth.bookingSessionId is required")
	res = peer(t, peerPlan{url: srv.URL, namespace: "/", session: sid})
	assert.Contains(t, res.ConnectError, "connect to the namespace /booking-session")
}

// Close disconnects the sockets and refuses new ones and their events;
// the HTTP controller is the HTTP server's to stop.
func TestGatewayClose(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	gw := booking.NewGateway(booking.Producer{Publisher: rec})
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(srv.Close)
	gw.Close()
	gw.Close() // idempotent
	res := peer(t, peerPlan{url: srv.URL, session: session(t), transport: "polling",
		emits: []emit{{Event: booking.SocketEvent, Args: []any{map[string]any{"type": "booking-completed", "occurredAt": "2026-11-30T09:14:03.512Z"}}}}})
	assert.Contains(t, res.ConnectError, "shutting down")
	assert.Empty(t, rec.sent())

	// The controller itself still answers (the server is not shut down).
	res2, err := http.Post(srv.URL+booking.HTTPPath, "application/json", strings.NewReader(`{`))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res2.Body)
	_ = res2.Body.Close()
	assert.Equal(t, http.StatusBadRequest, res2.StatusCode)
}
