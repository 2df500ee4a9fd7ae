package middleware

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Drain lets a message that is being handled when intake stops finish: its
// handler's context no longer ends with the subscription (which shutdown
// cancels first) but with drain, which the composition root cancels once the
// shutdown timeout is over. The context keeps every value of the delivery's.
//
// Without it a SIGTERM cancels every in-flight handler at once, so work that
// fitted easily in the shutdown timeout is requeued and its answer (a
// callback, a follow-up) is never sent.
func Drain(drain context.Context) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			ctx, cancel := context.WithCancel(context.WithoutCancel(msg.Context()))
			stop := context.AfterFunc(drain, cancel)
			defer func() {
				stop()
				cancel()
			}()
			msg.SetContext(ctx)
			return h(msg)
		}
	}
}
