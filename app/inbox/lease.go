package inbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/eventpipe/eventpipe/app/failure"
)

// A lease is eventpipe's rule "mark after the work, lease during it" for work
// that cannot run inside the marker's transaction (a model call of minutes):
// Lease claims the message's work, the work runs, and the marker is written by
// Process together with the work's answer (its callback's outbox row). While
// the lease is held it is renewed every third of its TTL, so a second delivery
// of the message (a redelivery while the work still runs) finds it live and is
// retried later — never acknowledged as a duplicate. A holder that dies stops
// renewing, and the lease expires one TTL later.

// ErrLeased is wrapped by the error Lease returns while another holder's
// lease on the message is live.
var ErrLeased = errors.New("message is being processed by another consumer")

// MinLeaseTTL is the shortest lease Lease accepts.
const MinLeaseTTL = 100 * time.Millisecond

// Lease is a held claim on a message's work. Release it when the work ended,
// whatever its outcome (a released lease lets a redelivery run at once).
type Lease struct {
	stop     func()
	stopOnce sync.Once
}

// Release stops renewing the lease and deletes it. It is safe to call more
// than once and on a nil *Lease.
func (l *Lease) Release() {
	if l != nil {
		l.stopOnce.Do(l.stop)
	}
}

// leaser is what a store implements for Lease: one holder per key at a time,
// with expiry.
type leaser interface {
	// acquire takes the lease for holder when the message is not processed
	// and no live lease of another holder exists. processed reports a
	// marker; left is the time the other holder's lease has left.
	acquire(ctx context.Context, k memKey, holder string, ttl time.Duration) (ok, processed bool, left time.Duration, err error)
	// renew extends holder's lease; false when it is no longer holder's.
	renew(ctx context.Context, k memKey, holder string, ttl time.Duration) (bool, error)
	release(ctx context.Context, k memKey, holder string) error
}

// lease is Lease on any leaser.
func lease(ctx context.Context, s leaser, consumer, messageID string, ttl time.Duration) (*Lease, error) {
	if err := checkKey(consumer, messageID); err != nil {
		return nil, err
	}
	if ttl < MinLeaseTTL {
		return nil, fmt.Errorf("inbox: lease ttl %s is shorter than %s", ttl, MinLeaseTTL)
	}
	k, holder := memKey{consumer, messageID}, watermill.NewUUID()
	ok, processed, left, err := s.acquire(ctx, k, holder, ttl)
	switch {
	case err != nil:
		return nil, fmt.Errorf("inbox: consumer %q, message %q: lease: %w", consumer, messageID, err)
	case processed:
		return nil, duplicate(consumer, messageID)
	case !ok:
		return nil, failure.AsTransient(fmt.Errorf("inbox: consumer %q, message %q: %w (lease %s left)", consumer, messageID, ErrLeased, left.Round(time.Millisecond)), left)
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
				// A failed renewal is retried at the next tick; the lease
				// lives one TTL, so two missed ticks still hold it.
				if still, err := s.renew(rctx, k, holder, ttl); err == nil && !still {
					return
				}
			}
		}
	}()
	return &Lease{stop: func() {
		cancel()
		<-done
		rel, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer stop()
		_ = s.release(rel, k, holder) // an unreleased lease expires
	}}, nil
}
