// Package realtime is the RealTime server of the StackUp RabbitMQ messaging
// contract (§5.12, §5.12-1..3, §5.13): it
// pushes the notifications of q.realtime.session.notify to browsers over
// Server-Sent Events, one stream per session, user or document channel.
//
// The pieces, in the order a notification passes them:
//
//   - the route is handlers/stackup/realtime's (the envelope and payload are
//     decoded and validated there; bad input is dead-lettered, §6); Server.Sink
//     is the Sink it delivers to;
//   - the Relay checks what the route cannot know (an unknown channel, an
//     oversized data field, an event type that would break the SSE framing),
//     then hands the event to the Bus, which brings it to every serve
//     instance (decision 0012: RabbitMQ fanout exchange with a queue per
//     instance, Postgres LISTEN/NOTIFY on SQS and Postgres, none needed on
//     the in-process broker);
//   - each instance's Hub fans the event out to its own SSE clients through
//     bounded buffers, and keeps a short window per channel for
//     Last-Event-ID resume;
//   - Handler serves GET /realtime/{sessions,users,documents}/{id} behind a
//     bearer JWT (HMACVerifier, HS256) and the demo page /realtime/demo.
//
// Volatile events (ANALYSIS_PROGRESS, SESSION_MESSAGE_DELTA,
// SESSION_MESSAGE_AUDIO, QUESTION_POOL_PROGRESS, FEEDBACK_PROGRESS) are fire
// and forget (§5.12-1..3): a failed fan-out only logs a warning and counts a
// metric, and a resume never replays them — their ids stay in the window so
// that a client that saw one still resumes at the right place.
package realtime

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
)

// Kind is a channel kind: what the id of a channel names.
type Kind string

// The channel kinds of §5.12 and §5.13, as handlers/stackup/realtime names
// them (Event.Channel).
const (
	Session  Kind = "session"
	User     Kind = "user"
	Document Kind = "document"
)

// kindByPath maps the URL segment to its kind.
var kindByPath = map[string]Kind{"sessions": Session, "users": User, "documents": Document}

// Valid reports a known kind.
func (k Kind) Valid() bool { return k == Session || k == User || k == Document }

// Channel is one SSE channel: a kind and the id of its session, user or
// document.
type Channel struct {
	Kind Kind  `json:"kind"`
	ID   int64 `json:"id"`
}

func (c Channel) String() string { return fmt.Sprintf("%s:%d", c.Kind, c.ID) }

// Event is one notification on its way to SSE clients, and the frame the Bus
// carries between instances.
type Event struct {
	Channel Channel `json:"channel"`
	// ID is the SSE id: the envelope's messageId, so that it means the same
	// on every instance (a client reconnecting through a load balancer to
	// another instance resumes there) and a redelivered notification is
	// recognised as a duplicate.
	ID string `json:"id"`
	// Type is payload.eventType, the SSE event field.
	Type string `json:"type"`
	// Data is payload.data, compact JSON ("null" when absent), the SSE data
	// field.
	Data    json.RawMessage `json:"data"`
	TraceID string          `json:"traceId,omitempty"`
	// Volatile marks a progress event: fire and forget, never replayed.
	Volatile bool `json:"volatile,omitempty"`
}

// VolatileTypes are the event types §5.12-1..3 and §5.13 call volatile
// (휘발성): progress that no database keeps and whose loss the UI absorbs.
//
// SESSION_MESSAGE_AUDIO (§5.12-2) has no constant in package catalog yet.
var VolatileTypes = []string{
	catalog.EventAnalysisProgress,
	catalog.EventMessageDelta,
	"SESSION_MESSAGE_AUDIO",
	catalog.EventPoolProgress,
	catalog.EventFeedbackProgress,
}

// IsVolatile reports whether eventType is one of VolatileTypes.
func IsVolatile(eventType string) bool { return slices.Contains(VolatileTypes, eventType) }
