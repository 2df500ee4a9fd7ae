package rabbitmq_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/rabbitmq"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/topology"
)

// The features are those watermill-amqp claims for its own durable-queue
// configuration (TestPublishSubscribe_queue): a queue has no consumer groups,
// and keeps order for a single subscriber.
//
// RequireSingleInstance is set although RabbitMQ needs no such thing:
// brokertest hands Watermill's suite one object as both publisher and
// subscriber, and the suite's multi-instance cases close the "publisher" half
// of each extra instance — here, the whole instance — before subscribing with
// it. TestWatermillSeparateInstances runs those cases with real separate
// instances.
//
// Watermill's TestReconnect stays off (no RestartServiceCommand): restarting
// the shared broker would break the tests of every other package running at
// the same time. DropConnections covers reconnecting instead, inside this
// test's own vhost.
func TestConformance(t *testing.T) {
	t.Parallel()
	amqpURL, vhost := newVhost(t)
	brokertest.Run(t, brokertest.Features{
		Concurrency:        4,
		Watermill:          queueFeatures(true),
		CompetingConsumers: true,
		DropConnections:    func(t *testing.T) { dropConnections(t, vhost) },
		// .ci/services enables the management plugin: in flight is known.
		QueueStats: true,
		// Through the management API: requeued in place, flagged
		// redelivered (decision 0029).
		Peek:               true,
		PeekInOrder:        true,
		PeekCountsDelivery: true,
	}, func(t *testing.T) broker.PubSub {
		return newPubSub(t, amqpURL, nil)
	})
}

func queueFeatures(singleInstance bool) tests.Features {
	return tests.Features{
		ConsumerGroups:                      false,
		ExactlyOnceDelivery:                 false,
		GuaranteedOrder:                     true,
		GuaranteedOrderWithSingleSubscriber: true,
		Persistent:                          true,
		RequireSingleInstance:               singleInstance,
	}
}

// The two Watermill cases that spread a topic over several broker instances
// (ten competing subscribers; ordering with one), with the publisher and each
// subscriber a PubSub of its own.
func TestWatermillSeparateInstances(t *testing.T) {
	t.Parallel()
	amqpURL, _ := newVhost(t)
	ctor := func(t *testing.T) (message.Publisher, message.Subscriber) {
		return newPubSub(t, amqpURL, nil), newPubSub(t, amqpURL, nil)
	}
	for name, run := range map[string]func(*testing.T, tests.TestContext, tests.PubSubConstructor){
		"TestConcurrentSubscribe":     tests.TestConcurrentSubscribe,
		"TestPublishSubscribeInOrder": tests.TestPublishSubscribeInOrder,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			run(t, tests.TestContext{TestID: tests.NewTestID(), Features: queueFeatures(false)}, ctor)
		})
	}
}

