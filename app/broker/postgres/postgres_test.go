package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/postgres"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// watermillFeatures are what this broker can promise to Watermill's suite.
// Delivery is at least once (a crashed subscriber or an expired ack deadline
// redelivers), so ExactlyOnceDelivery is off, which also runs the suite's
// no-loss-on-close cases. Order holds for one subscriber; competing
// subscribers interleave.
var watermillFeatures = tests.Features{
	ConsumerGroups:                      false,
	ExactlyOnceDelivery:                 false,
	GuaranteedOrder:                     true,
	GuaranteedOrderWithSingleSubscriber: true,
	Persistent:                          true,
}

func TestConformance(t *testing.T) {
	t.Parallel()
	features := watermillFeatures
	// brokertest hands Watermill one PubSub as both publisher and subscriber,
	// and Watermill's multi-instance cases close the publisher before they
	// subscribe, which closes the whole PubSub. RequireSingleInstance keeps
	// those cases on one instance; TestWatermillSeparateInstances runs them
	// across instances.
	features.RequireSingleInstance = true
	brokertest.Run(t, brokertest.Features{
		Watermill:          features,
		CompetingConsumers: true,
		DropConnections:    dropConnections,
		RedeliveryTimeout:  postgres.DefaultRedeliveryDelay + 5*time.Second,
		QueueStats:         true,
		Peek:               true,
		PeekInOrder:        true,
		Concurrency:        4,
	}, func(t *testing.T) broker.PubSub {
		return newPubSub(t, testConfig(t))
	})
}

// TestWatermillSeparateInstances runs Watermill's cases that need a publisher
// and subscribers on separate instances, which brokertest cannot give them.
func TestWatermillSeparateInstances(t *testing.T) {
	t.Parallel()
	ctor := func(t *testing.T) (message.Publisher, message.Subscriber) {
		cfg := testConfig(t)
		return newPubSub(t, cfg), newPubSub(t, cfg)
	}
	for name, fn := range map[string]func(*testing.T, tests.TestContext, tests.PubSubConstructor){
		"ConcurrentSubscribe":         tests.TestConcurrentSubscribe,
		"PublishSubscribeInOrder":     tests.TestPublishSubscribeInOrder,
		"ContinueAfterErrors":         tests.TestContinueAfterErrors,
		"ContinueAfterSubscribeClose": tests.TestContinueAfterSubscribeClose,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// Short counts: the full ConcurrentSubscribe opens 50 PubSubs at
			// once, beyond the shared server's max_connections of 100.
			features := watermillFeatures
			features.ForceShort = true
			fn(t, tests.TestContext{TestID: tests.NewTestID(), Features: features}, ctor)
		})
	}
}

// Work really spreads over subscribers in separate processes (here: separate
// PubSubs, each with its own pool), and without failures every message is
// delivered exactly once.
func TestCompetingConsumersSpreadWork(t *testing.T) {
	t.Parallel()
	const subscribers, total = 4, 400
	const handlerTime = 5 * time.Millisecond
	cfg := testConfig(t)
	pub := newPubSub(t, cfg)
	topic := brokertest.Topic(t)
	require.NoError(t, pub.SubscribeInitialize(topic))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu     sync.Mutex
		seen   = map[string]int{}
		perSub = make([]int, subscribers)
		done   = make(chan struct{})
	)
	// Every subscriber is polling before the work arrives, so none starts
	// more than a PollInterval late; the work lasts several intervals.
	for i := range subscribers {
		msgs, err := newPubSub(t, cfg).Subscribe(ctx, topic)
		require.NoError(t, err)
		go func() {
			for m := range msgs {
				time.Sleep(handlerTime)
				mu.Lock()
				seen[m.UUID]++
				perSub[i]++
				if len(seen) == total {
					close(done)
				}
				mu.Unlock()
				m.Ack()
			}
		}()
	}

	batch := make([]*message.Message, total)
	for i := range batch {
		batch[i] = message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(i)))
	}
	start := time.Now()
	require.NoError(t, pub.Publish(topic, batch...))
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		require.FailNow(t, "not every message arrived")
	}
	elapsed := time.Since(start)
	time.Sleep(300 * time.Millisecond) // room for a duplicate to show

	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d messages with a %s handler in %s (%.0f msg/s), per subscriber %v",
		total, handlerTime, elapsed, float64(total)/elapsed.Seconds(), perSub)
	for _, m := range batch {
		assert.Equal(t, 1, seen[m.UUID], "deliveries of %s", m.UUID)
	}
	for i, n := range perSub {
		assert.Greater(t, n, total/subscribers/4, "subscriber %d got %d of %d messages: %v", i, n, total, perSub)
	}
}

