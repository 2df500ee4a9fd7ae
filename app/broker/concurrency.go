package broker

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"
)

// concurrencyKey carries a subscription's concurrency in the context its
// Subscribe is called with.
type concurrencyKey struct{}

// WithConcurrency returns ctx asking the subscription started with it
// (Subscribe(ctx, topic)) to hand out up to n messages before the first of
// them is settled: the subscriber runs up to n handlers at once. n = 0 asks
// for as many as the adapter holds unsettled anyway: RabbitMQ the queue's
// prefetch, SQS the messages of its receive loops' batches, Postgres the rows
// of one claim; a larger n is bounded by the same. An ordered queue (FIFO,
// single active consumer) is handled one message at a time per group
// whatever n says.
//
// A subscription started without it hands out one message at a time, the
// next once that one is settled, as a Watermill subscriber does — except on
// SQS, which hands out every message of its receives' batches at once
// either way (a smaller n bounds it).
func WithConcurrency(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, concurrencyKey{}, max(n, 0))
}

// ConcurrencyFrom returns the concurrency WithConcurrency put in ctx (0: the
// adapter's bound); ok is false when none was asked for, and the
// subscription hands out one message at a time.
func ConcurrencyFrom(ctx context.Context) (n int, ok bool) {
	n, ok = ctx.Value(concurrencyKey{}).(int)
	return n, ok
}

// ConcurrencyWithin is the concurrency of a subscription started with ctx
// on an adapter that holds at most bound messages unsettled (a prefetch, a
// claim batch): 1 when ctx asks for none, bound when it asks for 0 or more
// than bound, else what it asks for.
func ConcurrencyWithin(ctx context.Context, bound int) int {
	n, ok := ConcurrencyFrom(ctx)
	switch {
	case !ok:
		return 1
	case n == 0 || n > bound:
		return bound
	}
	return n
}

// Concurrently returns sub whose every Subscribe asks for n messages in
// flight at once (WithConcurrency; 0: the adapter's bound). The router
// subscribes with its own context, so a route's concurrency reaches its
// subscription this way.
func Concurrently(sub message.Subscriber, n int) message.Subscriber {
	return concurrentSubscriber{Subscriber: sub, n: n}
}

type concurrentSubscriber struct {
	message.Subscriber
	n int
}

func (s concurrentSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	return s.Subscriber.Subscribe(WithConcurrency(ctx, s.n), topic)
}