// dropConnections must stay inside its vhost, or TestConformance would cut
// the connections of every other test using the broker.
func TestDropConnectionsStaysInVhost(t *testing.T) {
	t.Parallel()
	mineURL, mine := newVhost(t)
	otherURL, _ := newVhost(t)

	dial := func(u string) (*amqp.Connection, chan *amqp.Error) {
		c, err := amqp.Dial(u)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c, c.NotifyClose(make(chan *amqp.Error, 1))
	}
	_, mineClosed := dial(mineURL)
	other, otherClosed := dial(otherURL)

	dropConnections(t, mine)

	select {
	case err := <-mineClosed:
		require.NotNil(t, err)
		assert.Equal(t, amqp.ConnectionForced, err.Code)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the connection in the test's vhost was not closed")
	}
	select {
	case err := <-otherClosed:
		require.Failf(t, "a connection in another vhost was closed", "close error: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	assert.False(t, other.IsClosed())
}

// A message from a foreign publisher, with RabbitMQ's own header types and no
// AMQP properties, is delivered with every header as a string (its
// x-attempt honoured as its earlier attempts).
func TestForeignMessageWithTypedHeaders(t *testing.T) {
	t.Parallel()
	amqpURL, _ := newVhost(t)
	ps := newPubSub(t, amqpURL, nil)
	topic := brokertest.Topic(t)
	require.NoError(t, ps.SubscribeInitialize(topic))

	conn, err := amqp.Dial(amqpURL)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	died := time.Date(2026, 4, 27, 15, 0, 0, 0, time.UTC)
	require.NoError(t, ch.PublishWithContext(context.Background(), "", topic, false, false, amqp.Publishing{
		Headers: amqp.Table{
			"x-death": []any{amqp.Table{
				"count":        int64(2),
				"exchange":     "stackup.core-to-ai",
				"queue":        "ai.analyze.resume",
				"reason":       "rejected",
				"routing-keys": []any{"analyze.resume"},
				"time":         died,
			}},
			"x-delivery-count": int64(3),
			"x-attempt":        int32(1),
			"redelivered-flag": true,
			"raw":              []byte("bytes"),
			"x-trace-id":       "local-test",
		},
		Body: []byte(`{"messageId":"smoke-1"}`),
	}))

	got := receiveOne(t, ps, topic)
	_, err = uuid.Parse(got.UUID)
	assert.NoError(t, err, "a message without any id gets a fresh UUID")
	assert.Equal(t, `{"messageId":"smoke-1"}`, string(got.Payload))
	assert.Equal(t, map[string]string{
		"x-death":          `[{"count":2,"exchange":"stackup.core-to-ai","queue":"ai.analyze.resume","reason":"rejected","routing-keys":["analyze.resume"],"time":"2026-04-27T15:00:00Z"}]`,
		"x-delivery-count": "3",
		// The publisher's x-attempt is honoured (its earlier attempts); a
		// classic queue's x-delivery-count counts nothing.
		"x-attempt":        "1",
		"redelivered-flag": "true",
		"raw":              "bytes",
		"x-trace-id":       "local-test",
	}, map[string]string(got.Metadata))
}

// The x-death RabbitMQ writes when it dead-letters a message is readable, and
// message_id (set by a foreign publisher) becomes the UUID.
func TestDeadLetteredByRabbitMQ(t *testing.T) {
	t.Parallel()
	amqpURL, _ := newVhost(t)
	ps := newPubSub(t, amqpURL, nil)
	topic := brokertest.Topic(t)
	require.NoError(t, ps.SubscribeInitialize(topic))

	conn, err := amqp.Dial(amqpURL)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	// Messages expire on arrival and RabbitMQ dead-letters them to topic.
	source := topic + "-source"
	_, err = ch.QueueDeclare(source, false, true, false, false, amqp.Table{
		"x-message-ttl":             int32(0),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": topic,
	})
	require.NoError(t, err)
	require.NoError(t, ch.PublishWithContext(context.Background(), "", source, false, false, amqp.Publishing{
		MessageId: "smoke-1",
		Body:      []byte("expires at once"),
	}))

	got := receiveOne(t, ps, topic)
	assert.Equal(t, "smoke-1", got.UUID)

	var deaths []map[string]any
	require.NoError(t, json.Unmarshal([]byte(got.Metadata.Get("x-death")), &deaths), "x-death: %q", got.Metadata.Get("x-death"))
	require.Len(t, deaths, 1)
	assert.Equal(t, "expired", deaths[0]["reason"])
	assert.Equal(t, source, deaths[0]["queue"])
	assert.EqualValues(t, 1, deaths[0]["count"])
	assert.Equal(t, source, got.Metadata.Get("x-first-death-queue"))
}

// Our publishes carry message_id = UUID (the StackUp contract) and the
// property metadata, as a foreign consumer sees them.
func TestPublishSetsAMQPProperties(t *testing.T) {
	t.Parallel()
	amqpURL, _ := newVhost(t)
	ps := newPubSub(t, amqpURL, nil)
	topic := brokertest.Topic(t)

	msg := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
	msg.Metadata.Set(rabbitmq.MetadataContentType, "application/json")
	msg.Metadata.Set(rabbitmq.MetadataContentEncoding, "utf-8")
	msg.Metadata.Set(rabbitmq.MetadataCorrelationID, "request-7")
	msg.Metadata.Set("x-trace-id", "trace-1")
	// Publishing before anyone subscribed: the queue is declared on first use.
	require.NoError(t, ps.Publish(topic, msg))

	conn, err := amqp.Dial(amqpURL)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	d, ok, err := ch.Get(topic, true)
	require.NoError(t, err)
	require.True(t, ok, "the message is in the queue")
	assert.Equal(t, msg.UUID, d.MessageId)
	assert.Equal(t, "application/json", d.ContentType)
	assert.Equal(t, "utf-8", d.ContentEncoding)
	assert.Equal(t, "request-7", d.CorrelationId)
	assert.Equal(t, amqp.Persistent, d.DeliveryMode)
	assert.Equal(t, "trace-1", d.Headers["x-trace-id"])
	assert.NotContains(t, d.Headers, rabbitmq.MetadataContentType)
}

// rejectOverflow declares every topic's queue with room for one message and
// overflow reject-publish: RabbitMQ then nacks the second publish, which only
// publisher confirms can observe.
type rejectOverflow struct{ rabbitmq.DurableQueues }

func (rejectOverflow) Declare(ch *amqp.Channel, topic string) error {
	_, err := ch.QueueDeclare(topic, true, false, false, false, amqp.Table{
		"x-max-length": int32(1),
		"x-overflow":   "reject-publish",
	})
	return err
}

func TestPublisherConfirms(t *testing.T) {
	t.Parallel()
	amqpURL, vhost := newVhost(t)

	for _, tc := range []struct {
		name         string
		disable      bool
		wantRejected bool
	}{
		{"on by default: a rejected publish is an error", false, true},
		{"disabled: a rejected publish is lost silently", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := newPubSub(t, amqpURL, func(c *rabbitmq.Config) {
				c.Topology = rejectOverflow{}
				c.DisableConfirms = tc.disable
			})
			topic := brokertest.Topic(t)
			first := message.NewMessage(watermill.NewUUID(), []byte("fits"))
			require.NoError(t, ps.Publish(topic, first))

			second := message.NewMessage(watermill.NewUUID(), []byte("overflows"))
			err := ps.Publish(topic, second)
			if tc.wantRejected {
				require.ErrorIs(t, err, rabbitmq.ErrNotConfirmed)
				assert.Contains(t, err.Error(), second.UUID)
			} else {
				require.NoError(t, err)
			}
			// Either way the broker kept only the first message.
			assert.Equal(t, "1", queueDepth(t, vhost, topic))

			// The pooled channel survives a nack.
			got := receiveOne(t, ps, topic)
			assert.Equal(t, first.UUID, got.UUID)
			require.NoError(t, ps.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("fits again"))))
		})
	}
}

