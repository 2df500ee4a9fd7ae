// Package middleware holds eventpipe's router middleware and the one order in
// which they run (chain.go). Middleware never imports a broker adapter: it sees
// only Watermill messages and their metadata.
package middleware

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/metadata"
)

type traceIDKey struct{}

// WithTraceID returns ctx carrying traceID.
func WithTraceID(ctx context.Context, traceID string) context.Context {
	return context.WithValue(ctx, traceIDKey{}, traceID)
}

// TraceID returns the trace id carried by ctx, or "".
func TraceID(ctx context.Context) string {
	id, _ := ctx.Value(traceIDKey{}).(string)
	return id
}

// NewTraceID returns a fresh trace id: 32 lowercase hex digits, the W3C
// trace-id format, so it can seed a traceparent. It needs uniqueness, not
// secrecy: math/rand/v2's per-thread generator avoids the system call per
// message that crypto/rand cost (8.7 % of CPU end to end, BENCHMARKS.md R3).
func NewTraceID() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], rand.Uint64())
	binary.BigEndian.PutUint64(b[8:], rand.Uint64()|1) // never all zero (invalid in W3C)
	return hex.EncodeToString(b[:])
}

// NewMessage returns a message that continues the trace of ctx: it carries
// ctx (so a publisher sees it) and the trace id in its metadata. Handlers use
// it for every message they publish while handling one.
func NewMessage(ctx context.Context, payload []byte) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), payload)
	msg.SetContext(ctx)
	if id := TraceID(ctx); id != "" {
		msg.Metadata.Set(metadata.TraceIDKey, id)
	}
	return msg
}

// Correlation gives every message a trace id before anything else runs: the
// one in its metadata (x-trace-id), else the trace id of its W3C traceparent,
// else a new one. The id goes into the message's context (so logs and
// published messages carry it) and onto every message the handler returns.
func Correlation(h message.HandlerFunc) message.HandlerFunc {
	return CorrelationFrom(nil)(h)
}

// CorrelationFrom is Correlation for a wire format that carries its own trace
// id: fromWire (route.Route.TraceID) is asked before the traceparent.
func CorrelationFrom(fromWire func(*message.Message) string) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			id := msg.Metadata.Get(metadata.TraceIDKey)
			if id == "" && fromWire != nil {
				id = fromWire(msg)
			}
			if id == "" {
				if fromParent, ok := TraceIDFromTraceparent(msg.Metadata.Get(metadata.TraceparentKey)); ok {
					id = fromParent
				} else {
					id = NewTraceID()
				}
			}
			msg.Metadata.Set(metadata.TraceIDKey, id)
			msg.SetContext(WithTraceID(msg.Context(), id))

			produced, err := h(msg)
			for _, p := range produced {
				if p.Metadata.Get(metadata.TraceIDKey) == "" {
					p.Metadata.Set(metadata.TraceIDKey, id)
				}
			}
			return produced, err
		}
	}
}
