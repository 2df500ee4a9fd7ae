package app_test

// The behaviour matrix: the same failure contracts, checked end to end through
// the router and the one middleware chain, on every broker.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/dbtx"
	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/msgctx"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/app/testenv"
)

// Environment variables of the crash child process.
const (
	childKindEnv  = "EVENTPIPE_TEST_CHILD_KIND"
	childScopeEnv = "EVENTPIPE_TEST_CHILD_SCOPE"
	childQueueEnv = "EVENTPIPE_TEST_CHILD_QUEUE"
)

// effects records what a handler did, per message id.
type effects struct {
	mu       sync.Mutex
	attempts map[string][]int
	done     map[string]int
	changed  chan struct{}
}

func newEffects() *effects {
	return &effects{attempts: map[string][]int{}, done: map[string]int{}, changed: make(chan struct{}, 1)}
}

func (e *effects) attempt(msg *message.Message) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.attempts[msg.UUID] = append(e.attempts[msg.UUID], msgctx.Attempt(msg.Context()))
	e.notify()
}

func (e *effects) effect(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.done[id]++
	e.notify()
}

func (e *effects) notify() {
	select {
	case e.changed <- struct{}{}:
	default:
	}
}

func (e *effects) snapshot(id string) (attempts []int, done int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.attempts[id]), e.done[id]
}

// waitFor waits until cond holds for message id, or fails the test.
func (e *effects) waitFor(t *testing.T, id string, timeout time.Duration, what string, cond func(attempts []int, done int) bool) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		attempts, done := e.snapshot(id)
		if cond(attempts, done) {
			return
		}
		select {
		case <-e.changed:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			require.Failf(t, "condition not met in time", "%s: not within %s (attempts %v, effects %d)", what, timeout, attempts, done)
		}
	}
}

// startRoute runs one route on ps until the test ends or stop is called.
func startRoute(t *testing.T, ps broker.PubSub, r route.Route) (stop func()) {
	t.Helper()
	return testbrokers.StartRoutes(t, ps, nil, nil, r)
}

// subscribeDLQ starts consuming the dead-letter queue before anything can be
// dead-lettered (the embedded broker keeps nothing for absent subscribers).
func subscribeDLQ(t *testing.T, ps broker.PubSub, dlq string) <-chan *message.Message {
	t.Helper()
	return testbrokers.Subscribe(t, ps, dlq)
}

func publish(t *testing.T, ps broker.PubSub, queue string, msgs ...*message.Message) {
	t.Helper()
	if init, ok := ps.(message.SubscribeInitializer); ok {
		require.NoError(t, init.SubscribeInitialize(queue))
	}
	require.NoError(t, ps.Publish(queue, msgs...))
}

func testPolicy(redelivery route.Redelivery, onPermanent route.OnPermanent, dlq string) route.Policy {
	return route.Policy{
		MaxAttempts:     3,
		Redelivery:      redelivery,
		Backoff:         route.Backoff{Initial: 300 * time.Millisecond, Multiplier: 2, Max: time.Second, Jitter: 0.1},
		OnPermanent:     onPermanent,
		DeadLetterQueue: dlq,
	}
}

var errDatabaseRestarting = errors.New("database is restarting")

func TestBehaviourMatrix(t *testing.T) {
	t.Parallel()
	testbrokers.RunEach(t, []testbrokers.Case{
		{Name: "transient twice then success, in process", Run: func(t *testing.T, b testbrokers.Kind) {
			testTransientThenSuccess(t, b, route.InProcess)
		}},
		{Name: "transient twice then success, broker redelivery", Run: func(t *testing.T, b testbrokers.Kind) {
			testTransientThenSuccess(t, b, route.Broker)
		}},
		{Name: "permanent, drop", Run: testPermanentDrop},
		{Name: "permanent, dead-letter at once", Run: testPermanentDeadLetter},
		{Name: "permanent, fail until max", Run: testPermanentFailUntilMax},
		{Name: "transient forever", Run: testTransientForever},
		{Name: "duplicate delivery", Run: testDuplicateDelivery},
		{Name: "shutdown during processing", Run: testShutdownDuringProcessing},
		{Name: "consumer killed mid-handler", Run: testKilledMidHandler},
	})
}

type fixture struct {
	ps      broker.PubSub
	queue   string
	dlq     string
	dead    <-chan *message.Message
	effects *effects
	scope   string
}

func newFixture(t *testing.T, b testbrokers.Kind) *fixture {
	t.Helper()
	scope := testbrokers.Scope(t, b.Name)
	ps := testbrokers.New(t, b.Name, scope)
	queue := brokertest.Topic(t)
	dlq := queue + "-dlq"
	return &fixture{ps: ps, queue: queue, dlq: dlq, dead: subscribeDLQ(t, ps, dlq), effects: newEffects(), scope: scope}
}

