package sqs_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// These tests run against fakeSQS, which, like SQS and unlike the emulator,
// returns several messages of one group in one receive.

// handlerRun is one run of a test handler.
type handlerRun struct {
	id, group, attempt string
	start, end         time.Time
	acked              bool
}

func (r handlerRun) String() string {
	verdict := "nacked"
	if r.acked {
		verdict = "acked"
	}
	return fmt.Sprintf("%s attempt %s %s", r.id, r.attempt, verdict)
}

// concurrentConsumer handles every message it gets in a goroutine of its
// own, as the Watermill router does, and records the runs and how many of
// them overlapped.
type concurrentConsumer struct {
	mu        sync.Mutex
	runs      []handlerRun
	active    map[string]int // by group
	maxActive map[string]int // by group
	activeAll int
	maxAll    int
}

// consume runs handle on every message of msgs until the channel closes (the
// PubSub's cleanup closes it), and acks the message when handle returns true,
// nacks it otherwise: after recording the run's end, so that the next
// message the ack lets out is seen to start after it.
func consume(msgs <-chan *message.Message, handle func(*message.Message) bool) *concurrentConsumer {
	c := &concurrentConsumer{active: map[string]int{}, maxActive: map[string]int{}}
	go func() {
		for m := range msgs {
			go c.run(m, handle)
		}
	}()
	return c
}

func (c *concurrentConsumer) run(m *message.Message, handle func(*message.Message) bool) {
	r := handlerRun{id: m.UUID, group: m.Metadata.Get(metadata.GroupIDKey), attempt: m.Metadata.Get(metadata.AttemptKey)}
	c.mu.Lock()
	r.start = time.Now()
	c.active[r.group]++
	c.maxActive[r.group] = max(c.maxActive[r.group], c.active[r.group])
	c.activeAll++
	c.maxAll = max(c.maxAll, c.activeAll)
	c.mu.Unlock()

	acked := handle(m)

	c.mu.Lock()
	r.end = time.Now()
	r.acked = acked
	c.active[r.group]--
	c.activeAll--
	c.runs = append(c.runs, r)
	c.mu.Unlock()
	if acked {
		m.Ack()
	} else {
		m.Nack()
	}
}

// runsOf returns the runs of group's messages in the order they started.
func (c *concurrentConsumer) runsOf(group string) []handlerRun {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []handlerRun
	for _, r := range c.runs {
		if r.group == group {
			out = append(out, r)
		}
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].start.Before(out[j-1].start); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func (c *concurrentConsumer) maxActiveOf(group string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.maxActive[group]
}

func describeRuns(runs []handlerRun) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.String()
	}
	return out
}

func describeEvents(events []fakeEvent) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = fmt.Sprintf("%s %d", e.op, e.value)
	}
	return out
}

func sendAll(f *fakeSQS, ids ...string) {
	for _, id := range ids {
		group, _, _ := strings.Cut(id, ":")
		f.send(id, group)
	}
}

// subscribeFake subscribes to f with its default config; the subscription
// ends with the test.
func subscribeFake(t *testing.T, f *fakeSQS) <-chan *message.Message {
	t.Helper()
	msgs, err := newPubSub(t, f.config()).Subscribe(context.Background(), f.name)
	require.NoError(t, err)
	return msgs
}

