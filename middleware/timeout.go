package middleware

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/failure"
)

// Timeout bounds each attempt of the handler to d: the handler's context ends
// after d, and an attempt that returns after its deadline is a transient
// failure ("handler timed out"), retried or dead-lettered by the policy like
// any other — never mistaken for shutdown. The handler must honour its
// context: Timeout does not abandon a handler that ignores it, but it tells
// the broker's heartbeat (broker.StartAttempt) when the attempt must end, so
// that a handler past it no longer keeps its message leased.
func Timeout(d time.Duration) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			parent := msg.Context()
			ctx, cancel := context.WithTimeout(parent, d)
			defer cancel()
			deadline, _ := ctx.Deadline()
			endAttempt := broker.StartAttempt(parent, deadline)
			msg.SetContext(ctx)
			produced, err := h(msg)
			endAttempt()
			msg.SetContext(parent)
			if err != nil && parent.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return produced, timedOut(d, err)
			}
			return produced, err
		}
	}
}

// timedOut is the error of an attempt past its deadline. The handler's own
// error is kept as text only: a context.Canceled in it must not read as
// shutdown. (A function of its own, so that its frame is not on the stack
// while the handler runs.)
func timedOut(d time.Duration, err error) error {
	return failure.AsTransient(fmt.Errorf("handler timed out after %s (%s): %w", d, err.Error(), context.DeadlineExceeded), 0)
}

// UTF8 refuses a body that is not valid UTF-8 as a permanent failure before
// the handler runs: JSON decoders replace invalid bytes with U+FFFD, so a
// request would be handled with other text than was sent (a different file
// path, "Caf\uFFFD" for a Latin-1 "Café").
func UTF8(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		if !utf8.Valid(msg.Payload) {
			return nil, failure.Permanentf("body is not valid UTF-8 (%d bytes)", len(msg.Payload))
		}
		return h(msg)
	}
}
