package broker

import "sync"

// IdleLoops keeps one loop of a subscription polling while its queue is
// idle, instead of all of them: every empty poll costs a request (SQS bills
// each receive; the Postgres broker runs a claim statement), and one poll
// sees the first message as soon as the others would. A loop whose poll came
// back empty parks, unless it is the last one still active; a poll that
// shows the queue busy wakes them all, so a backlog is worked at full width
// again. All start active, so a backlog present at start is worked at full
// width from the first poll.
type IdleLoops struct {
	mu sync.Mutex
	// active counts the loops not parked; never below 1, so some loop always
	// polls.
	active, loops int
	// woken is closed, and replaced, to wake every parked loop at once.
	woken chan struct{}
}

// NewIdleLoops returns the coordination of a subscription's loops loops.
func NewIdleLoops(loops int) *IdleLoops {
	return &IdleLoops{active: loops, loops: loops, woken: make(chan struct{})}
}

// Park is called after a poll that brought nothing. The last active loop
// returns at once, with parked false, and polls on; any other waits for Wake
// and returns with parked true. ok is false when stop closed first: the loop
// is to end.
func (r *IdleLoops) Park(stop <-chan struct{}) (parked, ok bool) {
	r.mu.Lock()
	if r.active == 1 {
		r.mu.Unlock()
		return false, true
	}
	r.active--
	woken := r.woken
	r.mu.Unlock()
	select {
	case <-woken:
		return true, true
	case <-stop:
		return true, false
	}
}

// Wake is called after a poll that showed the queue busy: more may follow, so
// every parked loop polls again. Wake counts them active at once, so a loop
// that comes back empty before they run cannot take the count to 0.
func (r *IdleLoops) Wake() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.active == r.loops {
		return
	}
	r.active = r.loops
	close(r.woken)
	r.woken = make(chan struct{})
}