// FIFO means per-group order. SQS hands out a whole run of one group in one
// batch; its messages are handled one at a time, in order, and when one
// fails the group's later messages from that batch are released untouched
// (visibility 0) instead of handled, while the failed one keeps the
// visibility its nack gives it. SQS then holds the group until the failed one
// is visible again and delivers both again, in order. Other groups run
// meanwhile.
func TestFIFOBatchFailureKeepsGroupOrder(t *testing.T) {
	t.Parallel()
	fake := fakeQueue(t, ".fifo")
	sendAll(fake, "g1:1", "g1:2", "g1:3", "g2:1", "g2:2")
	msgs := subscribeFake(t, fake)

	var failed atomic.Bool
	c := consume(msgs, func(m *message.Message) bool {
		time.Sleep(200 * time.Millisecond)
		if m.UUID == "g1:2" && failed.CompareAndSwap(false, true) {
			// A route's explicit backoff of 1 s, so that the failed
			// message's visibility (1) differs from a release's (0).
			m.Metadata.Set(metadata.NackDelayKey, "1s")
			m.Metadata.Set(metadata.ExplicitNackDelayKey, "true")
			return false
		}
		return true
	})
	require.Eventually(t, func() bool { return fake.left() == 0 }, 15*time.Second, 20*time.Millisecond, "every message handled and deleted")

	g1 := c.runsOf("g1")
	require.Equal(t, []string{
		"g1:1 attempt 0 acked",
		"g1:2 attempt 0 nacked",
		"g1:2 attempt 1 acked",
		// Its second receive (released the first time, never handled).
		"g1:3 attempt 1 acked",
	}, describeRuns(g1), "g1 in order; g1:3 not handled in the batch where g1:2 failed")
	assert.False(t, g1[3].start.Before(g1[2].end), "g1:3 started only after g1:2 succeeded")
	assert.Equal(t, 1, c.maxActiveOf("g1"), "one g1 message at a time")

	assert.Equal(t, []string{"receive 1", "visibility 1", "receive 2", "delete 0"}, describeEvents(fake.eventsOf("g1:2")),
		"the failed message keeps its nack's visibility")
	assert.Equal(t, []string{"receive 1", "visibility 0", "receive 2", "delete 0"}, describeEvents(fake.eventsOf("g1:3")),
		"the later one is released at once, untouched, and comes back behind g1:2")

	g2 := c.runsOf("g2")
	require.Equal(t, []string{"g2:1 attempt 0 acked", "g2:2 attempt 0 acked"}, describeRuns(g2))
	assert.True(t, g2[0].start.Before(g1[0].end), "g2 ran next to g1, not after it")
	assert.Equal(t, 1, c.maxActiveOf("g2"), "one g2 message at a time")
}

// A message of a group never starts while an earlier one of its group from
// the same batch still runs, however the groups are interleaved in the batch;
// different groups still run at the same time.
func TestFIFOGroupOneAtATime(t *testing.T) {
	t.Parallel()
	fake := fakeQueue(t, ".fifo")
	sendAll(fake, "a:1", "b:1", "a:2", "b:2", "a:3", "b:3")
	msgs := subscribeFake(t, fake)

	c := consume(msgs, func(m *message.Message) bool {
		time.Sleep(150 * time.Millisecond)
		return true
	})
	require.Eventually(t, func() bool { return fake.left() == 0 }, 15*time.Second, 20*time.Millisecond)

	for _, group := range []string{"a", "b"} {
		runs := c.runsOf(group)
		want := []string{group + ":1 attempt 0 acked", group + ":2 attempt 0 acked", group + ":3 attempt 0 acked"}
		require.Equal(t, want, describeRuns(runs), "group %s in batch order", group)
		for i := 1; i < len(runs); i++ {
			assert.False(t, runs[i].start.Before(runs[i-1].end), "%s started while %s still ran", runs[i].id, runs[i-1].id)
		}
		assert.Equal(t, 1, c.maxActiveOf(group), "group %s: one at a time", group)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	assert.GreaterOrEqual(t, c.maxAll, 2, "the two groups ran concurrently")
}

// When the subscription stops, a group's messages still waiting behind one
// being handled are released untouched, whether the one being handled is
// settled within the drain or not.
func TestFIFOStopReleasesWaitingMessages(t *testing.T) {
	t.Parallel()
	for name, ackInDrain := range map[string]bool{"acked in the drain": true, "never settled": false} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake := fakeQueue(t, ".fifo")
			sendAll(fake, "g:1", "g:2", "g:3")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cfg := fake.config()
			cfg.DrainTimeout = time.Second
			msgs, err := newPubSub(t, cfg).Subscribe(ctx, fake.name)
			require.NoError(t, err)

			first := brokertest.Next(t, msgs, 10*time.Second)
			require.Equal(t, "g:1", first.UUID)
			cancel()
			if ackInDrain {
				time.Sleep(200 * time.Millisecond)
				first.Ack()
			}
			for m := range msgs {
				assert.Failf(t, "handed out after the stop", "message %s", m.UUID)
			}

			// A poll under way at the stop may take what was released
			// again, and releases it again.
			first1 := describeEvents(fake.eventsOf("g:1"))
			if ackInDrain {
				assert.Equal(t, []string{"receive 1", "delete 0"}, first1)
			} else {
				require.GreaterOrEqual(t, len(first1), 2)
				assert.Equal(t, []string{"receive 1", "visibility 0"}, first1[:2], "released at the end of the drain")
			}
			for _, id := range []string{"g:2", "g:3"} {
				events := describeEvents(fake.eventsOf(id))
				require.GreaterOrEqual(t, len(events), 2, id)
				assert.Equal(t, []string{"receive 1", "visibility 0"}, events[:2], "%s released untouched", id)
				assert.NotContains(t, events, "delete 0", id)
			}
		})
	}
}

