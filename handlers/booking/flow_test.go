package booking_test

// The spec on every broker, through the router and the one middleware chain:
// memory runs the memory store and inbox; the durable brokers run the
// Postgres store and inbox. On RabbitMQ, Postgres and memory ".fifo" is only
// a name: the inbox is the dedup gate there, SQS FIFO's own dedup is in
// front of it on SQS.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/handlers/booking"
)

func TestSpecOnEveryBroker(t *testing.T) {
	t.Parallel()
	testbrokers.RunEach(t, []testbrokers.Case{
		{Name: "produced on both transports, applied once", Run: testProducedToEffect},
		{Name: "same event published twice", Run: testPublishedTwice},
		{Name: "order kept within a session", Run: testOrder},
		{Name: "no eventId: DLQ after 5 attempts", Run: testNoEventID},
		{Name: "transient failure then success", Run: testTransientThenSuccess},
		{Name: "order kept when an event fails once", Run: testOrderUnderFailure},
	})
}

// effects wraps the store, counts applied effects and fails Apply while
// fail > 0.
type effects struct {
	booking.Store
	fail    atomic.Int64
	applied atomic.Int64
	// failOnce fails the first Apply of the event with this step id.
	failOnce atomic.Value
}

func (e *effects) Apply(ctx context.Context, ev booking.Event) error {
	if e.fail.Add(-1) >= 0 {
		return errors.New("postgres: connection reset by peer")
	}
	if id, _ := e.failOnce.Load().(string); id != "" && id == ev.StepID && e.failOnce.CompareAndSwap(id, "") {
		return errors.New("postgres: connection reset by peer")
	}
	if err := e.Store.Apply(ctx, ev); err != nil {
		return err
	}
	e.applied.Add(1)
	return nil
}

// deliveries counts handler calls per message id.
type deliveries struct {
	mu   sync.Mutex
	byID map[string]int
}

func (d *deliveries) wrap(next message.NoPublishHandlerFunc) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		d.mu.Lock()
		d.byID[msg.UUID]++
		d.mu.Unlock()
		return next(msg)
	}
}

func (d *deliveries) of(id string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.byID[id]
}

type flow struct {
	b        testbrokers.Kind
	ps       broker.PubSub
	store    booking.Store
	effects  *effects
	queue    string
	dlqName  string
	dlq      <-chan *message.Message
	handled  *deliveries
	producer booking.Producer
}

func newFlow(t *testing.T, b testbrokers.Kind) *flow {
	t.Helper()
	ps := testbrokers.New(t, b.Name, testbrokers.Scope(t, b.Name))
	// Short: the Postgres broker's table name (queue_ + topic) must fit 63 bytes.
	prefix := "t" + strings.ToLower(watermill.NewShortUUID())[:8] + "-"
	logger := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		logger = testbrokers.Logger(t)
	}
	f := &flow{b: b, ps: ps, queue: prefix + booking.Queue, dlqName: prefix + booking.DLQ, handled: &deliveries{byID: map[string]int{}}}
	var ib inbox.Store
	if b.Durable {
		pool, schema := dbtest.Schema(t)
		s, err := booking.NewPostgres(pool, schema)
		require.NoError(t, err)
		f.store = s
		pi, err := inbox.NewPostgres(pool, schema)
		require.NoError(t, err)
		ib = pi
	} else {
		f.store = booking.NewMemory()
		ib = inbox.NewMemory()
	}
	f.effects = &effects{Store: f.store}
	short := route.Backoff{Initial: 200 * time.Millisecond, Multiplier: 1.5, Max: 400 * time.Millisecond, Jitter: 0.1}
	h := booking.Handlers{Store: f.effects, Inbox: ib, Logger: logger, Backoff: short}
	routes := h.Routes()
	require.Len(t, routes, 1)
	r := routes[0]
	assert.Equal(t, route.Policy{MaxAttempts: 5, Redelivery: route.InProcess, Backoff: short, OnPermanent: route.FailUntilMax, DeadLetterQueue: booking.DLQ}, r.Policy)
	assert.Equal(t, booking.Queue, r.Queue)
	r.Queue, r.Policy.DeadLetterQueue = f.queue, f.dlqName
	r.Handle = f.handled.wrap(r.Handle)
	if b.Name != "sqs" {
		// The broker here has no spec topology: the queue is a plain one,
		// which keeps a session's order only when one message is handled
		// at a time. serve declares it ordered (RabbitMQ single active
		// consumer, the Postgres broker's ordered claim), which the adapters
		// handle one at a time whatever the route asks; SQS FIFO orders
		// per group itself.
		r.Concurrency = 1
	}
	f.dlq = testbrokers.Subscribe(t, ps, f.dlqName)
	if init, ok := ps.(message.SubscribeInitializer); ok {
		require.NoError(t, init.SubscribeInitialize(f.queue))
	}
	testbrokers.StartRoutes(t, ps, nil, logger, r)
	f.producer = booking.Producer{Publisher: ps, Queue: f.queue, Logger: logger}
	return f
}

