package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// On an ordered (FIFO) queue a consumer holding a group's head (here: it
// never acks, as one killed mid-handler) holds back that group's later
// messages — another consumer gets the other groups' heads, never the next
// message of the held group — until the head is settled. Seen before: a
// consumer killed holding event 36 of a booking session, and the next one
// applied 37–44 first.
func TestOrderedQueueHoldsAGroupBehindItsHead(t *testing.T) {
	t.Parallel()
	topic := brokertest.Topic(t)
	cfg := testConfig(t)
	cfg.OrderedQueues = map[string]bool{topic: true}
	cfg.QueueBatchSizes = map[string]int{topic: 1}
	cfg.AckDeadline = time.Minute
	cfg.PollInterval = 50 * time.Millisecond
	a, b := newPubSub(t, cfg), newPubSub(t, cfg)
	var msgs []*message.Message
	for _, id := range []string{"g1-1", "g1-2", "g2-1"} {
		m := message.NewMessage(id, []byte(id))
		m.Metadata.Set(metadata.GroupIDKey, id[:2])
		msgs = append(msgs, m)
	}
	require.NoError(t, a.Publish(topic, msgs...))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fromA, err := a.Subscribe(ctx, topic)
	require.NoError(t, err)
	head := brokertest.Next(t, fromA, 10*time.Second)
	require.Equal(t, "g1-1", head.UUID)

	fromB, err := b.Subscribe(ctx, topic)
	require.NoError(t, err)
	other := brokertest.Next(t, fromB, 10*time.Second)
	assert.Equal(t, "g2-1", other.UUID, "another group's head goes to the other consumer")
	require.True(t, other.Ack())
	select {
	case m := <-fromB:
		t.Fatalf("%s delivered while its group's head is held", m.UUID)
	case <-time.After(2 * time.Second):
	}

	require.True(t, head.Ack())
	next := brokertest.Next(t, fromB, 10*time.Second)
	assert.Equal(t, "g1-2", next.UUID, "after the head is settled, the group goes on")
	require.True(t, next.Ack())

}

// On an ordered queue a subscription asked for several messages at once
// (broker.WithConcurrency) hands out the heads of several groups at once,
// never two messages of one group: a group's next message comes only once
// the one before is settled, and each group is handled in publish order,
// nacks included (a nacked message comes back before its group goes on).
func TestOrderedQueueWithConcurrencyIsOneAtATimePerGroup(t *testing.T) {
	t.Parallel()
	const groups, perGroup = 3, 4
	topic := brokertest.Topic(t)
	cfg := testConfig(t)
	cfg.OrderedQueues = map[string]bool{topic: true}
	cfg.AckDeadline = time.Minute
	cfg.PollInterval = 20 * time.Millisecond
	cfg.RedeliveryDelay = 50 * time.Millisecond
	ps := newPubSub(t, cfg)
	var sent []*message.Message
	for i := range perGroup {
		for g := range groups {
			id := fmt.Sprintf("g%d-%d", g, i)
			m := message.NewMessage(id, []byte(id))
			m.Metadata.Set(metadata.GroupIDKey, id[:2])
			sent = append(sent, m)
		}
	}
	require.NoError(t, ps.Publish(topic, sent...))

	ctx, cancel := context.WithCancel(broker.WithConcurrency(context.Background(), 10))
	defer cancel()
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)

	// The first claim: every group's head at once, and nothing more while
	// they are unsettled.
	var heads []*message.Message
	for range groups {
		heads = append(heads, brokertest.Next(t, msgs, 10*time.Second))
	}
	var ids []string
	for _, m := range heads {
		ids = append(ids, m.UUID)
	}
	assert.ElementsMatch(t, []string{"g0-0", "g1-0", "g2-0"}, ids, "the groups' heads at once")
	select {
	case m := <-msgs:
		t.Fatalf("%s handed out while its group's head is unsettled", m.UUID)
	case <-time.After(time.Second):
	}

	// Then handled concurrently, each group's first delivery of a message
	// nacked once: per group, one at a time, in order.
	var (
		mu      sync.Mutex
		busy    = map[string]bool{}
		nacked  = map[string]bool{}
		handled = map[string][]string{}
		done    = make(chan struct{})
		wg      sync.WaitGroup
	)
	handle := func(m *message.Message) {
		defer wg.Done()
		group := m.Metadata.Get(metadata.GroupIDKey)
		mu.Lock()
		if busy[group] {
			mu.Unlock()
			t.Errorf("%s handed out while another message of %s is unsettled", m.UUID, group)
			return
		}
		busy[group] = true
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		busy[group] = false
		if !nacked[m.UUID] && m.UUID[len(m.UUID)-1] == '1' {
			nacked[m.UUID] = true
			m.Nack()
			return
		}
		handled[group] = append(handled[group], m.UUID)
		m.Ack()
		if len(handled["g0"])+len(handled["g1"])+len(handled["g2"]) == groups*perGroup {
			close(done)
		}
	}
	for _, m := range heads {
		wg.Add(1)
		go handle(m)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		for m := range msgs {
			wg.Add(1)
			go handle(m)
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("not every message handled: %v", handled)
	}
	cancel()
	<-read
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for g := range groups {
		group := fmt.Sprintf("g%d", g)
		var want []string
		for i := range perGroup {
			want = append(want, fmt.Sprintf("%s-%d", group, i))
		}
		assert.Equal(t, want, handled[group], "group %s in publish order", group)
	}
}
