package booking

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/zishang520/socket.io/servers/socket/v3"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/jsonfields"
)

// Where the gateway takes the widget's events. The spec names the two
// transports but no path, namespace or event name: these are eventpipe's.
const (
	// HTTPPath is the HTTP controller's endpoint: POST an event.
	HTTPPath = "/booking-session/events"
	// SocketIOPath is the Engine.IO endpoint, socket.io-client's default.
	SocketIOPath = "/socket.io/"
	// SocketNamespace is the Socket.IO namespace of booking sessions. A
	// socket names its session in the handshake: auth.bookingSessionId.
	SocketNamespace = "/booking-session"
	// SocketEvent is the event a socket emits with one event as its
	// argument; the ack is {"eventId": …} or {"error": …, "status": …}.
	SocketEvent = "session-event"
	// SocketAuthSessionKey is the handshake auth field naming the socket's
	// booking session.
	SocketAuthSessionKey = "bookingSessionId"
)

// socketFrameLimit is the largest Engine.IO message the server reads. It is
// above broker.MaxPayloadBytes so that an event a little too large gets an
// error ack (413) rather than a dropped connection; past it the library
// closes the connection (WebSocket) or answers 413 (polling).
const socketFrameLimit = broker.MaxPayloadBytes + 64<<10

// socketEventTimeout bounds one Socket.IO event's enqueue: unlike an HTTP
// request it has no request context to end with the client.
const socketEventTimeout = 10 * time.Second

// Gateway is the widget's entry path as a server: the HTTP controller
// (Producer.HTTPHandler on HTTPPath) and a Socket.IO v4 server
// (SocketNamespace, SocketEvent → Producer.OnSocketEvent) on one handler,
// both enqueueing through the one Producer. Build it with NewGateway; Close
// it before the publisher closes.
type Gateway struct {
	producer Producer
	io       *socket.Server
	handler  http.Handler

	// mu orders begin against Close: no event starts once closing is set,
	// so inflight.Wait sees every event that did.
	mu        sync.Mutex
	closing   bool
	inflight  sync.WaitGroup
	closeOnce sync.Once
}

// NewGateway returns the gateway of p. Its Socket.IO server speaks the v4
// protocol (Engine.IO 4: what socket.io-client 3 and 4 use) over HTTP long
// polling and WebSocket; cross-origin WebSocket upgrades are refused (no
// CORS is configured).
func NewGateway(p Producer) *Gateway {
	opts := socket.DefaultServerOptions()
	opts.SetServeClient(false)
	opts.SetMaxHttpBufferSize(socketFrameLimit)
	g := &Gateway{producer: p, io: socket.NewServer(nil, opts)}

	// The main namespace takes no events: say where to connect instead of
	// leaving a socket that is connected and ignored.
	g.io.Use(func(_ *socket.Socket, next func(*socket.ExtendedError)) {
		next(socket.NewExtendedError("connect to the namespace "+SocketNamespace, nil))
	})
	nsp := g.io.Of(SocketNamespace, nil)
	nsp.Use(g.authenticate)
	_ = nsp.On("connection", func(args ...any) {
		s, ok := args[0].(*socket.Socket)
		if !ok {
			return
		}
		sessionID, _ := s.Data().(string)
		_ = s.On(SocketEvent, func(args ...any) { g.onEvent(sessionID, args) })
		s.OnAny(func(args ...any) {
			if len(args) == 0 {
				return
			}
			if name, _ := args[0].(string); name != SocketEvent {
				ack, _ := splitAck(args[1:])
				reply(ack, http.StatusBadRequest, fmt.Sprintf("unknown event %q: emit %s", jsonfields.Truncate(name, 64), SocketEvent), "")
			}
		})
	})

	mux := http.NewServeMux()
	mux.Handle(HTTPPath, p.HTTPHandler())
	mux.Handle(SocketIOPath, g.io.ServeHandler(nil))
	g.handler = mux
	return g
}

// Handler serves HTTPPath and SocketIOPath.
func (g *Gateway) Handler() http.Handler { return g.handler }

// Close stops taking Socket.IO events: new ones get an error ack (503),
// every socket is disconnected, and Close returns once the events already
// being enqueued are. The HTTP controller's requests are the HTTP server's
// to finish (http.Server.Shutdown). Close is idempotent.
func (g *Gateway) Close() {
	g.closeOnce.Do(func() {
		g.mu.Lock()
		g.closing = true
		g.mu.Unlock()
		g.io.Close(nil)
		g.inflight.Wait()
	})
}