func (f *fixture) route(policy route.Policy, handle func(msg *message.Message) error) route.Route {
	return route.Route{
		Name:  "behaviour",
		Queue: f.queue,
		Handle: func(msg *message.Message) error {
			f.effects.attempt(msg)
			return handle(msg)
		},
		Policy: policy,
	}
}

func newTracedMessage(payload string) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
	msg.Metadata.Set(metadata.TraceIDKey, msgctx.NewTraceID())
	return msg
}

// expectDeadLetter waits for msg's dead letter and checks its history.
func (f *fixture) expectDeadLetter(t *testing.T, b testbrokers.Kind, msg *message.Message, class string, attempts int, reason string) {
	t.Helper()
	dl := brokertest.Next(t, f.dead, 3*b.Redelivery)
	dl.Ack()
	assert.Equal(t, msg.UUID, dl.UUID, "the dead letter keeps the message id")
	assert.Equal(t, string(msg.Payload), string(dl.Payload))
	info, ok, err := metadata.DeadLetterOf(dl)
	require.NoError(t, err)
	require.True(t, ok, "dead letter without its history: %v", dl.Metadata)
	assert.Equal(t, class, info.Class)
	assert.Equal(t, attempts, info.Attempts)
	assert.Contains(t, info.Reason, reason)
	assert.Equal(t, f.queue, info.SourceQueue)
	assert.Equal(t, msg.Metadata.Get(metadata.TraceIDKey), info.TraceID)
	assert.Equal(t, msg.Metadata.Get(metadata.TraceIDKey), dl.Metadata.Get(metadata.TraceIDKey))
	assert.False(t, info.FirstFailureAt.After(info.LastFailureAt), "first failure %s after last %s", info.FirstFailureAt, info.LastFailureAt)
	assert.WithinDuration(t, time.Now(), info.DeadLetteredAt, time.Minute)
}

func testTransientThenSuccess(t *testing.T, b testbrokers.Kind, redelivery route.Redelivery) {
	f := newFixture(t, b)
	msg := newTracedMessage(`{"n":1}`)
	startRoute(t, f.ps, f.route(testPolicy(redelivery, route.DeadLetter, f.dlq), func(m *message.Message) error {
		if msgctx.Attempt(m.Context()) < 3 {
			return errDatabaseRestarting
		}
		f.effects.effect(m.UUID)
		return nil
	}))
	publish(t, f.ps, f.queue, msg)

	f.effects.waitFor(t, msg.UUID, 3*b.Redelivery, "one effect", func(_ []int, done int) bool { return done == 1 })
	testbrokers.NoMessage(t, f.dead, time.Second, "nothing dead-lettered")
	attempts, done := f.effects.snapshot(msg.UUID)
	assert.Equal(t, []int{1, 2, 3}, attempts, "the handler saw attempts 1, 2 and 3")
	assert.Equal(t, 1, done)
}

func testPermanentDrop(t *testing.T, b testbrokers.Kind) {
	f := newFixture(t, b)
	msg := newTracedMessage(`not json`)
	startRoute(t, f.ps, f.route(testPolicy(route.Broker, route.Drop, f.dlq), func(*message.Message) error {
		return failure.Permanentf("decode body: %w", errors.New("invalid character 'o'"))
	}))
	publish(t, f.ps, f.queue, msg)

	f.effects.waitFor(t, msg.UUID, b.Redelivery, "first attempt", func(a []int, _ int) bool { return len(a) == 1 })
	testbrokers.NoMessage(t, f.dead, 2*time.Second, "a dropped message is not dead-lettered")
	attempts, _ := f.effects.snapshot(msg.UUID)
	assert.Equal(t, []int{1}, attempts, "a dropped message is acked, never redelivered")
}

func testPermanentDeadLetter(t *testing.T, b testbrokers.Kind) {
	f := newFixture(t, b)
	msg := newTracedMessage(`{"messageType":`)
	startRoute(t, f.ps, f.route(testPolicy(route.InProcess, route.DeadLetter, f.dlq), func(*message.Message) error {
		return failure.Permanentf("parse envelope: %w", errors.New("unexpected end of JSON input"))
	}))
	publish(t, f.ps, f.queue, msg)

	f.expectDeadLetter(t, b, msg, "permanent", 1, "unexpected end of JSON input")
	attempts, _ := f.effects.snapshot(msg.UUID)
	assert.Equal(t, []int{1}, attempts, "dead-lettered at once, not retried")
}