// Quorum queues count every redelivery themselves (x-delivery-count): a nack
// is a native requeue, and so is a delivery the consumer did not settle.
func TestQuorumQueue(t *testing.T) {
	t.Parallel()
	amqpURL, vhost := newVhost(t)
	quorum := func(c *rabbitmq.Config) { c.QueueType = rabbitmq.QueueQuorum }
	ps := newPubSub(t, amqpURL, quorum)
	topic := brokertest.Topic(t)

	sent := message.NewMessage(watermill.NewUUID(), []byte("count me"))
	require.NoError(t, ps.Publish(topic, sent))
	assert.Contains(t, rabbitmqctl(t, "list_queues", "-p", vhost, "name", "type"), topic+"\tquorum")

	msgs, err := ps.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	first := brokertest.Next(t, msgs, 30*time.Second)
	assert.Equal(t, sent.UUID, first.UUID)
	assert.Equal(t, "0", first.Metadata.Get(metadata.AttemptKey))
	first.Nack()
	again := brokertest.Next(t, msgs, 30*time.Second)
	assert.Equal(t, sent.UUID, again.UUID)
	assert.Equal(t, "1", again.Metadata.Get(metadata.AttemptKey), "the nack is counted")
	assert.Equal(t, "1", again.Metadata.Get("x-delivery-count"), "by the broker")
	// Neither acked nor nacked: closing gives it back to the queue, which
	// counts that delivery itself.
	require.NoError(t, ps.Close())

	ps2 := newPubSub(t, amqpURL, quorum)
	msgs2, err := ps2.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	third := brokertest.Next(t, msgs2, 30*time.Second)
	third.Ack()
	assert.Equal(t, sent.UUID, third.UUID)
	assert.Equal(t, "2", third.Metadata.Get(metadata.AttemptKey), "the unsettled delivery is counted by the broker")
}

