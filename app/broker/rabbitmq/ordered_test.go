package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/rabbitmq"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/topology"
)

// On an ordered (FIFO) classic queue a consumer that dies holding a message
// does not reorder it: the redelivery is handed over in its place, never
// republished behind the later messages, and still says it was delivered
// before. Only the message in hand is charged: an ordered queue is consumed
// with prefetch 1 whatever the configuration says, so nothing else was
// prefetched to the consumer that died.
func TestCrashKeepsOrderOnAFIFOQueue(t *testing.T) {
	t.Parallel()
	amqpURL, _ := newVhost(t)
	queue := "t" + watermill.NewShortUUID() + ".fifo"
	declared, err := rabbitmq.NewDeclared(topology.Topology{Name: "ordered", Queues: []topology.Queue{{Name: queue, FIFO: true}}}, nil)
	require.NoError(t, err)
	withTopology := func(c *rabbitmq.Config) { c.Topology = declared; c.Prefetch = 2 }
	publisher := newPubSub(t, amqpURL, withTopology)
	var sent []string
	for i := range 6 {
		m := message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, "event %d", i))
		sent = append(sent, m.UUID)
		require.NoError(t, publisher.Publish(queue, m))
	}

	proxy, viaProxy := proxyURL(t, amqpURL)
	ps := newPubSub(t, viaProxy, withTopology)
	msgs, err := ps.Subscribe(context.Background(), queue)
	require.NoError(t, err)
	require.Equal(t, sent[0], brokertest.Next(t, msgs, 30*time.Second).UUID)
	proxy.kill() // dies holding the first message; the rest wait in the queue
	_ = ps.Close()

	ps = newPubSub(t, amqpURL, withTopology)
	msgs, err = ps.Subscribe(context.Background(), queue)
	require.NoError(t, err)
	var got []string
	for range sent {
		m := brokertest.Next(t, msgs, 30*time.Second)
		got = append(got, m.UUID)
		if len(got) == 1 {
			assert.Equal(t, "1", m.Metadata.Get(metadata.AttemptKey), "the crashed delivery counts for this delivery")
		} else {
			assert.Equal(t, "0", m.Metadata.Get(metadata.AttemptKey), "message %d was not prefetched by the consumer that died", len(got))
		}
		require.True(t, m.Ack())
	}
	assert.Equal(t, sent, got, "publish order after the crash")
}

// fakeLedger is an AttemptLedger in memory that can be made to fail.
type fakeLedger struct {
	mu   sync.Mutex
	rows map[string]int
	fail bool
}

func newFakeLedger() *fakeLedger { return &fakeLedger{rows: map[string]int{}} }

func (l *fakeLedger) Bump(_ context.Context, queue, id string) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail {
		return 0, errors.New("database is down")
	}
	l.rows[queue+"/"+id]++
	return l.rows[queue+"/"+id], nil
}

func (l *fakeLedger) Forget(_ context.Context, queue, id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.rows, queue+"/"+id)
	return nil
}

func (l *fakeLedger) snapshot() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.rows)
}

// On an ordered classic queue the attempt ledger counts every crash of a
// message handed over in place, so a crash loop reaches the attempt limit
// without a copy that would reorder the queue. A nack turns the count into a
// counted copy (which carries it) and the ledger forgets the message, as it
// does on an ack. A ledger that fails is logged and the crash counted for
// that delivery only.
func TestAttemptLedgerCountsCrashesInPlace(t *testing.T) {
	t.Parallel()
	amqpURL, _ := newVhost(t)
	queue := "t" + watermill.NewShortUUID() + ".fifo"
	declared, err := rabbitmq.NewDeclared(topology.Topology{Name: "ordered", Queues: []topology.Queue{{Name: queue, FIFO: true}}}, nil)
	require.NoError(t, err)
	ledger := newFakeLedger()
	logger := newRecordingLogger()
	connect := func(url string) *rabbitmq.PubSub {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ps, err := rabbitmq.New(ctx, rabbitmq.Config{URL: url, Topology: declared, AttemptLedger: ledger}, logger)
		require.NoError(t, err)
		t.Cleanup(func() { _ = ps.Close() })
		return ps
	}
	crash := func() *message.Message {
		proxy, viaProxy := proxyURL(t, amqpURL)
		ps := connect(viaProxy)
		msgs, err := ps.Subscribe(context.Background(), queue)
		require.NoError(t, err)
		m := brokertest.Next(t, msgs, 30*time.Second)
		proxy.kill() // dies holding it
		_ = ps.Close()
		return m
	}

	first := message.NewMessage(watermill.NewUUID(), []byte("crash me"))
	second := message.NewMessage(watermill.NewUUID(), []byte("behind it"))
	require.NoError(t, connect(amqpURL).Publish(queue, first, second))
	for i := range 3 {
		m := crash()
		require.Equal(t, first.UUID, m.UUID, "in its place, crash %d", i+1)
		require.Equal(t, strconv.Itoa(i), m.Metadata.Get(metadata.AttemptKey), "crash %d", i+1)
	}
	// Bumped by the second and the third delivery; the third crash is the
	// next delivery's to count.
	assert.Equal(t, map[string]int{queue + "/" + first.UUID: 2}, ledger.snapshot())

	ps := connect(amqpURL)
	msgs, err := ps.Subscribe(context.Background(), queue)
	require.NoError(t, err)
	m := brokertest.Next(t, msgs, 30*time.Second)
	require.Equal(t, first.UUID, m.UUID)
	assert.Equal(t, "3", m.Metadata.Get(metadata.AttemptKey), "every crash counted")
	require.True(t, m.Nack())
	m = brokertest.Next(t, msgs, 30*time.Second)
	require.Equal(t, second.UUID, m.UUID)
	assert.Equal(t, "0", m.Metadata.Get(metadata.AttemptKey))
	require.True(t, m.Ack())
	m = brokertest.Next(t, msgs, 30*time.Second)
	require.Equal(t, first.UUID, m.UUID, "the nacked message's counted copy")
	assert.Equal(t, "4", m.Metadata.Get(metadata.AttemptKey), "the copy carries the ledger's count")
	assert.Empty(t, ledger.snapshot(), "the copy carries the count: the ledger forgot it")
	require.NoError(t, ps.Close()) // unsettled: comes back flagged

	ledger.mu.Lock()
	ledger.fail = true
	ledger.mu.Unlock()
	m = crash()
	require.Equal(t, first.UUID, m.UUID)
	assert.Equal(t, "5", m.Metadata.Get(metadata.AttemptKey), "the copy's count and this crash, for this delivery only")
	assert.NotEmpty(t, logger.find("Counting a crash redelivery in the attempt ledger failed, handling it with the attempt counted for this delivery only"))

	ledger.mu.Lock()
	ledger.fail = false
	ledger.mu.Unlock()
	ps = connect(amqpURL)
	msgs, err = ps.Subscribe(context.Background(), queue)
	require.NoError(t, err)
	m = brokertest.Next(t, msgs, 30*time.Second)
	require.Equal(t, first.UUID, m.UUID)
	assert.Equal(t, "5", m.Metadata.Get(metadata.AttemptKey), "counted in the ledger again")
	require.True(t, m.Ack())
	require.Eventually(t, func() bool { return len(ledger.snapshot()) == 0 }, 10*time.Second, 10*time.Millisecond, "an ack forgets it")
}