func testPermanentFailUntilMax(t *testing.T, b testbrokers.Kind) {
	f := newFixture(t, b)
	msg := newTracedMessage(`{"event_type":"unknown"}`)
	startRoute(t, f.ps, f.route(testPolicy(route.Broker, route.FailUntilMax, f.dlq), func(*message.Message) error {
		return failure.Permanentf("unknown event type %q", "unknown")
	}))
	publish(t, f.ps, f.queue, msg)

	f.expectDeadLetter(t, b, msg, "permanent", 3, "unknown event type")
	attempts, _ := f.effects.snapshot(msg.UUID)
	assert.Equal(t, []int{1, 2, 3}, attempts, "one attempt per delivery until the maximum")
}

func testTransientForever(t *testing.T, b testbrokers.Kind) {
	f := newFixture(t, b)
	msg := newTracedMessage(`{"n":2}`)
	startRoute(t, f.ps, f.route(testPolicy(route.Broker, route.DeadLetter, f.dlq), func(*message.Message) error {
		return errDatabaseRestarting
	}))
	publish(t, f.ps, f.queue, msg)

	f.expectDeadLetter(t, b, msg, "transient", 3, errDatabaseRestarting.Error())
	attempts, done := f.effects.snapshot(msg.UUID)
	assert.Equal(t, []int{1, 2, 3}, attempts)
	assert.Zero(t, done)
}