func session(t *testing.T) string { return "bks_" + strings.ToLower(watermill.NewShortUUID()) }

func testProducedToEffect(t *testing.T, b testbrokers.Kind) {
	f := newFlow(t, b)
	ctx := context.Background()
	sid := session(t)
	step := booking.Event{BookingSessionID: sid, Type: booking.TypeStepCompleted, OccurredAt: moment, StepID: "pick-slot", Data: []byte(`{"slot":"10:00"}`)}
	got, err := f.producer.Enqueue(ctx, booking.TransportHTTP, step)
	require.NoError(t, err)
	// The Socket.IO gateway's copy of the same logical event.
	id, err := f.producer.OnSocketEvent(ctx, sid, []byte(`{"type":"step-completed","occurredAt":"2026-11-30T09:14:03.512Z","stepId":"pick-slot","data":{"slot":"10:00"}}`))
	require.NoError(t, err)
	require.Equal(t, got.EventID, id, "both transports derive one id")
	testbrokers.Eventually(t, 2*f.b.Redelivery, "the effect", func() bool {
		s, ok, _ := f.store.Session(ctx, sid)
		return ok && s.Events == 1
	})
	testbrokers.NoMessage(t, f.dlq, time.Second, "dead letter")
	assert.Equal(t, int64(1), f.effects.applied.Load(), "one effect")
	evs, err := f.store.Events(ctx, sid)
	require.NoError(t, err)
	require.Len(t, evs, 1)
	assert.Equal(t, id, evs[0].EventID)
	assert.JSONEq(t, `{"slot":"10:00"}`, string(evs[0].Data))
}

func testPublishedTwice(t *testing.T, b testbrokers.Kind) {
	f := newFlow(t, b)
	ctx := context.Background()
	sid := session(t)
	ev := booking.Event{BookingSessionID: sid, Type: booking.TypeQuestionAnswered, OccurredAt: moment, StepID: "intake"}
	var ids []string
	for range 2 {
		got, err := f.producer.Enqueue(ctx, booking.TransportHTTP, ev)
		require.NoError(t, err)
		ids = append(ids, got.EventID)
	}
	require.Equal(t, ids[0], ids[1])
	// A different event after them, in the same session: on SQS FIFO, once
	// it is applied the copy before it in the group would have been handled.
	marker, err := f.producer.Enqueue(ctx, booking.TransportHTTP, booking.Event{BookingSessionID: sid, Type: booking.TypeBookingCompleted, OccurredAt: moment.Add(time.Second)})
	require.NoError(t, err)
	testbrokers.Eventually(t, 2*f.b.Redelivery, "both events applied", func() bool {
		evs, _ := f.store.Events(ctx, sid)
		return len(evs) == 2
	})
	if b.Name != "sqs" {
		testbrokers.Eventually(t, f.b.Redelivery, "the second copy delivered", func() bool { return f.handled.of(ids[0]) >= 2 })
	}
	testbrokers.NoMessage(t, f.dlq, time.Second, "dead letter")
	evs, err := f.store.Events(ctx, sid)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{ids[0], marker.EventID}, []string{evs[0].EventID, evs[1].EventID})
	s, _, err := f.store.Session(ctx, sid)
	require.NoError(t, err)
	assert.Equal(t, int64(2), s.Events, "one effect for the event published twice")
	assert.Equal(t, int64(2), f.effects.applied.Load())
	if b.Name == "sqs" {
		assert.Equal(t, 1, f.handled.of(ids[0]), "SQS FIFO dropped the second copy (MessageDeduplicationId)")
	} else {
		assert.Equal(t, 2, f.handled.of(ids[0]), "delivered twice; the inbox acknowledged the duplicate")
	}
}

