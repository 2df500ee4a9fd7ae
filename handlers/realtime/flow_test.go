package realtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/handlers/realtime"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/envelope"
)

var idSeq atomic.Int64

func init() { idSeq.Store(time.Now().UnixMilli() % 1_000_000_000 * 1000) }

// newID returns an id no other test uses (sessions, users and documents).
func newID() int64 { return idSeq.Add(1) }

func ptr(v int64) *int64 { return &v }

// notify publishes a notification as a Core or AI server would (strict
// encoding, routing publisher) and returns its messageId.
func (c *cluster) notify(t *testing.T, messageType string, ids envelope.Context, eventType string, data any) string {
	t.Helper()
	raw, err := json.Marshal(data)
	require.NoError(t, err)
	msg, topic, err := catalog.Default().Encode(context.Background(), catalog.Outgoing{
		Type: messageType, Publisher: envelope.PublisherCore, Context: ids,
		Payload: &catalog.NotifyV1{EventType: eventType, Data: raw},
	})
	require.NoError(t, err)
	require.NoError(t, c.pub.Publish(topic, msg))
	return msg.UUID
}

// publishRaw publishes an envelope our publishers would refuse (a foreign
// or buggy publisher's) to the realtime exchange with routing key
// messageType, and returns its messageId.
func (c *cluster) publishRaw(t *testing.T, messageType string, ids envelope.Context, payload string) string {
	t.Helper()
	env := envelope.Envelope{
		MessageID: envelope.NewID(), MessageType: messageType, Version: catalog.V1, TraceID: "trace-" + envelope.NewID(),
		PublishedAt: envelope.Now(time.Now()), Publisher: envelope.PublisherAI, Payload: json.RawMessage(payload), Context: ids,
	}
	msg, err := envelope.Marshal(context.Background(), env, "")
	require.NoError(t, err)
	require.NoError(t, c.pub.Publish(catalog.ExchangeRealtime+"/"+messageType, msg))
	return env.MessageID
}

func path(kind string, id int64) string { return fmt.Sprintf("/realtime/%s/%d", kind, id) }

func types(events []sseEvent) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.Type
	}
	return out
}

func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue metrics
				}
			}
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

// TestSSEOnEveryBroker runs the realtime flow end to end on each broker, with
// two serve instances behind the one realtime queue: a notification consumed
// by either instance reaches the SSE clients of both, on its channel only.
func TestSSEOnEveryBroker(t *testing.T) {
	t.Parallel()
	for _, k := range testbrokers.Kinds {
		kind := k.Name
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, kind, clusterOptions{instances: 2, clientBuffer: 4, maxData: 1024})
			a, b := c.instances[0], c.instances[1]
			t.Run("channels across two instances", func(t *testing.T) { testChannels(t, c, a, b) })
			t.Run("auth", func(t *testing.T) { testAuth(t, a) })
			t.Run("bad input", func(t *testing.T) { testBadInput(t, c, a, b) })
			t.Run("slow client", func(t *testing.T) { testSlowClient(t, c, a) })
			t.Run("resume", func(t *testing.T) { testResume(t, c, a, b) })
		})
	}
}

