package broker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/eventpipe/eventpipe/app/broker"
)

// Of three loops finding their queue empty, the last one active polls on
// and the others park; a busy poll wakes them all; a stopped loop ends.
func TestIdleLoopsKeepOnePolling(t *testing.T) {
	t.Parallel()
	idle := broker.NewIdleLoops(3)
	stop := make(chan struct{})
	woken := make(chan bool, 2)
	for range 2 {
		go func() {
			parked, ok := idle.Park(stop)
			woken <- parked && ok
		}()
	}
	time.Sleep(50 * time.Millisecond) // both parked: this one is the last active
	parked, ok := idle.Park(stop)
	assert.True(t, !parked && ok, "the last active loop polls on")
	select {
	case <-woken:
		t.Fatal("a parked loop returned before any poll found the queue busy")
	case <-time.After(50 * time.Millisecond):
	}
	idle.Wake()
	for range 2 {
		select {
		case ok := <-woken:
			assert.True(t, ok, "woken, to poll at once")
		case <-time.After(5 * time.Second):
			t.Fatal("a parked loop was not woken")
		}
	}

	// Parked again, then stopped.
	go func() {
		_, ok := idle.Park(stop)
		woken <- ok
	}()
	time.Sleep(20 * time.Millisecond)
	close(stop)
	select {
	case ok := <-woken:
		assert.False(t, ok, "stopped")
	case <-time.After(5 * time.Second):
		t.Fatal("a parked loop did not stop")
	}
}