func TestBrokerUnreachable(t *testing.T) {
	t.Parallel()

	t.Run("retries with a clear log line until ctx ends", func(t *testing.T) {
		t.Parallel()
		logger := newRecordingLogger()
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		start := time.Now()
		ps, err := rabbitmq.New(ctx, rabbitmq.Config{
			URL:                      "amqp://guest:secret@" + closedPort(t) + "/",
			ReconnectInitialInterval: 50 * time.Millisecond,
		}, logger)
		require.Error(t, err)
		assert.Nil(t, ps)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, time.Since(start), 3*time.Second)
		assert.NotContains(t, err.Error(), "secret", "the password is redacted")

		retries := logger.find("RabbitMQ unreachable, retrying")
		require.GreaterOrEqual(t, len(retries), 3, "one log line per failed attempt")
		line := retries[0]
		assert.Equal(t, "error", line.level)
		assert.Error(t, line.err)
		assert.Contains(t, line.fields, "retry_in")
		assert.Equal(t, 1, line.fields["attempt"])
		assert.NotContains(t, line.fields["url"], "secret")
	})

	t.Run("cancel ends a dial that hangs", func(t *testing.T) {
		t.Parallel()
		// Accepts TCP and never answers the AMQP handshake, as a half-dead
		// host would; amqp091's own handshake timeout is 30 s.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				defer c.Close()
			}
		}()
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(300*time.Millisecond, cancel)
		start := time.Now()
		_, err = rabbitmq.New(ctx, rabbitmq.Config{URL: "amqp://guest:guest@" + l.Addr().String() + "/"}, nil)
		assert.ErrorIs(t, err, context.Canceled)
		assert.Less(t, time.Since(start), 2*time.Second)
	})

	t.Run("connects when the broker comes up late", func(t *testing.T) {
		t.Parallel()
		amqpURL, _ := newVhost(t)
		u, err := url.Parse(amqpURL)
		require.NoError(t, err)
		target := u.Host
		u.Host = closedPort(t)
		lateURL := u.String()

		// RabbitMQ "starts" after 1.5 s: a proxy to it opens on the port.
		time.AfterFunc(1500*time.Millisecond, func() { newTCPProxy(t, u.Host, target) })

		logger := newRecordingLogger()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ps, err := rabbitmq.New(ctx, rabbitmq.Config{URL: lateURL, ReconnectInitialInterval: 100 * time.Millisecond}, logger)
		require.NoError(t, err)
		defer ps.Close()
		assert.NotEmpty(t, logger.find("RabbitMQ unreachable, retrying"))
		assert.NotEmpty(t, logger.find("Connected to RabbitMQ"))
		require.NoError(t, ps.Ping(ctx))

		topic := brokertest.Topic(t)
		sent := message.NewMessage(watermill.NewUUID(), []byte("late"))
		require.NoError(t, ps.Publish(topic, sent))
		assert.Equal(t, sent.UUID, receiveOne(t, ps, topic).UUID)
	})
}

