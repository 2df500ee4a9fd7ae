package outbox

import (
	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/failure"
)

// permanent reports whether a Publish error is the broker refusing the
// message itself, so that sending it again can only fail again:
//
//   - a payload over broker.MaxPayloadBytes (*broker.PayloadTooLargeError);
//   - a routing key no queue is bound for (broker.Refusal: *routing.UnroutableError);
//   - an error marked failure.Permanent by the adapter.
//
// Everything else is transient — a broker down, closed, reconnecting or slow,
// a timeout, an unclassified error — and is retried for as long as it takes:
// taking an outage for a poison message would stop publishing rows that are
// fine (ruling "An unavailable broker is not a poison message").
//
// The walk follows every branch of the chain (a *routing.RouteError holds one
// error per queue); on each branch the outermost class marker wins, as in
// failure.Of, so a caller may mark a refusal failure.AsTransient.
func permanent(err error) bool {
	switch e := err.(type) { //nolint:errorlint // walks the chain itself: the outermost marker wins
	case nil, *failure.TransientError:
		return false
	case *failure.PermanentError:
		return true
	case broker.Refusal:
		if e.Refused() {
			return true
		}
		return permanentInside(e)
	default:
		return permanentInside(err)
	}
}

// permanentInside walks err's wrapped errors (see permanent).
func permanentInside(err error) bool {
	switch e := err.(type) { //nolint:errorlint // walks the chain itself
	case interface{ Unwrap() []error }:
		for _, inner := range e.Unwrap() {
			if permanent(inner) {
				return true
			}
		}
		return false
	case interface{ Unwrap() error }:
		return permanent(e.Unwrap())
	default:
		return false
	}
}
