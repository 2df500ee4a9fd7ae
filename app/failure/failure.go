// Package failure classifies handler and codec errors, the way every spec
// does: permanent (bad schema, unknown type — retrying cannot help), transient
// (retry with backoff, optionally not before a given time), and duplicate (the
// effect already happened — acknowledge, do nothing). An error carrying no
// class is transient: a bug that looks permanent costs a few retries, a
// transient error taken for permanent loses a message.
//
// Classes survive wrapping (fmt.Errorf("...: %w", err)) and are read with
// Of, or errors.As on the exported types.
package failure

import (
	"errors"
	"fmt"
	"time"
)

// Class is an error's class.
type Class int

// The classes.
const (
	// Transient errors are retried with backoff, then dead-lettered.
	Transient Class = iota
	// Permanent errors are handled by the route's policy: drop, dead-letter
	// at once, or fail until the broker's max receives.
	Permanent
	// Duplicate means the message's effect already happened: ack, no effect.
	Duplicate
)

func (c Class) String() string {
	switch c {
	case Permanent:
		return "permanent"
	case Duplicate:
		return "duplicate"
	default:
		return "transient"
	}
}

// PermanentError marks an error no retry can fix.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// TransientError marks an error worth retrying, optionally not before
// RetryAfter has passed (e.g. an HTTP 429's Retry-After).
type TransientError struct {
	Err        error
	RetryAfter time.Duration
}

func (e *TransientError) Error() string {
	if e.RetryAfter > 0 {
		return fmt.Sprintf("transient (retry after %s): %s", e.RetryAfter, e.Err)
	}
	return "transient: " + e.Err.Error()
}
func (e *TransientError) Unwrap() error { return e.Err }

// DuplicateError marks a message whose effect already happened.
type DuplicateError struct{ Err error }

func (e *DuplicateError) Error() string { return "duplicate: " + e.Err.Error() }
func (e *DuplicateError) Unwrap() error { return e.Err }

// Permanentf returns a permanent error formatted like fmt.Errorf (%w works).
func Permanentf(format string, args ...any) error {
	return &PermanentError{Err: fmt.Errorf(format, args...)}
}

// AsPermanent marks err permanent; nil stays nil.
func AsPermanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// AsTransient marks err transient, to be retried no sooner than after
// retryAfter (0 = the backoff decides); nil stays nil.
func AsTransient(err error, retryAfter time.Duration) error {
	if err == nil {
		return nil
	}
	return &TransientError{Err: err, RetryAfter: retryAfter}
}

// AsDuplicate marks err as a duplicate delivery; nil stays nil.
func AsDuplicate(err error) error {
	if err == nil {
		return nil
	}
	return &DuplicateError{Err: err}
}

// Of returns err's class: the outermost marker in its chain wins, so a
// caller can reclassify what it wraps; unmarked errors are Transient.
func Of(err error) Class {
	for e := err; e != nil; e = errors.Unwrap(e) {
		switch e.(type) { //nolint:errorlint // walks the chain itself: the outermost marker wins
		case *PermanentError:
			return Permanent
		case *DuplicateError:
			return Duplicate
		case *TransientError:
			return Transient
		}
	}
	return Transient
}

// RetryAfter returns the earliest retry time requested by a transient error
// in err's chain, or 0.
func RetryAfter(err error) time.Duration {
	var t *TransientError
	if errors.As(err, &t) {
		return t.RetryAfter
	}
	return 0
}
