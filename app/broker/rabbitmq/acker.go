package rabbitmq

import (
	"sync"
)

// acker coalesces the acks of one channel's concurrent deliveries into
// AMQP's multiple acks: an ack of tag T with multiple set settles every
// delivery up to T that is still unsettled, so a run of handlers finishing
// together costs the channel one frame (and the broker one settlement pass)
// instead of one each. It sends from a goroutine of its own, as soon as it
// is told; what arrives while it sends goes out in the next frame, so an ack
// never waits for a timer, only for the frame before it (group commit).
//
// Only a tag whose own ack is due may close a multiple ack, and only across
// tags that are settled: acked through it, or settled otherwise — nacked,
// rejected, acked on their own after a counted copy — which the caller
// reports with settled once that frame is written, never before: a multiple
// ack sent ahead of a nack's frame would ack the message the nack gives back.
// A due ack behind an unsettled tag (a handler still running) is sent on its
// own, at once, so a slow handler never holds the others' acks back (nor,
// through the prefetch window, the queue).
//
// Delivery tags of a channel start at 1 and grow by one per delivery; every
// delivery must end in ack or settled, or the channel must close, for the
// coalescing to go on (a tag never reported only stops it: acks behind it go
// out one by one).
type acker struct {
	// send writes one ack frame (amqp.Channel.Ack).
	send func(tag uint64, multiple bool) error

	mu sync.Mutex
	// low is the lowest tag not known to be settled.
	low uint64
	// due are acks not sent yet; done are tags settled otherwise or acked
	// on their own, above low.
	due, done map[uint64]struct{}
	// err is the first send's failure; nothing is sent after it.
	err error

	wake    chan struct{}
	stopped chan struct{}
	stop    chan struct{}
}

func newAcker(send func(tag uint64, multiple bool) error) *acker {
	a := &acker{send: send, low: 1, due: map[uint64]struct{}{}, done: map[uint64]struct{}{},
		wake: make(chan struct{}, 1), stopped: make(chan struct{}), stop: make(chan struct{})}
	go a.run()
	return a
}

// ack asks for tag to be acked. It does not wait: a failure to send means
// the channel is gone, which its subscription learns on its own (the
// broker then gives the message back).
func (a *acker) ack(tag uint64) {
	a.mu.Lock()
	a.due[tag] = struct{}{}
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// settled records that tag was settled by a frame of its own, already
// written.
func (a *acker) settled(tag uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if tag >= a.low {
		a.done[tag] = struct{}{}
	}
}

// close sends what is due and stops. A send that failed stopped the
// sending: the channel is gone, and the broker gives back what it had not
// acked.
func (a *acker) close() {
	close(a.stop)
	<-a.stopped
}

func (a *acker) run() {
	defer close(a.stopped)
	for {
		select {
		case <-a.wake:
			a.flush()
		case <-a.stop:
			a.flush()
			return
		}
	}
}

// flush sends one multiple ack for the settled run from low, then the acks
// due behind a gap one by one.
func (a *acker) flush() {
	a.mu.Lock()
	if a.err != nil || len(a.due) == 0 {
		a.mu.Unlock()
		return
	}
	start, last := a.low, uint64(0)
	for t := a.low; ; t++ {
		if _, ok := a.due[t]; ok {
			delete(a.due, t)
			last = t
		} else if _, ok := a.done[t]; ok {
			delete(a.done, t)
		} else {
			a.low = t
			break
		}
	}
	var alone []uint64
	for t := range a.due {
		alone = append(alone, t)
		delete(a.due, t)
		a.done[t] = struct{}{}
	}
	a.mu.Unlock()

	var err error
	if last > 0 {
		err = a.send(last, last > start)
	}
	for _, t := range alone {
		if err != nil {
			break
		}
		err = a.send(t, false)
	}
	if err != nil {
		a.mu.Lock()
		if a.err == nil {
			a.err = err
		}
		a.mu.Unlock()
	}
}