// A longer outage: the broker refuses the vhost for a while, so reconnecting
// fails several times. Ping reports it; publishing fails fast with
// ErrNotConnected; afterwards the same subscription carries on.
func TestReconnectAfterOutage(t *testing.T) {
	t.Parallel()
	amqpURL, vhost := newVhost(t)
	logger := newRecordingLogger()
	ctx := context.Background()
	ps, err := rabbitmq.New(ctx, rabbitmq.Config{
		URL: amqpURL,
		// The outage lasts as long as two rabbitmqctl calls, many seconds on
		// a busy machine: cap the backoff so recovery is prompt.
		ReconnectInitialInterval: 100 * time.Millisecond,
		ReconnectMaxInterval:     time.Second,
	}, logger)
	require.NoError(t, err)
	defer ps.Close()
	require.NoError(t, ps.Ping(ctx))
	topic := brokertest.Topic(t)
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)

	user := "guest"
	if u, err := url.Parse(amqpURL); err == nil && u.User.Username() != "" {
		user = u.User.Username()
	}
	rabbitmqctl(t, "clear_permissions", "-p", vhost, user)
	dropConnections(t, vhost)
	require.Eventually(t, func() bool { return errors.Is(ps.Ping(ctx), rabbitmq.ErrNotConnected) }, 10*time.Second, 20*time.Millisecond,
		"Ping reports the lost connections")
	err = ps.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("lost")))
	assert.ErrorIs(t, err, rabbitmq.ErrNotConnected, "publishing fails fast while reconnecting")

	rabbitmqctl(t, "set_permissions", "-p", vhost, user, ".*", ".*", ".*")
	require.Eventually(t, func() bool { return ps.Ping(ctx) == nil }, 30*time.Second, 50*time.Millisecond,
		"Ping recovers once reconnected")
	assert.NotEmpty(t, logger.find("RabbitMQ connection lost, reconnecting"))
	assert.NotEmpty(t, logger.find("RabbitMQ unreachable, retrying"), "reconnecting failed while the vhost was refused")

	after := message.NewMessage(watermill.NewUUID(), []byte("after"))
	require.Eventually(t, func() bool { return ps.Publish(topic, after) == nil }, 30*time.Second, 100*time.Millisecond)
	got := brokertest.Next(t, msgs, 30*time.Second)
	got.Ack()
	assert.Equal(t, after.UUID, got.UUID, "the subscription resumed")

	require.NoError(t, ps.Close())
	assert.ErrorIs(t, ps.Ping(ctx), rabbitmq.ErrClosed, "a closed broker is not ready")
	assert.ErrorIs(t, ps.Publish(topic, after), rabbitmq.ErrClosed)
	assert.NoError(t, ps.Close(), "Close is idempotent")
	_, open := <-msgs
	assert.False(t, open, "Close ends the subscription")
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		cfg  rabbitmq.Config
		want []string
	}{
		{"no url", rabbitmq.Config{}, []string{"url is required"}},
		{"bad scheme", rabbitmq.Config{URL: "http://localhost/"}, []string{"url:"}},
		{"several problems at once", rabbitmq.Config{
			URL: "amqp://localhost/", Prefetch: -1, ChannelPoolSize: -1, QueueType: "stream",
		}, []string{"prefetch -1", "channel pool size -1", `queue type "stream"`}},
		{"prefetch too large", rabbitmq.Config{URL: "amqp://localhost/", Prefetch: 70000}, []string{"exceeds 65535"}},
		{"management url", rabbitmq.Config{URL: "amqp://localhost/", ManagementURL: "amqp://localhost:15672"}, []string{"management url", "want an http or https URL"}},
		{"queue type with a topology", rabbitmq.Config{
			URL: "amqp://localhost/", QueueType: rabbitmq.QueueQuorum, Topology: rejectOverflow{},
		}, []string{"queue type applies to auto-declared queues only"}},
		{"reconnect intervals", rabbitmq.Config{
			URL: "amqp://localhost/", ReconnectInitialInterval: time.Minute, ReconnectMaxInterval: time.Second,
		}, []string{"below the initial interval"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ps, err := rabbitmq.New(ctx, tc.cfg, nil)
			require.Error(t, err)
			assert.Nil(t, ps)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func receiveOne(t *testing.T, sub message.Subscriber, topic string) *message.Message {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	m := brokertest.Next(t, msgs, 30*time.Second)
	m.Ack()
	return m
}

func queueDepth(t *testing.T, vhost, queue string) string {
	t.Helper()
	for _, line := range strings.Split(rabbitmqctl(t, "list_queues", "-p", vhost, "name", "messages"), "\n") {
		if name, n, ok := strings.Cut(line, "\t"); ok && name == queue {
			return strings.TrimSpace(n)
		}
	}
	require.Failf(t, "queue not found", "queue %s not found in vhost %s", queue, vhost)
	return ""
}

// closedPort returns a local address nothing listens on (right now).
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// The booking spec's FIFO queue declared quorum (rabbitmq.queue_type: quorum)
// counts a message that fails every time natively: each nack is a requeue
// the broker counts in x-delivery-count, no copy is republished, and once
// the count passes max_receives (x-delivery-limit) the broker dead-letters it
// to the queue's DLQ through its dead-letter exchange.
func TestQuorumDeliveryLimitDeadLetters(t *testing.T) {
	t.Parallel()
	amqpURL, _ := newVhost(t)
	spec, err := topology.Load("../../../config/topology/booking.yaml")
	require.NoError(t, err)
	top, err := spec.WithQueueType(topology.Quorum)
	require.NoError(t, err)
	declared, err := rabbitmq.NewDeclared(top, nil)
	require.NoError(t, err)
	queue, dlq := top.Queues[0].Name, top.Queues[0].DeadLetter.Queue
	limit := top.Queues[0].MaxReceives
	require.Equal(t, 5, limit)
	ps := newPubSub(t, amqpURL, func(c *rabbitmq.Config) { c.Topology = declared })
	assert.Equal(t, rabbitmq.QueueQuorum, declared.QueueType(queue))

	sent := message.NewMessage(watermill.NewUUID(), []byte(`{"fails":"always"}`))
	require.NoError(t, ps.Publish(queue, sent))
	msgs, err := ps.Subscribe(context.Background(), queue)
	require.NoError(t, err)
	// RabbitMQ 3.10 dead-letters once the count exceeds the limit: one
	// delivery more than max_receives (eventpipe's middleware dead-letters
	// with its reason at max_receives, before the broker has to).
	for attempt := 0; attempt <= limit; attempt++ {
		got := brokertest.Next(t, msgs, 30*time.Second)
		require.Equal(t, sent.UUID, got.UUID)
		assert.Equal(t, strconv.Itoa(attempt), got.Metadata.Get(metadata.AttemptKey))
		assert.NotContains(t, got.Metadata, "x-eventpipe-attempt", "a native requeue, not a copy")
		if attempt > 0 {
			assert.Equal(t, strconv.Itoa(attempt), got.Metadata.Get("x-delivery-count"), "counted by the broker")
		}
		require.True(t, got.Nack())
	}

	dead := receiveOne(t, ps, dlq)
	assert.Equal(t, sent.UUID, dead.UUID)
	var deaths []map[string]any
	require.NoError(t, json.Unmarshal([]byte(dead.Metadata.Get("x-death")), &deaths), "x-death: %q", dead.Metadata.Get("x-death"))
	require.Len(t, deaths, 1)
	assert.Equal(t, "delivery_limit", deaths[0]["reason"])
	assert.Equal(t, queue, deaths[0]["queue"])
	stats, err := ps.QueueStats(context.Background(), queue)
	require.NoError(t, err)
	assert.Zero(t, stats.Ready, "nothing left behind")
}
