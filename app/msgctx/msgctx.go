// Package msgctx is what a handler reads from, and puts into, the context of
// the message it handles: the trace id, the attempt number, follow-up
// messages that continue the trace, and a logger with the attributes every
// line about a message carries.
//
// It is a leaf: it imports nothing of eventpipe's, so every handler may
// import it without importing middleware (which sets these values) or a
// broker adapter. The metadata keys the values travel under are named in
// app/metadata.
package msgctx

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"log/slog"
	"math/rand/v2"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// traceIDMetadataKey is metadata.TraceIDKey, spelled here so that this
// package stays a leaf that imports nothing of eventpipe's; a test pins the
// two together.
const traceIDMetadataKey = "x-trace-id"

type (
	traceIDCtxKey struct{}
	attemptCtxKey struct{}
)

// WithTraceID returns ctx carrying traceID.
func WithTraceID(ctx context.Context, traceID string) context.Context {
	return &traceIDCtx{Context: ctx, id: traceID}
}

// TraceID returns the trace id carried by ctx, or "".
func TraceID(ctx context.Context) string {
	if c, ok := ctx.Value(traceIDCtxKey{}).(*traceIDCtx); ok {
		return c.id
	}
	return ""
}

// traceIDCtx carries a trace id in one allocation, once per message:
// context.WithValue of a string is two (the context and the string boxed
// in an interface), and TraceID's lookup would box nothing either way. Its
// Value answers for itself; every other value, and Done, Err and Deadline,
// are the embedded context's, so contexts derived from it still hang on the
// delivery's cancelable context directly.
type traceIDCtx struct {
	context.Context
	id string
}

func (c *traceIDCtx) Value(key any) any {
	if _, ok := key.(traceIDCtxKey); ok {
		return c
	}
	return c.Context.Value(key)
}

func (c *traceIDCtx) String() string {
	name := "context"
	if s, ok := c.Context.(interface{ String() string }); ok {
		name = s.String()
	}
	return name + ".WithTraceID(" + c.id + ")"
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
// ctx (so a publisher sees it) and the trace id in its metadata
// (metadata.TraceIDKey). Handlers use it for every message they publish
// while handling one.
func NewMessage(ctx context.Context, payload []byte) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), payload)
	msg.SetContext(ctx)
	if id := TraceID(ctx); id != "" {
		msg.Metadata.Set(traceIDMetadataKey, id)
	}
	return msg
}

// WithAttempt returns ctx carrying the 1-based number of the attempt being
// handled. middleware.Policy sets it before each attempt.
func WithAttempt(ctx context.Context, attempt int) context.Context {
	return context.WithValue(ctx, attemptCtxKey{}, attempt)
}

// Attempt returns the 1-based number of the attempt being handled in ctx:
// earlier deliveries (metadata.AttemptKey) plus this delivery's in-process
// attempts. It is 0 outside a handler run by middleware.Policy.
func Attempt(ctx context.Context) int {
	n, _ := ctx.Value(attemptCtxKey{}).(int)
	return n
}

// Logger returns base with the attributes every log line about msg carries
// (STYLE.md): message_id (msg.UUID), trace_id (TraceID of ctx) and queue (the
// queue the router consumed msg from). A nil base discards, so a handler
// whose Logger field is unset needs no fallback of its own.
func Logger(ctx context.Context, base *slog.Logger, msg *message.Message) *slog.Logger {
	if base == nil {
		base = slog.New(slog.DiscardHandler)
	}
	return base.With(
		slog.String("message_id", msg.UUID),
		slog.String("trace_id", TraceID(ctx)),
		slog.String("queue", message.SubscribeTopicFromCtx(ctx)))
}
