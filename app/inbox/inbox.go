// Package inbox makes a message's effect happen at most once per consumer: a
// marker row (consumer, message id) is inserted in the same transaction as the
// effect, so that the effect and "this message was handled" commit together or
// not at all (eventpipe's rule: the marker commits with the effect, never
// before it). With at-least-once delivery from the broker this gives an
// exactly-once effect.
//
// Watermill's Deduplicator marks a message before the handler succeeds, so a
// crash between the two loses the effect; this package never does that.
//
// Two stores implement Store with the same semantics, checked by one test
// suite: Postgres (the real one) and Memory (for the embedded mode and tests).
package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/eventpipe/eventpipe/app/failure"
)

// Store runs a message's effect at most once per (consumer, message id).
type Store interface {
	// Process runs effect unless (consumer, messageID) was already
	// processed. The marker and the effect commit together: on the
	// Postgres store, effect's ctx carries the transaction (dbtx.From) and
	// the effect must write through it; the effect is its statements. An
	// effect error rolls everything back, marker included, and is returned
	// unchanged. A message already processed returns an error of class
	// failure.Duplicate that wraps ErrProcessed, and none of its effect
	// commits; a concurrent Process of the same message waits for the
	// first one to finish, then runs (if it failed) or reports the
	// duplicate (if it committed). On the Postgres store the marker goes
	// with the effect's first statement (see Postgres.Process): a
	// duplicate's effect runs up to it, and the wait is at it; the memory
	// twin never runs a duplicate's effect. An empty consumer or message
	// id is a failure.Permanent error: a missing id is never synthesised
	// or passed.
	Process(ctx context.Context, consumer, messageID string, effect func(ctx context.Context) error) error
	// Unmark removes the marker so the message may be processed again:
	// StackUp §6 — a message dead-lettered without an answer can be
	// redriven and must then take effect. Unmarking an unknown message is
	// not an error.
	Unmark(ctx context.Context, consumer, messageID string) error
	// Lease claims the message's work for work that runs outside the
	// marker's transaction (see Lease): a message already processed
	// returns a failure.Duplicate error; one whose work another holder's
	// live lease covers returns a failure.Transient error wrapping
	// ErrLeased, with the lease's time left as its retry-after. The lease
	// is renewed until Release. Process commits the marker afterwards.
	Lease(ctx context.Context, consumer, messageID string, ttl time.Duration) (*Lease, error)
	// Seen reports whether (consumer, messageID)'s marker is committed:
	// its effect happened. The policy asks it before dead-lettering a
	// message whose consumers crashed or timed out at every attempt
	// (middleware.Policy), so that one whose last attempt committed and
	// only its settlement was lost is acknowledged instead.
	Seen(ctx context.Context, consumer, messageID string) (bool, error)
	// Cleanup deletes markers older than ttl and returns how many. ttl must
	// exceed the longest time a message can still be redelivered (retries,
	// DLQ redrive), or a late redelivery takes effect twice.
	Cleanup(ctx context.Context, ttl time.Duration) (int64, error)
}

// ErrProcessed is wrapped by the duplicate error Process returns for a
// message whose effect already happened.
var ErrProcessed = errors.New("message already processed")

func duplicate(consumer, messageID string) error {
	return failure.AsDuplicate(fmt.Errorf("inbox: consumer %q, message %q: %w", consumer, messageID, ErrProcessed))
}

// checkKey refuses an empty key: a message without an id cannot be
// deduplicated, and passing it silently would allow a double effect.
func checkKey(consumer, messageID string) error {
	if consumer == "" {
		return failure.Permanentf("inbox: empty consumer name (message %q)", messageID)
	}
	if messageID == "" {
		return failure.Permanentf("inbox: consumer %q: message has no id, cannot deduplicate", consumer)
	}
	return nil
}