// A nacked message leaves the subscriber that nacked it: after
// RedeliveryDelay, and not before, any subscriber may take it.
func TestNackReleasesToOtherSubscribers(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.RedeliveryDelay = 700 * time.Millisecond
	pub := newPubSub(t, cfg)
	topic := brokertest.Topic(t)
	require.NoError(t, pub.SubscribeInitialize(topic))
	sent := message.NewMessage(watermill.NewUUID(), []byte("retry me"))
	require.NoError(t, pub.Publish(topic, sent))

	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	msgsA, err := newPubSub(t, cfg).Subscribe(ctxA, topic)
	require.NoError(t, err)
	got := brokertest.Next(t, msgsA, 10*time.Second)
	require.Equal(t, sent.UUID, got.UUID)
	got.Nack()
	nackedAt := time.Now()
	// A stops, once its batch has settled: a nack racing the end of a
	// subscription may be lost, and the message then comes back at once.
	time.Sleep(200 * time.Millisecond)
	cancelA()

	ctxB, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	msgsB, err := newPubSub(t, cfg).Subscribe(ctxB, topic)
	require.NoError(t, err)
	again := brokertest.Next(t, msgsB, 10*time.Second)
	waited := time.Since(nackedAt)
	again.Ack()
	assert.Equal(t, sent.UUID, again.UUID)
	assert.Equal(t, "retry me", string(again.Payload))
	assert.GreaterOrEqual(t, waited, cfg.RedeliveryDelay-50*time.Millisecond, "redelivered before the delay")
}

// Stopping a subscription in the middle of a claimed batch must keep the acks
// it got and give back the rows it has not delivered. watermill-sql's stock
// queue adapter deletes those rows on Close; with its stock pgx adapter a
// cancelled context rolls the acks back.
func TestStopMidBatchLosesNothing(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"Close", "cancel"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			testStopMidBatch(t, how == "cancel")
		})
	}
}

func testStopMidBatch(t *testing.T, cancelInsteadOfClose bool) {
	cfg := testConfig(t)
	cfg.BatchSize = 10
	cfg.AckDeadline = 2 * time.Second
	pub := newPubSub(t, cfg)
	topic := brokertest.Topic(t)
	require.NoError(t, pub.SubscribeInitialize(topic))
	var want []string
	for i := range 20 {
		m := message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(i)))
		want = append(want, m.UUID)
		require.NoError(t, pub.Publish(topic, m))
	}

	first, err := postgres.New(context.Background(), cfg, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = first.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := first.Subscribe(ctx, topic)
	require.NoError(t, err)
	var acked []string
	for range 3 {
		m := brokertest.Next(t, msgs, 10*time.Second)
		acked = append(acked, m.UUID)
		m.Ack()
	}
	// The fourth message is delivered and left unacked when Close comes.
	unacked := brokertest.Next(t, msgs, 10*time.Second)
	if cancelInsteadOfClose {
		cancel()
		// The delivered message is still renewed (a handler may finish
		// during a graceful drain) until its handler is past its deadline.
		broker.StartAttempt(unacked.Context(), time.Now())
		for range msgs { // until the subscription has wound down
		}
	} else {
		require.NoError(t, first.Close())
	}
	unacked.Ack() // too late: the subscription is gone

	second := newPubSub(t, cfg)
	rest, err := second.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	var got, attempts []string
	for range 17 {
		m := brokertest.Next(t, rest, 10*time.Second)
		got = append(got, m.UUID)
		attempts = append(attempts, m.Metadata.Get(metadata.AttemptKey))
		m.Ack()
	}
	assert.Equal(t, want[:3], acked)
	assert.Equal(t, want[3:], got, "every row not acked before Close comes back, in order")
	// The delivered message's attempt counts; the rows claimed with it and
	// never delivered had no attempt.
	assert.Equal(t, append([]string{"1"}, slices.Repeat([]string{"0"}, 16)...), attempts)
	select {
	case m := <-rest:
		require.Failf(t, "unexpected extra delivery", "message %s", m.UUID)
	case <-time.After(300 * time.Millisecond):
	}
}