func testOrder(t *testing.T, b testbrokers.Kind) {
	f := newFlow(t, b)
	ctx := context.Background()
	sessions := []string{session(t), session(t)}
	want := map[string][]string{}
	for i := range 8 {
		for j, sid := range sessions {
			// Moments deliberately out of order: the order is the queue's,
			// not the events' clocks.
			ev := booking.Event{BookingSessionID: sid, Type: booking.TypeStepCompleted,
				OccurredAt: moment.Add(time.Duration((8-i)*10+j) * time.Millisecond), StepID: fmt.Sprintf("step-%d", i)}
			got, err := f.producer.Enqueue(ctx, booking.TransportSocketIO, ev)
			require.NoError(t, err)
			want[sid] = append(want[sid], got.EventID)
		}
	}
	testbrokers.Eventually(t, 2*f.b.Redelivery, "all applied", func() bool { return f.effects.applied.Load() == 16 })
	for _, sid := range sessions {
		evs, err := f.store.Events(ctx, sid)
		require.NoError(t, err)
		var got []string
		for _, ev := range evs {
			got = append(got, ev.EventID)
		}
		assert.Equal(t, want[sid], got, "session %s in publish order", sid)
	}
	testbrokers.NoMessage(t, f.dlq, 500*time.Millisecond, "dead letter")
}

func testNoEventID(t *testing.T, b testbrokers.Kind) {
	f := newFlow(t, b)
	sid := session(t)
	// A foreign (or pre-deploy) publisher's body without eventId; the
	// message still has a transport id, which the consumer must not use.
	msg := message.NewMessage(watermill.NewUUID(), []byte(`{"bookingSessionId":"`+sid+`","type":"step-completed","occurredAt":"2026-11-30T09:14:03.512Z","stepId":"pick-slot"}`))
	msg.Metadata.Set(metadata.GroupIDKey, sid)
	require.NoError(t, f.ps.Publish(f.queue, msg))
	select {
	case m := <-f.dlq:
		require.NotNil(t, m)
		m.Ack()
		require.Equal(t, msg.UUID, m.UUID)
		d, ok, err := metadata.DeadLetterOf(m)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, "permanent", d.Class)
		assert.Equal(t, booking.MaxAttempts, d.Attempts, "fail until max receives 5")
		assert.Contains(t, d.Reason, "eventId missing")
		assert.Equal(t, f.queue, d.SourceQueue)
		assert.Equal(t, booking.MaxAttempts, f.handled.of(msg.UUID))
	case <-time.After(3 * f.b.Redelivery):
		require.FailNow(t, "no dead letter")
	}
	assert.Zero(t, f.effects.applied.Load(), "never synthesised, never applied")
	_, ok, err := f.store.Session(context.Background(), sid)
	require.NoError(t, err)
	assert.False(t, ok)
}

func testTransientThenSuccess(t *testing.T, b testbrokers.Kind) {
	f := newFlow(t, b)
	f.effects.fail.Store(2)
	ctx := context.Background()
	sid := session(t)
	got, err := f.producer.Enqueue(ctx, booking.TransportHTTP, booking.Event{BookingSessionID: sid, Type: booking.TypeBookingAbandoned, OccurredAt: moment})
	require.NoError(t, err)
	testbrokers.Eventually(t, 3*f.b.Redelivery, "applied after retries", func() bool {
		s, ok, _ := f.store.Session(ctx, sid)
		return ok && s.Status == booking.StatusAbandoned
	})
	assert.Equal(t, 3, f.handled.of(got.EventID), "two transient failures, then success")
	assert.Equal(t, int64(1), f.effects.applied.Load())
	testbrokers.NoMessage(t, f.dlq, time.Second, "dead letter")
}

// A session's events are applied in order even when one of them fails once
// (a database error): the failing event holds back the later ones of its
// session until it succeeds, it does not go behind them.
func testOrderUnderFailure(t *testing.T, b testbrokers.Kind) {
	f := newFlow(t, b)
	ctx := context.Background()
	sid := session(t)
	f.effects.failOnce.Store("step-03")
	var want []string
	for i := 1; i <= 12; i++ {
		ev := booking.Event{BookingSessionID: sid, Type: booking.TypeStepCompleted,
			OccurredAt: moment.Add(time.Duration(i) * time.Millisecond), StepID: fmt.Sprintf("step-%02d", i)}
		got, err := f.producer.Enqueue(ctx, booking.TransportHTTP, ev)
		require.NoError(t, err)
		want = append(want, got.EventID)
	}
	testbrokers.Eventually(t, 3*f.b.Redelivery, "all applied", func() bool { return f.effects.applied.Load() == 12 })
	evs, err := f.store.Events(ctx, sid)
	require.NoError(t, err)
	var got []string
	for _, ev := range evs {
		got = append(got, ev.EventID)
	}
	assert.Equal(t, want, got, "publish order, the failed event in its place")
	testbrokers.NoMessage(t, f.dlq, 500*time.Millisecond, "dead letter")
}