// begin counts an event in; false once the gateway is closing.
func (g *Gateway) begin() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing {
		return false
	}
	g.inflight.Add(1)
	return true
}

// authenticate admits a socket that names its booking session
// (auth.bookingSessionId, a valid SQS message group id) and keeps it as the
// socket's data.
func (g *Gateway) authenticate(s *socket.Socket, next func(*socket.ExtendedError)) {
	g.mu.Lock()
	closing := g.closing
	g.mu.Unlock()
	if closing {
		next(socket.NewExtendedError("the gateway is shutting down: connect again", nil))
		return
	}
	sessionID, _ := s.Handshake().Auth[SocketAuthSessionKey].(string)
	if !groupIDPattern.MatchString(sessionID) {
		next(socket.NewExtendedError(fmt.Sprintf("auth.%s is required: the socket's booking session id, 1..128 printable ASCII characters", SocketAuthSessionKey), nil))
		return
	}
	s.SetData(sessionID)
	next(nil)
}

// onEvent handles one SocketEvent of the socket of sessionID: args are the
// event and, when the client asked for one, the ack.
func (g *Gateway) onEvent(sessionID string, args []any) {
	ack, args := splitAck(args)
	if !g.begin() {
		reply(ack, http.StatusServiceUnavailable, "the gateway is shutting down: send the event again", "")
		return
	}
	defer g.inflight.Done()
	id, err := g.enqueue(sessionID, args)
	if err != nil {
		status := statusOf(err)
		msg := err.Error()
		log := g.producer.logger().With(slog.String("booking_session_id", sessionID), slog.String("transport", TransportSocketIO))
		if status == http.StatusServiceUnavailable {
			log.Error("booking-session event not enqueued", slog.Any("error", err))
			msg = "event not enqueued, retry"
		} else {
			log.Debug("booking-session event refused", slog.Int("status", status), slog.Any("error", err))
		}
		reply(ack, status, msg, "")
		return
	}
	reply(ack, 0, "", id)
}

// errTooLarge is a Socket.IO event over broker.MaxPayloadBytes.
var errTooLarge = errors.New("event too large")

// enqueue checks the event's shape and size and hands it to the producer.
func (g *Gateway) enqueue(sessionID string, args []any) (string, error) {
	if len(args) != 1 {
		return "", invalid("%s takes one argument, the event; got %d", SocketEvent, len(args))
	}
	// The parser decodes JSON into map[string]any; anything else (a
	// string, an array, a binary attachment) is not an event.
	event, ok := args[0].(map[string]any)
	if !ok {
		return "", invalid("the event must be a JSON object")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(event); err != nil {
		return "", invalid("the event does not encode as JSON: %v", err)
	}
	if buf.Len() > broker.MaxPayloadBytes {
		return "", fmt.Errorf("%w: %d bytes, the limit is %d", errTooLarge, buf.Len(), broker.MaxPayloadBytes)
	}
	ctx, cancel := context.WithTimeout(context.Background(), socketEventTimeout)
	defer cancel()
	return g.producer.OnSocketEvent(ctx, sessionID, buf.Bytes())
}

// statusOf is the HTTP status both transports answer err with: 400 for an
// invalid event, 413 for one too large to enqueue, 503 when the queue
// refused it (the client may send it again: the id is derived, so a resend
// collapses with a copy that did get through).
func statusOf(err error) int {
	var tooLarge *broker.PayloadTooLargeError
	switch {
	case errors.Is(err, ErrInvalidEvent):
		return http.StatusBadRequest
	case errors.Is(err, errTooLarge), errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge
	default:
		return http.StatusServiceUnavailable
	}
}

// splitAck separates the ack the library appends to an event's arguments
// when the client asked for one.
func splitAck(args []any) (socket.Ack, []any) {
	if n := len(args); n > 0 {
		if ack, ok := args[n-1].(socket.Ack); ok {
			return ack, args[:n-1]
		}
	}
	return nil, args
}

// reply acks {"eventId": id}, or {"error": msg, "status": status} when msg
// is set; nothing when the client asked for no ack.
func reply(ack socket.Ack, status int, msg, id string) {
	if ack == nil {
		return
	}
	if msg != "" {
		ack([]any{map[string]any{"error": msg, "status": status}}, nil)
		return
	}
	ack([]any{map[string]any{"eventId": id}}, nil)
}