// A message whose handler is past its deadline (broker.StartAttempt, as the
// Timeout middleware reports it) is no longer renewed: its context is
// cancelled when the lease ends, and it goes back to the queue, counted.
func TestOverdueHandlerLosesItsLease(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.AckDeadline = 500 * time.Millisecond
	ps := newPubSub(t, cfg)
	topic := brokertest.Topic(t)
	sent := message.NewMessage(watermill.NewUUID(), []byte("slow"))
	require.NoError(t, ps.Publish(topic, sent))

	msgs, err := ps.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	stuck := brokertest.Next(t, msgs, 10*time.Second)
	broker.StartAttempt(stuck.Context(), time.Now()) // overdue at once, never ended
	select {
	case <-stuck.Context().Done(): // the end of the lease tells the handler too
	case <-time.After(5 * time.Second):
		require.FailNow(t, "message context not cancelled at the end of its lease")
	}
	again := brokertest.Next(t, msgs, 10*time.Second)
	again.Ack()
	assert.Equal(t, sent.UUID, again.UUID)
	assert.Equal(t, "1", again.Metadata.Get(metadata.AttemptKey), "the expired delivery counts")
}

func TestPublishedBatchKeepsOrderAndMetadata(t *testing.T) {
	t.Parallel()
	ps := newPubSub(t, testConfig(t))
	topic := brokertest.Topic(t)
	var batch []*message.Message
	for i := range 50 {
		m := message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(i)))
		m.Metadata.Set("i", strconv.Itoa(i))
		m.Metadata.Set("note", "ünïcødé — 한국어 "+strings.Repeat("✓", i%5))
		batch = append(batch, m)
	}
	batch[7].Metadata = nil // a publisher may leave it nil
	batch[8].Payload = nil  // and send no body
	require.NoError(t, ps.Publish(topic, batch...))

	msgs, err := ps.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	for i, want := range batch {
		got := brokertest.Next(t, msgs, 10*time.Second)
		got.Ack()
		require.Equal(t, want.UUID, got.UUID, "message %d", i)
		assert.Equal(t, string(want.Payload), string(got.Payload))
		assert.Equal(t, "0", got.Metadata.Get(metadata.AttemptKey), "message %d", i)
		delete(got.Metadata, metadata.AttemptKey)
		if i == 7 {
			assert.Empty(t, got.Metadata)
			got.Metadata.Set("settable", "yes") // not a nil map
			continue
		}
		assert.Equal(t, want.Metadata, got.Metadata)
	}
}

func TestWithoutAutoInitializeTheTableMustExist(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.AutoInitializeSchema = false
	ps := newPubSub(t, cfg)
	topic := brokertest.Topic(t)

	_, err := ps.Subscribe(context.Background(), topic)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "does not exist")
	err = ps.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("x")))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "does not exist")

	require.NoError(t, ps.SubscribeInitialize(topic))
	require.NoError(t, ps.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("x"))))
	msgs, err := ps.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	brokertest.Next(t, msgs, 10*time.Second).Ack()
}

func TestTopicTooLongForATableName(t *testing.T) {
	t.Parallel()
	ps := newPubSub(t, testConfig(t))
	topic := "ept-" + strings.Repeat("x", 60)
	err := ps.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("x")))
	require.ErrorContains(t, err, "63")
	_, err = ps.Subscribe(context.Background(), topic)
	require.ErrorContains(t, err, "63")
	require.ErrorContains(t, ps.SubscribeInitialize(topic), "63")
}

func TestPingAndClose(t *testing.T) {
	t.Parallel()
	ps := newPubSub(t, testConfig(t))
	require.NoError(t, ps.Ping(context.Background()))
	require.NoError(t, ps.Close())
	require.NoError(t, ps.Close(), "Close twice")
	assert.ErrorIs(t, ps.Publish("t", message.NewMessage("1", nil)), postgres.ErrClosed)
	_, err := ps.Subscribe(context.Background(), "t")
	assert.ErrorIs(t, err, postgres.ErrClosed)
	assert.Error(t, ps.Ping(context.Background()))
}

// closedPort returns a local port nothing listens on.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// Unreachable at start: New retries, says so in the log, and gives up when its
// context ends, with an error that names the server.
func TestUnreachableAtStartRetriesUntilContextEnds(t *testing.T) {
	t.Parallel()
	addr := closedPort(t)
	logger := watermill.NewCaptureLogger()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	ps, err := postgres.New(ctx, postgres.Config{DSN: "postgres://postgres@" + addr + "/test?sslmode=disable"}, logger)
	elapsed := time.Since(start)
	require.Error(t, err)
	assert.Nil(t, ps)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), addr)
	assert.Less(t, elapsed, 3*time.Second, "New must return soon after its context ends")
	retries := logger.Captured()[watermill.ErrorLogLevel]
	require.GreaterOrEqual(t, len(retries), 2, "a log line per failed attempt")
	assert.Equal(t, "PostgreSQL not reachable, retrying", retries[0].Msg)
	assert.Equal(t, addr+"/test", retries[0].Fields["addr"])
}

