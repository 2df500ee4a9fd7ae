// Package realtime is the RealTime server's consumer of the StackUp
// contract: q.realtime.session.notify, bound to realtime.session.*,
// realtime.user.* and realtime.document.* (§5.12, §5.13). Each notification
// goes to a Sink (the SSE fan-out) on the channel its messageType names.
// Notifications are volatile: a Sink error is retried in process, then the
// message is dead-lettered (§6 RealTime: nack without requeue → DLX).
package realtime

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
)

// Queue is the realtime fan-out queue.
const Queue = "q.realtime.session.notify"

// RouteName is the realtime route's name.
const RouteName = "stackup-realtime-notify"

// Event is one notification for SSE subscribers.
type Event struct {
	// Channel is session, user or document; ID is that channel's id.
	Channel   string
	ID        int64
	EventType string
	Data      json.RawMessage
	MessageID string
	TraceID   string
}

// Sink delivers events to subscribers.
type Sink interface {
	Deliver(ctx context.Context, e Event) error
}

// LogSink logs every event: the embedded mode's stand-in for SSE.
type LogSink struct{ Logger *slog.Logger }

// Deliver implements Sink.
func (s LogSink) Deliver(ctx context.Context, e Event) error {
	s.Logger.InfoContext(ctx, "stackup realtime event", slog.String("message_id", e.MessageID), slog.String("trace_id", e.TraceID),
		slog.String("queue", Queue), slog.String("channel", e.Channel), slog.Int64("channel_id", e.ID), slog.String("event_type", e.EventType))
	return nil
}

// Route returns the realtime route. versions adds further versions of the
// notification types (§7: v2 beside v1), each delivered as its v1 payload.
func Route(cat catalog.Catalog, top topology.Topology, retry catalog.Retry, versions map[string][]catalog.Version, sink Sink, logger *slog.Logger) (route.Route, error) {
	policy, err := catalog.PolicyFor(top, Queue, retry)
	if err != nil {
		return route.Route{}, err
	}
	if cat, err = cat.WithVersions(versions); err != nil {
		return route.Route{}, fmt.Errorf("stackup realtime: %w", err)
	}
	deliver := func(ctx context.Context, d catalog.Delivery) error {
		n := d.Payload.(*catalog.NotifyV1)
		e := Event{EventType: n.EventType, Data: n.Data, MessageID: d.Envelope.MessageID, TraceID: d.Envelope.TraceID}
		c := d.Envelope.Context
		switch d.Envelope.MessageType {
		case catalog.RealtimeSessionNotify:
			e.Channel, e.ID = "session", *c.SessionID
		case catalog.RealtimeUserNotify:
			e.Channel, e.ID = "user", *c.UserID
		default:
			e.Channel, e.ID = "document", *c.DocumentID
		}
		return sink.Deliver(ctx, e)
	}
	// A notification is relayed to the sink in milliseconds.
	c := catalog.Consumer{Name: RouteName, Queue: Queue, Catalog: cat, Policy: policy, Timeout: 10 * time.Second, Logger: logger, Handlers: map[string]map[string]catalog.Handler{}}
	for _, t := range cat.ByQueue(Queue) {
		c.Handlers[t.Name] = map[string]catalog.Handler{catalog.V1: deliver}
	}
	if err := catalog.AddVersions(c.Handlers, versions); err != nil {
		return route.Route{}, fmt.Errorf("stackup realtime: %w", err)
	}
	r := c.Route()
	// One at a time, so a session's notifications reach its subscribers in
	// the order they were published: a follow-up's SESSION_MESSAGE_DELTAs
	// spell its text in seq order (§5.12). Each takes milliseconds, so the
	// queue loses little by it.
	r.Concurrency = 1
	return r, nil
}
