package booking_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/handlers/booking"
)

// recorder keeps what it is given and passes it on to next, if any.
type recorder struct {
	mu    sync.Mutex
	msgs  []*message.Message
	topic []string
	fail  error
	next  message.Publisher
}

func (r *recorder) Publish(topic string, msgs ...*message.Message) error {
	r.mu.Lock()
	if r.fail != nil {
		r.mu.Unlock()
		return r.fail
	}
	for _, m := range msgs {
		r.msgs = append(r.msgs, m.Copy())
		r.topic = append(r.topic, topic)
	}
	r.mu.Unlock()
	if r.next != nil {
		return r.next.Publish(topic, msgs...)
	}
	return nil
}

func (r *recorder) Close() error { return nil }

func (r *recorder) sent() []*message.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*message.Message(nil), r.msgs...)
}

const clientEvent = `{"bookingSessionId":"bks_1","type":"step-completed","occurredAt":"2026-11-30T09:14:03.512Z","stepId":"pick-slot","data":{"b":1,"a":2}}`

// Both transports enqueue the same message for the same logical event.
func TestBothTransportsDeriveTheSameMessage(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	p := booking.Producer{Publisher: rec}
	srv := httptest.NewServer(p.HTTPHandler())
	defer srv.Close()

	res, err := http.Post(srv.URL, "application/json", strings.NewReader(clientEvent))
	require.NoError(t, err)
	defer func() { _ = res.Body.Close() }()
	require.Equal(t, http.StatusAccepted, res.StatusCode)
	var ack struct{ EventID string }
	require.NoError(t, json.NewDecoder(res.Body).Decode(&ack))

	// The socket's frame omits the session (it is the socket's) and orders
	// its data's keys differently.
	id, err := p.OnSocketEvent(context.Background(), "bks_1", []byte(`{"data":{"a":2,"b":1},"stepId":"pick-slot","type":"step-completed","occurredAt":"2026-11-30T10:14:03.512+01:00"}`))
	require.NoError(t, err)
	assert.Equal(t, ack.EventID, id)

	sent := rec.sent()
	require.Len(t, sent, 2)
	for i, m := range sent {
		assert.Equal(t, booking.Queue, rec.topic[i])
		assert.Equal(t, id, m.UUID, "message id = derived id")
		assert.Equal(t, id, m.Metadata.Get(metadata.DeduplicationIDKey))
		assert.Equal(t, "bks_1", m.Metadata.Get(metadata.GroupIDKey))
		require.NoError(t, booking.Validate(m.Payload))
	}
	assert.Equal(t, booking.TransportHTTP, sent[0].Metadata.Get(booking.TransportKey))
	assert.Equal(t, booking.TransportSocketIO, sent[1].Metadata.Get(booking.TransportKey))
	assert.Equal(t, string(sent[0].Payload), string(sent[1].Payload), "one body")
	ev, err := booking.Decode(sent[0].Payload)
	require.NoError(t, err)
	assert.Equal(t, id, ev.EventID, "the body carries the id")
}

func TestHTTPHandlerErrors(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	h := booking.Producer{Publisher: rec}.HTTPHandler()
	do := func(method, body string) int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(method, "/booking-session-events", strings.NewReader(body)))
		return w.Code
	}
	assert.Equal(t, http.StatusMethodNotAllowed, do(http.MethodGet, ""))
	for _, bad := range []string{``, `{`, `[]`, `{"type":"x","occurredAt":"2026-11-30T09:14:03Z"}`,
		strings.Replace(clientEvent, `"stepId"`, `"eventId":"mine","stepId"`, 1), // ids are derived, never taken
		strings.Replace(clientEvent, `"stepId"`, `"extra":1,"stepId"`, 1),
		strings.Replace(clientEvent, `"type":"step-completed"`, `"type":"Step Completed"`, 1),
		strings.Replace(clientEvent, `{"b":1,"a":2}`, `[1]`, 1)} {
		assert.Equal(t, http.StatusBadRequest, do(http.MethodPost, bad), bad)
	}
	assert.Equal(t, http.StatusRequestEntityTooLarge, do(http.MethodPost, `{"data":"`+strings.Repeat("x", broker.MaxPayloadBytes)+`"}`))
	rec.fail = errors.New("queue down")
	assert.Equal(t, http.StatusServiceUnavailable, do(http.MethodPost, clientEvent))
	assert.Empty(t, rec.sent())
}

func TestOnSocketEventRefusesAnotherSession(t *testing.T) {
	t.Parallel()
	_, err := booking.Producer{Publisher: &recorder{}}.OnSocketEvent(context.Background(), "bks_2", []byte(clientEvent))
	assert.ErrorIs(t, err, booking.ErrInvalidEvent)
}