func testChannels(t *testing.T, c *cluster, a, b *instance) {
	// One number for all three kinds: a session, a user and a document with
	// the same id are still three channels.
	id := newID()
	tok := token(t, realtime.Claims{UserID: id, Sessions: []int64{id}, Documents: []int64{id}})
	sessA := open(t, a.http.URL, path("sessions", id), tok, "")
	sessB := open(t, b.http.URL, path("sessions", id), tok, "")
	userA := open(t, a.http.URL, path("users", id), tok, "")
	userB := open(t, b.http.URL, path("users", id), tok, "")
	docB := open(t, b.http.URL, path("documents", id), tok, "")

	q1 := c.notify(t, catalog.RealtimeSessionNotify, envelope.Context{SessionID: ptr(id), UserID: ptr(id)}, "question.created", map[string]any{"questionId": 1})
	u1 := c.notify(t, catalog.RealtimeUserNotify, envelope.Context{UserID: ptr(id)}, "DOC_STATE", map[string]any{"documentId": id, "state": "ANALYZED"})
	d1 := c.notify(t, catalog.RealtimeDocumentNotify, envelope.Context{DocumentID: ptr(id)}, "DOC_STATE", map[string]any{"state": "EMBEDDING"})
	p1 := c.notify(t, catalog.RealtimeSessionNotify, envelope.Context{SessionID: ptr(id)}, "FEEDBACK_PROGRESS", map[string]any{"sessionId": id, "phase": "SCORING", "completed": 2, "total": 5})

	for name, cl := range map[string]*sseClient{"session@a": sessA, "session@b": sessB} {
		got := cl.waitEvents(2)
		assert.ElementsMatch(t, []string{"question.created", "FEEDBACK_PROGRESS"}, types(got), name)
		for _, e := range got {
			switch e.Type {
			case "question.created":
				assert.Equal(t, q1, e.ID, name)
				assert.JSONEq(t, `{"questionId":1}`, e.Data, name)
			case "FEEDBACK_PROGRESS":
				assert.Equal(t, p1, e.ID, name)
				assert.JSONEq(t, fmt.Sprintf(`{"sessionId":%d,"phase":"SCORING","completed":2,"total":5}`, id), e.Data, name)
			}
		}
	}
	for name, cl := range map[string]*sseClient{"user@a": userA, "user@b": userB} {
		got := cl.waitEvents(1)
		assert.Equal(t, u1, got[0].ID, name)
		assert.Equal(t, "DOC_STATE", got[0].Type, name)
	}
	got := docB.waitEvents(1)
	assert.Equal(t, d1, got[0].ID)
	assert.JSONEq(t, `{"state":"EMBEDDING"}`, got[0].Data)

	// A fence on each channel, published last: once it is read, anything
	// misrouted or duplicated would have arrived before it.
	c.notify(t, catalog.RealtimeSessionNotify, envelope.Context{SessionID: ptr(id)}, "FENCE", nil)
	c.notify(t, catalog.RealtimeUserNotify, envelope.Context{UserID: ptr(id)}, "FENCE", nil)
	c.notify(t, catalog.RealtimeDocumentNotify, envelope.Context{DocumentID: ptr(id)}, "FENCE", nil)
	for name, want := range map[string]struct {
		cl *sseClient
		n  int
	}{"session@a": {sessA, 3}, "session@b": {sessB, 3}, "user@a": {userA, 2}, "user@b": {userB, 2}, "document@b": {docB, 2}} {
		got := waitFor(t, want.cl, "FENCE")
		assert.Len(t, got, want.n, "%s read %v", name, got)
	}
	assert.Equal(t, "null", waitFor(t, docB, "FENCE")[1].Data, "absent data is null")
}

// waitFor waits until cl has read an event of type typ and returns all.
func waitFor(t *testing.T, cl *sseClient, typ string) []sseEvent {
	t.Helper()
	for n := 1; ; n++ {
		got := cl.waitEvents(n)
		for _, e := range got {
			if e.Type == typ {
				return got
			}
		}
	}
}