// A message waiting for its turn is in flight at SQS: the heartbeat keeps it
// invisible while the one before it runs past the visibility timeout, so SQS
// never gives it to another receiver (here the subscription's second worker)
// meanwhile.
func TestFIFOWaitingMessageKeepsItsVisibility(t *testing.T) {
	t.Parallel()
	fake := fakeQueue(t, ".fifo")
	sendAll(fake, "g:1", "g:2")
	cfg := fake.config()
	cfg.VisibilityTimeout = 3 * time.Second
	msgs, err := newPubSub(t, cfg).Subscribe(context.Background(), fake.name)
	require.NoError(t, err)

	c := consume(msgs, func(m *message.Message) bool {
		if m.UUID == "g:1" {
			time.Sleep(4 * time.Second)
		}
		return true
	})
	require.Eventually(t, func() bool { return fake.left() == 0 }, 20*time.Second, 20*time.Millisecond)

	assert.Equal(t, []string{"g:1 attempt 0 acked", "g:2 attempt 0 acked"}, describeRuns(c.runsOf("g")))
	events := fake.eventsOf("g:2")
	assert.Equal(t, "receive 1", describeEvents(events)[0])
	assert.NotContains(t, describeEvents(events), "receive 2", "never delivered again")
	var firstDelete time.Time
	for _, e := range fake.eventsOf("g:1") {
		if e.op == "delete" {
			firstDelete = e.at
		}
	}
	extended := false
	for _, e := range events {
		if e.op == "visibility" && e.value == 3 && e.at.Before(firstDelete) {
			extended = true
		}
	}
	assert.True(t, extended, "g:2 was extended while it waited behind g:1: %v", describeEvents(events))
}

// A message that cannot be unmarshaled fails in its group's place: it is left
// in flight as elsewhere (for the redrive policy), and the group's later
// messages are released rather than handled ahead of it.
func TestFIFOUnmarshalFailureHoldsGroup(t *testing.T) {
	t.Parallel()
	fake := fakeQueue(t, ".fifo")
	fake.send("g:1", "g")
	fake.send("poison", "g")
	fake.send("g:3", "g")
	cfg := fake.config()
	cfg.Unmarshaler = failingUnmarshaler{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := newPubSub(t, cfg).Subscribe(ctx, fake.name)
	require.NoError(t, err)

	brokertest.Next(t, msgs, 10*time.Second).Ack()
	nothing(t, msgs, 1500*time.Millisecond)
	assert.Equal(t, []string{"receive 1", "delete 0"}, describeEvents(fake.eventsOf("g:1")))
	assert.Equal(t, []string{"receive 1"}, describeEvents(fake.eventsOf("poison")), "left for its visibility timeout")
	assert.Equal(t, []string{"receive 1", "visibility 0"}, describeEvents(fake.eventsOf("g:3")), "released, not handled")
}

// Only a FIFO queue orders by group: a standard queue whose messages carry a
// MessageGroupId (SQS fair queues) still hands a batch out all at once.
func TestStandardQueueIgnoresGroups(t *testing.T) {
	t.Parallel()
	fake := fakeQueue(t, "")
	sendAll(fake, "a:1", "a:2", "a:3")
	msgs := subscribeFake(t, fake)

	c := consume(msgs, func(m *message.Message) bool {
		time.Sleep(300 * time.Millisecond)
		return true
	})
	require.Eventually(t, func() bool { return fake.left() == 0 }, 15*time.Second, 20*time.Millisecond)
	assert.Equal(t, 3, c.maxActiveOf("a"), "all three at once")
}
