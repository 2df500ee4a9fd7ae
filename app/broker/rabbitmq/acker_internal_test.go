package rabbitmq

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// frames records the ack frames an acker sends.
type frames struct {
	mu   sync.Mutex
	sent []string
	// When gate is set, each send says so on entered, then waits for gate.
	gate, entered chan struct{}
}

func (f *frames) send(tag uint64, multiple bool) error {
	if f.gate != nil {
		f.entered <- struct{}{}
		<-f.gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, fmt.Sprintf("%d%s", tag, map[bool]string{true: "+", false: ""}[multiple]))
	return nil
}

func (f *frames) get() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.sent...)
}

// sent waits until n frames were sent, and returns them.
func (f *frames) wait(t *testing.T, n int) []string {
	t.Helper()
	require.Eventually(t, func() bool { return len(f.get()) >= n }, 5*time.Second, time.Millisecond)
	got := f.get()
	require.Len(t, got, n)
	return got
}

// Acks that are due together go out as one multiple ack of the highest
// tag of the settled run from the lowest unsettled tag; an ack behind a tag
// still unsettled goes out on its own at once; a tag settled by a frame of
// its own (a nack) lets the run pass it but never closes a multiple ack, and
// a tag not reported stops the run.
func TestAckerCoalescesSettledRuns(t *testing.T) {
	t.Parallel()
	f := &frames{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	a := newAcker(f.send, 0, 1)

	// 1 goes out at once, written by its caller; 2..5 arrive while its
	// frame is being written, and return at once: 1's caller sends them.
	go a.ack(1)
	<-f.entered
	for tag := uint64(2); tag <= 5; tag++ {
		a.ack(tag)
	}
	f.gate <- struct{}{} // frame 1
	<-f.entered
	f.gate <- struct{}{} // frame 2..5
	f.gate = nil         // the acker is idle: no send runs now
	assert.Equal(t, []string{"1", "5+"}, f.wait(t, 2))

	// 6 is still being handled: 7 and 8 cannot join a multiple ack.
	a.ack(7)
	a.ack(8)
	assert.ElementsMatch(t, []string{"7", "8"}, f.wait(t, 4)[2:], "acked on their own, not held behind 6")

	// 6 is nacked (its own frame): the run passes it, 7 and 8 are settled
	// already, so 9 closes a run 6..9 whose only due ack is 9's.
	a.settled(6)
	a.ack(9)
	assert.Equal(t, "9+", f.wait(t, 5)[4])

	// 10 is never reported: 11 and 12 go out alone, never as 12+ (which
	// would ack 10 as well).
	a.ack(11)
	f.wait(t, 6)
	a.ack(12)
	assert.Equal(t, []string{"11", "12"}, f.wait(t, 7)[5:])
	a.close()
}

// With a delay, acks wait for the ones after them: a run acked within the
// delay goes out as one multiple ack once it is over; half the prefetch
// window due goes at once, and close sends what is held without waiting.
func TestAckerHoldsAcksForItsDelay(t *testing.T) {
	t.Parallel()
	f := &frames{}
	const delay = 200 * time.Millisecond
	a := newAcker(f.send, delay, 4)

	start := time.Now()
	for tag := uint64(1); tag <= 3; tag++ {
		a.ack(tag)
	}
	assert.Empty(t, f.get(), "held for the delay")
	assert.Equal(t, []string{"3+"}, f.wait(t, 1), "one frame for the run")
	assert.GreaterOrEqual(t, time.Since(start), delay)

	// The fourth due ack reaches most (4): all four go at once.
	for tag := uint64(4); tag <= 7; tag++ {
		a.ack(tag)
	}
	assert.Equal(t, "7+", f.get()[1], "sent by the ack that reached most, not the timer")

	a.ack(8)
	a.close()
	assert.Equal(t, []string{"3+", "7+", "8"}, f.get(), "close sends what is held")
	time.Sleep(delay + 50*time.Millisecond)
	assert.Len(t, f.get(), 3, "nothing more once the timer would have run")
}