// tamper changes one character in the middle of the signature.
func tamper(tok string) string {
	b := []byte(tok)
	i := len(b) - 10
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

func testAuth(t *testing.T, a *instance) {
	id := newID()
	other := newID()
	good := token(t, realtime.Claims{UserID: id, Sessions: []int64{id}, Documents: []int64{id}})
	otherSecret, err := realtime.MintToken([]byte(strings.Repeat("x", 40)), realtime.Claims{UserID: id, Sessions: []int64{id}, Expires: time.Now().Add(time.Hour).Unix()})
	require.NoError(t, err)
	expired := token(t, realtime.Claims{UserID: id, Sessions: []int64{id}, Expires: time.Now().Add(-time.Minute).Unix()})
	cases := []struct {
		name, path, token string
		want              int
	}{
		{"no token", path("sessions", id), "", http.StatusUnauthorized},
		{"garbage", path("sessions", id), "not-a-token", http.StatusUnauthorized},
		{"other secret", path("sessions", id), otherSecret, http.StatusUnauthorized},
		{"expired", path("sessions", id), expired, http.StatusUnauthorized},
		{"tampered", path("sessions", id), tamper(good), http.StatusUnauthorized},
		{"someone else's user channel", path("users", other), good, http.StatusForbidden},
		{"someone else's session", path("sessions", other), good, http.StatusForbidden},
		{"someone else's document", path("documents", other), good, http.StatusForbidden},
		{"bad id", "/realtime/sessions/abc", good, http.StatusBadRequest},
		{"zero id", "/realtime/sessions/0", good, http.StatusBadRequest},
		{"unknown kind", path("widgets", id), good, http.StatusNotFound},
	}
	for _, tc := range cases {
		resp := request(t, a.http.URL+tc.path, tc.token, "")
		_ = resp.Body.Close()
		assert.Equal(t, tc.want, resp.StatusCode, tc.name)
		if tc.want == http.StatusUnauthorized {
			assert.Contains(t, resp.Header.Get("WWW-Authenticate"), "Bearer", tc.name)
		}
	}
	assert.GreaterOrEqual(t, counter(t, a.reg, "eventpipe_realtime_auth_failures_total", map[string]string{"code": "401"}), 5.0)
	assert.GreaterOrEqual(t, counter(t, a.reg, "eventpipe_realtime_auth_failures_total", map[string]string{"code": "403"}), 3.0)

	// EventSource cannot send headers: the token also works as access_token.
	open(t, a.http.URL, path("users", id)+"?access_token="+good, "", "")
}

func testBadInput(t *testing.T, c *cluster, a, b *instance) {
	id := newID()
	tok := token(t, realtime.Claims{UserID: id, Sessions: []int64{id}, Documents: []int64{id}})
	dlq := testbrokers.Subscribe(t, c.probe, c.dlq)
	clients := []*sseClient{
		open(t, a.http.URL, path("sessions", id), tok, ""),
		open(t, b.http.URL, path("sessions", id), tok, ""),
		open(t, a.http.URL, path("users", id), tok, ""),
		open(t, b.http.URL, path("documents", id), tok, ""),
	}
	bad := map[string]string{
		// §5.12: context.sessionId is required (it names the channel).
		c.publishRaw(t, catalog.RealtimeSessionNotify, envelope.Context{UserID: ptr(id)}, `{"eventType":"question.created","data":{}}`): "no sessionId",
		c.publishRaw(t, catalog.RealtimeUserNotify, envelope.Context{SessionID: ptr(id)}, `{"eventType":"DOC_STATE","data":{}}`):        "no userId",
		// Routed by realtime.session.* to the queue, but not a channel.
		c.publishRaw(t, "realtime.session.broadcast", envelope.Context{SessionID: ptr(id), UserID: ptr(id)}, `{"eventType":"question.created","data":{}}`): "unknown channel",
		// The data field is over the limit (1 KiB in this cluster).
		c.publishRaw(t, catalog.RealtimeSessionNotify, envelope.Context{SessionID: ptr(id)}, `{"eventType":"SESSION_MESSAGE","data":{"text":"`+strings.Repeat("x", 2048)+`"}}`): "oversized data",
		// An eventType that would inject SSE fields.
		c.publishRaw(t, catalog.RealtimeSessionNotify, envelope.Context{SessionID: ptr(id)}, `{"eventType":"X\ndata: injected","data":{}}`): "event type with a line break",
	}
	good := c.notify(t, catalog.RealtimeSessionNotify, envelope.Context{SessionID: ptr(id)}, "SESSION_MESSAGE", map[string]any{"ok": true})
	fence := map[*sseClient]string{}
	fence[clients[2]] = c.notify(t, catalog.RealtimeUserNotify, envelope.Context{UserID: ptr(id)}, "FENCE", nil)
	fence[clients[3]] = c.notify(t, catalog.RealtimeDocumentNotify, envelope.Context{DocumentID: ptr(id)}, "FENCE", nil)

	// Every bad message is dead-lettered with its reason (§6: RealTime
	// nacks without requeue → DLX); none reaches a client.
	seen := map[string]bool{}
	deadline := time.After(45 * time.Second)
	for len(seen) < len(bad) {
		select {
		case msg := <-dlq:
			msg.Ack()
			if why, ok := bad[msg.UUID]; ok {
				seen[msg.UUID] = true
				t.Logf("dead-lettered (%s)", why)
			}
		case <-deadline:
			require.Failf(t, "not every bad message was dead-lettered", "dead-lettered %d of %d bad messages", len(seen), len(bad))
		}
	}
	for _, cl := range clients[:2] {
		got := waitFor(t, cl, "SESSION_MESSAGE")
		require.Len(t, got, 1, "only the good event: %v", got)
		assert.Equal(t, good, got[0].ID)
	}
	for _, cl := range clients[2:] {
		got := waitFor(t, cl, "FENCE")
		assert.Len(t, got, 1, "nothing but the fence: %v", got)
	}
	oversized := counter(t, a.reg, "eventpipe_realtime_events_rejected_total", map[string]string{"reason": "oversized_data"}) +
		counter(t, b.reg, "eventpipe_realtime_events_rejected_total", map[string]string{"reason": "oversized_data"})
	assert.GreaterOrEqual(t, oversized, 1.0, "oversized data is counted")
}

func testSlowClient(t *testing.T, c *cluster, a *instance) {
	id := newID()
	tok := token(t, realtime.Claims{UserID: id, Sessions: []int64{id}})
	stuck := a.srv.StuckClient(realtime.Channel{Kind: realtime.Session, ID: id})
	reader := open(t, a.http.URL, path("sessions", id), tok, "")
	// One at a time, each read before the next is sent: the reading client
	// is never behind, the stuck one falls behind its buffer of 4.
	for i := range 6 {
		c.notify(t, catalog.RealtimeSessionNotify, envelope.Context{SessionID: ptr(id)}, "SESSION_MESSAGE", map[string]any{"n": i})
		reader.waitEvents(i + 1)
	}
	select {
	case <-stuck:
	case <-time.After(30 * time.Second):
		require.FailNow(t, "the stuck client was not disconnected")
	}
	assert.GreaterOrEqual(t, counter(t, a.reg, "eventpipe_realtime_slow_clients_disconnected_total", map[string]string{"kind": "session"}), 1.0)
	got := reader.waitEvents(6)
	assert.Len(t, got, 6, "the reading client got everything")
}

func testResume(t *testing.T, c *cluster, a, b *instance) {
	id := newID()
	tok := token(t, realtime.Claims{UserID: id, Sessions: []int64{id}})
	// Observers on both instances: each event has reached both hubs before
	// the next is sent, so both windows hold them in order.
	observers := []*sseClient{open(t, a.http.URL, path("sessions", id), tok, ""), open(t, b.http.URL, path("sessions", id), tok, "")}
	first := open(t, a.http.URL, path("sessions", id), tok, "")
	send := func(typ string, n int) string {
		mid := c.notify(t, catalog.RealtimeSessionNotify, envelope.Context{SessionID: ptr(id)}, typ, map[string]any{"n": n})
		for _, o := range observers {
			o.waitEvents(n)
		}
		return mid
	}
	send("SESSION_MESSAGE", 1)
	e2 := send("SESSION_MESSAGE", 2)
	require.Len(t, first.waitEvents(2), 2)
	first.close()

	e3 := send("SESSION_MESSAGE", 3)
	send("SESSION_MESSAGE_DELTA", 4) // volatile: not replayed
	e5 := send("FEEDBACK_READY", 5)

	for name, inst := range map[string]*instance{"same instance": a, "other instance": b} {
		again := open(t, inst.http.URL, path("sessions", id), tok, e2)
		got := again.waitEvents(2)
		require.Len(t, got, 2, name)
		assert.Equal(t, []string{e3, e5}, []string{got[0].ID, got[1].ID}, name)
		assert.Equal(t, []string{"SESSION_MESSAGE", "FEEDBACK_READY"}, types(got), name)
	}

	miss := open(t, a.http.URL, path("sessions", id), tok, "not-in-the-window")
	miss.waitComment("resume-miss")
	events, _ := miss.snapshot()
	assert.Empty(t, events, "nothing replayed after a miss")
}

// TestFanoutReachesInstancesThatDidNotConsume: with only instance a
// consuming the realtime queue, the clients of instance b still receive
// every event — the bus, not the queue, reaches every instance (decision
// 0012). The in-process broker has no bus: its instances each consume.
func TestFanoutReachesInstancesThatDidNotConsume(t *testing.T) {
	t.Parallel()
	for _, k := range testbrokers.Kinds {
		kind := k.Name
		if kind == "memory" {
			continue
		}
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, kind, clusterOptions{instances: 3, consumers: 1})
			id := newID()
			tok := token(t, realtime.Claims{UserID: id, Sessions: []int64{id}})
			var clients []*sseClient
			for _, inst := range c.instances {
				clients = append(clients, open(t, inst.http.URL, path("sessions", id), tok, ""))
			}
			var ids []string
			for i := range 3 {
				ids = append(ids, c.notify(t, catalog.RealtimeSessionNotify, envelope.Context{SessionID: ptr(id)}, "SESSION_MESSAGE", map[string]any{"n": i}))
			}
			ids = append(ids, c.notify(t, catalog.RealtimeSessionNotify, envelope.Context{SessionID: ptr(id)}, "FENCE", nil))
			for i, cl := range clients {
				// SQS does not keep order: wait for the count, not the fence.
				got := cl.waitEvents(len(ids))
				var gotIDs []string
				for _, e := range got {
					gotIDs = append(gotIDs, e.ID)
				}
				assert.ElementsMatch(t, ids, gotIDs, "instance %d: every event exactly once", i)
			}
		})
	}
}