func TestUnreachableAtStartStopsOnCancel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := postgres.New(ctx, postgres.Config{DSN: "postgres://postgres@" + closedPort(t) + "/test"}, nil)
		errc <- err
	}()
	time.Sleep(700 * time.Millisecond)
	cancel()
	select {
	case err := <-errc:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(2 * time.Second):
		require.FailNow(t, "New still retrying after its context was cancelled")
	}
}

// The service starts a few seconds before its database: New waits and then
// works.
func TestDatabaseComingUpLate(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	real, err := pgconn.ParseConfig(cfg.DSN)
	require.NoError(t, err)
	target := net.JoinHostPort(real.Host, strconv.Itoa(int(real.Port)))
	addr := closedPort(t)
	cfg.DSN = fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", addr, real.Database)

	// The "database" appears after 1.5 s: a proxy to the real one.
	listening := make(chan net.Listener, 1)
	t.Cleanup(func() {
		select {
		case l := <-listening:
			_ = l.Close()
		default:
		}
	})
	go func() {
		time.Sleep(1500 * time.Millisecond)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return // New then times out and the test says why
		}
		listening <- l
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go proxy(c, target)
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	ps, err := postgres.New(ctx, cfg, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ps.Close() })
	assert.GreaterOrEqual(t, time.Since(start), time.Second)

	topic := brokertest.Topic(t)
	sent := message.NewMessage(watermill.NewUUID(), []byte("late"))
	require.NoError(t, ps.Publish(topic, sent))
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)
	got := brokertest.Next(t, msgs, 10*time.Second)
	got.Ack()
	assert.Equal(t, sent.UUID, got.UUID)
}

func proxy(c net.Conn, target string) {
	defer c.Close()
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

// Waiting cannot fix a database that does not exist: New says so at once.
func TestMissingDatabaseFailsAtOnce(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	real, err := pgconn.ParseConfig(cfg.DSN)
	require.NoError(t, err)
	cfg.DSN = fmt.Sprintf("postgres://postgres@%s:%d/eventpipe_no_such_db?sslmode=disable", real.Host, real.Port)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err = postgres.New(ctx, cfg, nil)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	assert.Equal(t, "3D000", pgErr.Code)
	assert.Less(t, time.Since(start), 5*time.Second)
}

func TestValidateReportsEveryProblem(t *testing.T) {
	t.Parallel()
	cfg := postgres.Config{
		DSN:               "",
		ApplicationName:   strings.Repeat("a", 64),
		MaxConns:          -1,
		MaxPublishConns:   -2,
		ConnectTimeout:    -time.Second,
		PollInterval:      -time.Second,
		RetryInterval:     -time.Second,
		BatchSize:         postgres.MaxBatchSize + 1,
		AckDeadline:       -time.Second,
		RedeliveryDelay:   -time.Second,
		Schema:            strings.Repeat("s", 64),
		TablePrefix:       strings.Repeat("p", 63),
		QueueBatchSizes:   map[string]int{"q1": 0, "q2": postgres.MaxBatchSize + 1, "ok": 7},
		QueueAckDeadlines: map[string]time.Duration{"q3": 0, "ok": time.Minute},
	}
	_, err := postgres.New(context.Background(), cfg, nil)
	require.Error(t, err)
	for _, want := range []string{
		"DSN is required", "application name", "max conns", "max publish conns",
		"connect timeout", "poll interval", "retry interval", "batch size",
		"ack deadline", "redelivery delay", "schema", "table prefix",
		"batch size 0 of queue q1", "batch size 1001 of queue q2", "ack deadline 0s of queue q3",
	} {
		assert.Contains(t, err.Error(), want)
	}
	var joined interface{ Unwrap() []error }
	require.True(t, errors.As(err, &joined))
	assert.Len(t, joined.Unwrap(), 15)

	bad := postgres.Config{DSN: "postgres://%zz"}
	assert.ErrorContains(t, bad.Validate(), "DSN")
	assert.NoError(t, postgres.Config{DSN: "postgres://localhost/db"}.Validate(), "zero values mean defaults")
}