// testDuplicateDelivery publishes one message twice (the same id, as a
// producer's retry or an outbox relay's crash does). The effect runs through
// the inbox — on Postgres in the effect's own transaction — so it happens once
// and the second delivery is acked as a duplicate.
func testDuplicateDelivery(t *testing.T, b testbrokers.Kind) {
	f := newFixture(t, b)
	var (
		store       inbox.Store
		countEffect func() int
		effect      func(ctx context.Context, id string) error
	)
	if b.Durable {
		pool, schema := dbtest.Schema(t)
		table := pgx.Identifier{schema, "behaviour_effects"}.Sanitize()
		_, err := pool.Exec(context.Background(), `CREATE TABLE `+table+` (message_id text NOT NULL)`)
		require.NoError(t, err)
		pg, err := inbox.NewPostgres(pool, schema)
		require.NoError(t, err)
		store = pg
		effect = func(ctx context.Context, id string) error {
			tx, ok := dbtx.From(ctx)
			require.True(t, ok, "the effect runs in the inbox's transaction")
			_, err := tx.Exec(ctx, `INSERT INTO `+table+` VALUES ($1)`, id)
			return err
		}
		countEffect = func() int {
			var n int
			require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM `+table).Scan(&n))
			return n
		}
	} else {
		store = inbox.NewMemory()
		var n atomic.Int64
		effect = func(context.Context, string) error { n.Add(1); return nil }
		countEffect = func() int { return int(n.Load()) }
	}
	startRoute(t, f.ps, f.route(testPolicy(route.InProcess, route.DeadLetter, f.dlq), func(m *message.Message) error {
		return store.Process(m.Context(), "behaviour", m.UUID, func(ctx context.Context) error {
			return effect(ctx, m.UUID)
		})
	}))
	msg := newTracedMessage(`{"n":3}`)
	publish(t, f.ps, f.queue, msg)
	publish(t, f.ps, f.queue, msg.Copy())

	f.effects.waitFor(t, msg.UUID, b.Redelivery, "both deliveries", func(a []int, _ int) bool { return len(a) == 2 })
	testbrokers.NoMessage(t, f.dead, time.Second, "a duplicate is not dead-lettered")
	attempts, _ := f.effects.snapshot(msg.UUID)
	assert.Equal(t, 1, countEffect(), "one effect")
	assert.Equal(t, []int{1, 1}, attempts, "the duplicate is acked, not retried")
}

// testShutdownDuringProcessing stops the consumer while its handler runs: the
// handler's context ends, the message goes back to the broker (never to the
// DLQ), and the next consumer handles it.
func testShutdownDuringProcessing(t *testing.T, b testbrokers.Kind) {
	if !b.Durable {
		t.Log("the embedded broker's messages live in the consumer's process; a stopped consumer takes them along by design")
		return
	}
	f := newFixture(t, b)
	msg := newTracedMessage(`{"n":4}`)
	started := make(chan struct{}, 1)
	stop := startRoute(t, f.ps, f.route(testPolicy(route.InProcess, route.DeadLetter, f.dlq), func(m *message.Message) error {
		started <- struct{}{}
		select {
		case <-m.Context().Done():
			return m.Context().Err()
		case <-time.After(time.Minute):
			return errors.New("the shutdown never reached the handler")
		}
	}))
	publish(t, f.ps, f.queue, msg)
	select {
	case <-started:
	case <-time.After(b.Redelivery):
		require.FailNow(t, "the handler never started")
	}
	stop() // the router closes its subscriber, as serve does at exit

	restarted := testbrokers.New(t, b.Name, f.scope)
	f.dead = subscribeDLQ(t, restarted, f.dlq)
	startRoute(t, restarted, f.route(testPolicy(route.InProcess, route.DeadLetter, f.dlq), func(m *message.Message) error {
		f.effects.effect(m.UUID)
		return nil
	}))
	f.effects.waitFor(t, msg.UUID, 3*b.Redelivery, "handled after the restart", func(_ []int, done int) bool { return done == 1 })
	testbrokers.NoMessage(t, f.dead, time.Second, "shutdown never dead-letters")
}

// testKilledMidHandler runs the consumer in a child process, kills it with
// SIGKILL while the handler runs, and checks that the message comes back to
// the next consumer and has its effect once.
func testKilledMidHandler(t *testing.T, b testbrokers.Kind) {
	if !b.Durable {
		t.Log("the embedded broker dies with its process, messages included, by design")
		return
	}
	f := newFixture(t, b)
	msg := newTracedMessage(`{"n":5}`)
	publish(t, f.ps, f.queue, msg)

	id := testenv.KillChildAt(t, "TestBehaviourCrashChild", "HANDLING ",
		childKindEnv+"="+b.Name, childScopeEnv+"="+f.scope, childQueueEnv+"="+f.queue)
	require.Equal(t, msg.UUID, id)

	startRoute(t, f.ps, f.route(testPolicy(route.InProcess, route.DeadLetter, f.dlq), func(m *message.Message) error {
		f.effects.effect(m.UUID)
		return nil
	}))
	f.effects.waitFor(t, msg.UUID, 3*b.Redelivery, "redelivered after the crash", func(_ []int, done int) bool { return done == 1 })
	testbrokers.NoMessage(t, f.dead, time.Second, "nothing dead-lettered")
	_, done := f.effects.snapshot(msg.UUID)
	assert.Equal(t, 1, done)
}

// TestBehaviourCrashChild is the consumer testKilledMidHandler kills: that
// test runs this binary again with -test.run=^TestBehaviourCrashChild$ and
// the child*Env variables set. Run any other way (go test ./app/, or -run
// TestBehaviour) it skips, saying so, rather than pass without testing
// anything.
func TestBehaviourCrashChild(t *testing.T) {
	kind := os.Getenv(childKindEnv)
	if kind == "" {
		t.Skipf("not a test on its own: the child process testKilledMidHandler starts (with %s set) and kills", childKindEnv)
	}
	ps := testbrokers.New(t, kind, os.Getenv(childScopeEnv))
	startRoute(t, ps, route.Route{
		Name:  "doomed",
		Queue: os.Getenv(childQueueEnv),
		Handle: func(m *message.Message) error {
			fmt.Println("HANDLING " + m.UUID)
			time.Sleep(10 * time.Minute) // until SIGKILL
			return nil
		},
	})
	time.Sleep(10 * time.Minute)
}

// A foreign publisher's message over the 1 MiB limit (RabbitMQ accepts up to
// 128 MiB) never reaches the handler: it is dead-lettered at once with the
// reason, and the queue moves on.
func TestOversizedForeignMessageIsDeadLettered(t *testing.T) {
	t.Parallel()
	b := testbrokers.Kinds[1]
	require.Equal(t, "rabbitmq", b.Name)
	f := newFixture(t, b)
	var handled atomic.Int64
	startRoute(t, f.ps, f.route(testPolicy(route.InProcess, route.FailUntilMax, f.dlq), func(*message.Message) error {
		handled.Add(1)
		return nil
	}))

	conn, err := amqp.Dial(f.scope)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	big := make([]byte, broker.MaxPayloadBytes+1)
	require.NoError(t, ch.PublishWithContext(context.Background(), "", f.queue, false, false, amqp.Publishing{MessageId: "huge-1", Body: big}))
	require.NoError(t, ch.PublishWithContext(context.Background(), "", f.queue, false, false, amqp.Publishing{MessageId: "small-1", Body: []byte(`{}`)}))

	dl := brokertest.Next(t, f.dead, 3*b.Redelivery)
	dl.Ack()
	assert.Equal(t, "huge-1", dl.UUID)
	assert.Len(t, dl.Payload, broker.MaxPayloadBytes+1, "the dead letter keeps what arrived")
	info, ok, err := metadata.DeadLetterOf(dl)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Contains(t, info.Reason, "exceeds")
	require.Eventually(t, func() bool { return handled.Load() == 1 }, b.Redelivery, 50*time.Millisecond, "the message behind it is handled")
}
