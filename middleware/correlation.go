// Package middleware holds eventpipe's router middleware and the one order in
// which they run (chain.go). Middleware never imports a broker adapter: it sees
// only Watermill messages and their metadata.
package middleware

import (
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/msgctx"
)

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
					id = msgctx.NewTraceID()
				}
			}
			msg.Metadata.Set(metadata.TraceIDKey, id)
			msg.SetContext(msgctx.WithTraceID(msg.Context(), id))

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
