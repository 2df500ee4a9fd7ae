package booking

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/jsonfields"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/msgctx"
)

// Producer is the single entry path both transports use: it derives the
// event id and enqueues the event on booking-session-events.fifo.
type Producer struct {
	Publisher message.Publisher
	// Queue defaults to Queue.
	Queue  string
	Logger *slog.Logger
}

func (p Producer) queue() string {
	if p.Queue != "" {
		return p.Queue
	}
	return Queue
}

func (p Producer) logger() *slog.Logger {
	if p.Logger != nil {
		return p.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// Enqueue derives ev's id (DeriveEventID: any EventID it has is replaced),
// encodes it strictly and publishes it with x-group-id = the booking session
// id and x-dedup-id = the event id, tagged with the transport. It returns the
// event as enqueued. Enqueuing the same logical event twice, from either
// transport, enqueues the same message id.
func (p Producer) Enqueue(ctx context.Context, transport string, ev Event) (Event, error) {
	ev.OccurredAt = ev.OccurredAt.UTC().Truncate(time.Millisecond)
	id, err := DeriveEventID(ev)
	if err != nil {
		return Event{}, err
	}
	ev.EventID = id
	msg, err := Message(ev)
	if err != nil {
		return Event{}, err
	}
	msg.Metadata.Set(TransportKey, transport)
	if tid := msgctx.TraceID(ctx); tid != "" {
		msg.Metadata.Set(metadata.TraceIDKey, tid)
	}
	msg.SetContext(ctx)
	if err := p.Publisher.Publish(p.queue(), msg); err != nil {
		return Event{}, fmt.Errorf("booking: enqueue %s on %s: %w", ev.EventID, p.queue(), err)
	}
	p.logger().DebugContext(ctx, "booking-session event enqueued", slog.String("event_id", ev.EventID),
		slog.String("booking_session_id", ev.BookingSessionID), slog.String("type", ev.Type), slog.String("transport", transport))
	return ev, nil
}

// input is what a client sends, on either transport: the event without its
// id (the platform derives it). Unknown fields are refused (strict on
// publish), eventId included.
type input struct {
	BookingSessionID string          `json:"bookingSessionId"`
	Type             string          `json:"type"`
	OccurredAt       time.Time       `json:"occurredAt"`
	StepID           string          `json:"stepId"`
	Data             json.RawMessage `json:"data"`
}

// ParseInput decodes a client's event strictly (unknown fields refused,
// bookingSessionId, type and occurredAt required, data an object or absent).
// Errors wrap ErrInvalidEvent.
func ParseInput(body []byte) (Event, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var in input
	if err := dec.Decode(&in); err != nil {
		return Event{}, invalid("%v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Event{}, invalid("trailing bytes after the event")
	}
	if in.BookingSessionID == "" || in.Type == "" || in.OccurredAt.IsZero() {
		return Event{}, invalid("bookingSessionId, type and occurredAt are required")
	}
	ev := Event{BookingSessionID: in.BookingSessionID, Type: in.Type, OccurredAt: in.OccurredAt, StepID: in.StepID, Data: in.Data}
	if _, err := canonicalData(ev.Data); err != nil {
		return Event{}, err
	}
	return ev, nil
}

// OnSocketEvent is the Socket.IO gateway's handler of a session event frame
// on the socket of booking session sessionID: payload is the event (as
// ParseInput takes it); its bookingSessionId, when present, must be the
// socket's. It returns the derived event id (the ack).
func (p Producer) OnSocketEvent(ctx context.Context, sessionID string, payload []byte) (string, error) {
	var probe struct {
		BookingSessionID *string `json:"bookingSessionId"`
	}
	_ = json.Unmarshal(payload, &probe)
	if probe.BookingSessionID == nil {
		obj, err := object(payload, "payload")
		if err != nil {
			return "", err
		}
		sid, _ := json.Marshal(sessionID)
		obj["bookingSessionId"] = sid
		payload, _ = json.Marshal(obj)
	} else if *probe.BookingSessionID != sessionID {
		return "", invalid("bookingSessionId %q is not the socket's session %q", jsonfields.Truncate(*probe.BookingSessionID, 64), jsonfields.Truncate(sessionID, 64))
	}
	ev, err := ParseInput(payload)
	if err != nil {
		return "", err
	}
	ev, err = p.Enqueue(ctx, TransportSocketIO, ev)
	if err != nil {
		return "", err
	}
	return ev.EventID, nil
}

// HTTPHandler is the HTTP controller: POST an event (ParseInput's JSON, at
// most broker.MaxPayloadBytes) → 202 {"eventId": …} once it is enqueued
// (not yet applied); {"error": …} with 400 for an invalid event, 405 for
// another method, 413 for a larger body (or one whose encoded message would
// be), 503 when the queue refuses it. serve mounts it on HTTPPath when
// booking.gateway_addr is set (Gateway).
func (p Producer) HTTPHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method not allowed"})
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, broker.MaxPayloadBytes))
		if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
			writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": "body too large"})
			return
		}
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "reading the body: " + err.Error()})
			return
		}
		ev, err := ParseInput(body)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		ev, err = p.Enqueue(r.Context(), TransportHTTP, ev)
		if err != nil {
			status, msg := statusOf(err), err.Error()
			if status == http.StatusServiceUnavailable {
				p.logger().ErrorContext(r.Context(), "booking-session event not enqueued", slog.Any("error", err))
				msg = "event not enqueued, retry"
			}
			writeJSON(w, status, map[string]string{"error": msg})
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]string{"eventId": ev.EventID})
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
