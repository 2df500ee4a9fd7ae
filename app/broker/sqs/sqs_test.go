package sqs_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/sqs"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/testenv"
)

// The Watermill suite and brokertest close many subscriptions; a short long
// poll keeps each Close (which lets the poll under way finish) short.
const testWaitTime = time.Second

var testLogger = watermill.NewSlogLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))

func testConfig(t testing.TB) sqs.Config {
	t.Helper()
	return sqs.Config{
		Region:       testenv.SQSRegion,
		Endpoint:     testenv.SQSEndpoint(t),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		WaitTime:     testWaitTime,
		DrainTimeout: 2 * time.Second,
		// Received messages stay hidden 5 s (the heartbeat extends what a
		// handler still holds). Under a loaded full run a receive response was
		// seen to be lost between emulator and client (an SDK warning "failed
		// to discard remaining HTTP response body … use of closed network
		// connection" next to it); its messages then come back after this
		// timeout instead of the queue's 30 s, within the tests' waits.
		VisibilityTimeout: 5 * time.Second,
	}
}

// queueVisibilityConfig is testConfig for tests about the queue's own
// visibility timeout: the subscription reads it from the queue.
func queueVisibilityConfig(t testing.TB) sqs.Config {
	cfg := testConfig(t)
	cfg.VisibilityTimeout = 0
	return cfg
}

func newPubSub(t testing.TB, cfg sqs.Config) *sqs.PubSub {
	t.Helper()
	ps, err := sqs.New(context.Background(), cfg, testLogger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ps.Close() })
	return ps
}

// rawClient talks to the emulator without the adapter, to set up and inspect
// queues the way a foreign service would.
func rawClient(t *testing.T) *awssqs.Client {
	t.Helper()
	return awssqs.New(awssqs.Options{
		Region:       testenv.SQSRegion,
		BaseEndpoint: aws.String(testenv.SQSEndpoint(t)),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
}

// queueURL returns the URL of topic name's queue (sqs.QueueName without a
// prefix: a name SQS accepts is its own queue name).
func queueURL(t *testing.T, c *awssqs.Client, name string) string {
	t.Helper()
	out, err := c.GetQueueUrl(context.Background(), &awssqs.GetQueueUrlInput{QueueName: aws.String(sqs.QueueName("", name))})
	require.NoError(t, err)
	return aws.ToString(out.QueueUrl)
}

// depth returns the queue's visible and in-flight message counts.
func depth(t require.TestingT, c *awssqs.Client, url string) (visible, inFlight int) {
	out, err := c.GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		},
	})
	require.NoError(t, err)
	visible, _ = strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	inFlight, _ = strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	return visible, inFlight
}

func newMessages(n int) []*message.Message {
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = message.NewMessage(watermill.NewUUID(), []byte(`{"n":`+strconv.Itoa(i)+`}`))
	}
	return msgs
}

// nackAtOnce nacks m asking, explicitly, for its redelivery at once, as a route
// with route.Policy.ExplicitBackoff and no wait would: without the mark a nack
// leaves the visibility as it is.
func nackAtOnce(t *testing.T, m *message.Message) {
	t.Helper()
	m.Metadata.Set(metadata.NackDelayKey, "0s")
	m.Metadata.Set(metadata.ExplicitNackDelayKey, "true")
	require.True(t, m.Nack())
}

// nothing asserts that no message arrives for d.
func nothing(t *testing.T, msgs <-chan *message.Message, d time.Duration) {
	t.Helper()
	select {
	case m, ok := <-msgs:
		if ok {
			require.Failf(t, "unexpected message", "message %s (payload %q)", m.UUID, m.Payload)
		}
	case <-time.After(d):
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	brokertest.Run(t, brokertest.Features{
		Concurrency: 4,
		Watermill: tests.Features{
			// Standard queues: at-least-once, no order.
			ExactlyOnceDelivery: false,
			GuaranteedOrder:     false,
			Persistent:          true,
			// Not a need of SQS: brokertest hands one object out as both
			// publisher and subscriber, and Watermill's multiplied subscriber
			// closes the publisher before subscribing, i.e. closes our
			// subscriber. Competing consumers across instances are covered by
			// brokertest's ConcurrentSubscribersOneQueue.
			RequireSingleInstance: true,
			// The full counts pass too, but slowly: 70-80 s under -race on two
			// shared cores, with TestPublisherClose reading its 10,000
			// messages in 15-21 s of its 45 s budget (too thin a margin for
			// CI, where other packages run alongside). The short counts take
			// the same paths in about 12 s.
			ForceShort: true,
		},
		CompetingConsumers: true,
		// HTTP is connectionless: there is no connection to drop.
		DropConnections: nil,
		// A nack leaves the visibility alone: redelivered when testConfig's
		// 5 s visibility timeout runs out.
		RedeliveryTimeout: 10 * time.Second,
		QueueStats:        true,
		// Receives with visibility 0: nothing hidden, the receive count
		// raised (decision 0029).
		Peek:               true,
		PeekCountsDelivery: true,
	}, func(t *testing.T) broker.PubSub {
		return newPubSub(t, testConfig(t))
	})
}

// A batch of ten is handed out at once; one nack makes only that message come
// back, the nine acks delete theirs.
func TestBatchPartialFailure(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Workers = 1
	cfg.BatchSize = 10
	ps := newPubSub(t, cfg)
	topic := brokertest.Topic(t)
	require.NoError(t, ps.SubscribeInitialize(topic))
	// A short visibility timeout: under a loaded full test run a receive was
	// seen to be lost on its way back from the emulator (see the SDK's
	// "failed to discard remaining HTTP response body" warning next to it);
	// its messages then reappear after the visibility timeout, with a higher
	// receive count. The property under test does not depend on that count.
	c := rawClient(t)
	url := queueURL(t, c, topic)
	_, err := c.SetQueueAttributes(context.Background(), &awssqs.SetQueueAttributesInput{
		QueueUrl:   aws.String(url),
		Attributes: map[string]string{"VisibilityTimeout": "3"},
	})
	require.NoError(t, err)
	sent := newMessages(10)
	require.NoError(t, ps.Publish(topic, sent...))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)

	// All ten are out at the same time, none settled yet: the batch is handed
	// out concurrently, not one message per ack.
	got := map[string]*message.Message{}
	for len(got) < 10 {
		m := brokertest.Next(t, msgs, 20*time.Second)
		require.NotContains(t, got, m.UUID, "redelivered while held: the heartbeat should keep it invisible")
		got[m.UUID] = m
	}
	nacked := got[sent[0].UUID]
	require.NotNil(t, nacked)
	count, err := strconv.Atoi(nacked.Metadata.Get(sqs.ReceiveCountKey))
	require.NoError(t, err)
	require.True(t, nacked.Nack())
	for id, m := range got {
		if id != nacked.UUID {
			require.True(t, m.Ack())
		}
	}

	again := brokertest.Next(t, msgs, 10*time.Second)
	assert.Equal(t, nacked.UUID, again.UUID)
	assert.Equal(t, strconv.Itoa(count+1), again.Metadata.Get(sqs.ReceiveCountKey))
	assert.Equal(t, string(nacked.Payload), string(again.Payload))
	// The nine acked ones are gone: nothing else comes back, not even after
	// their visibility timeout would have run out.
	nothing(t, msgs, 4*time.Second)

	visible, inFlight := depth(t, c, url)
	assert.Equal(t, 0, visible)
	assert.Equal(t, 1, inFlight, "only the redelivered message is in flight")

	again.Ack()
	assert.EventuallyWithT(t, func(c2 *assert.CollectT) {
		visible, inFlight := depth(c2, c, url)
		assert.Equal(c2, 0, visible+inFlight)
	}, 5*time.Second, 50*time.Millisecond)
}

// concurrentReceives counts ReceiveMessage calls: all of them (calls), and
// those under way at once (now, and the most since the start or the last
// resetMax).
type concurrentReceives struct {
	inner           aws.HTTPClient
	calls, now, max atomic.Int32
}

// resetMax starts counting the most at once afresh, from what is under way.
func (c *concurrentReceives) resetMax() { c.max.Store(c.now.Load()) }

func (c *concurrentReceives) Do(r *http.Request) (*http.Response, error) {
	if r.Header.Get("X-Amz-Target") == "AmazonSQS.ReceiveMessage" {
		c.calls.Add(1)
		n := c.now.Add(1)
		defer c.now.Add(-1)
		for {
			m := c.max.Load()
			if n <= m || c.max.CompareAndSwap(m, n) {
				break
			}
		}
	}
	return c.inner.Do(r)
}

func TestWorkersPollInParallel(t *testing.T) {
	t.Parallel()
	counter := &concurrentReceives{inner: awshttp.NewBuildableClient()}
	cfg := testConfig(t)
	cfg.Workers = 4
	cfg.WaitTime = 2 * time.Second
	cfg.ClientOptions = []func(*awssqs.Options){func(o *awssqs.Options) { o.HTTPClient = counter }}
	ps := newPubSub(t, cfg)
	topic := brokertest.Topic(t)
	require.NoError(t, ps.SubscribeInitialize(topic))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)

	require.Eventually(t, func() bool { return counter.max.Load() == 4 }, 5*time.Second, 10*time.Millisecond,
		"want 4 long polls under way at once, saw at most %d", counter.max.Load())

	// And each of them delivers.
	sent := newMessages(8)
	require.NoError(t, ps.Publish(topic, sent...))
	for range sent {
		brokertest.Next(t, msgs, 10*time.Second).Ack()
	}
	assert.LessOrEqual(t, counter.max.Load(), int32(4), "never more polls than workers")
}

// An idle queue is long-polled by one receiver, not Config.Workers of them:
// SQS bills every empty receive. A burst wakes the others, every message
// arrives, and the parked receivers end on Close.
func TestIdleQueuePolledOnce(t *testing.T) {
	t.Parallel()
	for _, workers := range []int{2, 3} {
		t.Run(strconv.Itoa(workers)+" workers", func(t *testing.T) {
			t.Parallel()
			counter := &concurrentReceives{inner: awshttp.NewBuildableClient()}
			cfg := testConfig(t)
			cfg.Workers = workers
			cfg.ClientOptions = []func(*awssqs.Options){func(o *awssqs.Options) { o.HTTPClient = counter }}
			ps := newPubSub(t, cfg)
			topic := brokertest.Topic(t)
			require.NoError(t, ps.SubscribeInitialize(topic))
			msgs, err := ps.Subscribe(context.Background(), topic)
			require.NoError(t, err)

			// Every receiver starts with a poll; past the first long poll
			// the queue has been found idle.
			time.Sleep(cfg.WaitTime + cfg.WaitTime/2)
			counter.resetMax()
			before := counter.calls.Load()
			const polls = 4
			time.Sleep(polls * cfg.WaitTime)
			assert.InDelta(t, polls, counter.calls.Load()-before, 1,
				"receives over %d long polls of an idle queue: one receiver's, not %d", polls, workers)
			assert.Equal(t, int32(1), counter.max.Load(), "receives under way at once on the idle queue")

			counter.resetMax()
			sent := newMessages(10 * workers)
			require.NoError(t, ps.Publish(topic, sent...))
			want := map[string]bool{}
			for _, m := range sent {
				want[m.UUID] = true
			}
			for range sent {
				m := brokertest.Next(t, msgs, 10*time.Second)
				assert.True(t, want[m.UUID], "message %s sent once, received once", m.UUID)
				delete(want, m.UUID)
				m.Ack()
			}
			// The woken receivers poll on until they find the queue empty.
			require.Eventually(t, func() bool { return counter.max.Load() >= 2 }, 3*cfg.WaitTime, 10*time.Millisecond,
				"the burst woke the parked receivers: more than one receive at once")

			// Once idle again, the parked receivers end on Close (it waits
			// for every receiver, and lets the one poll under way finish).
			time.Sleep(2 * cfg.WaitTime)
			closed := make(chan struct{})
			go func() {
				_ = ps.Close()
				close(closed)
			}()
			select {
			case <-closed:
			case <-time.After(cfg.WaitTime + 5*time.Second):
				require.Fail(t, "Close did not return: a parked receiver did not end")
			}
			_, open := <-msgs
			assert.False(t, open, "the channel is closed")
		})
	}
}

// At most BatchSize×Workers messages are out unsettled; settling one lets
// the next in.
func TestInFlightBound(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.BatchSize = 2
	cfg.Workers = 3
	ps := newPubSub(t, cfg)
	topic := brokertest.Topic(t)
	require.NoError(t, ps.SubscribeInitialize(topic))
	require.NoError(t, ps.Publish(topic, newMessages(10)...))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)

	var held []*message.Message
	for range 6 {
		held = append(held, brokertest.Next(t, msgs, 10*time.Second))
	}
	nothing(t, msgs, 1500*time.Millisecond)
	held[0].Ack()
	held = append(held[1:], brokertest.Next(t, msgs, 10*time.Second))
	for _, m := range held {
		m.Ack()
	}
	for range 3 {
		brokertest.Next(t, msgs, 10*time.Second).Ack()
	}
}

// A message from a foreign publisher (a raw SDK client, no Watermill
// attributes) is delivered, with its SQS MessageId as UUID.
func TestForeignMessage(t *testing.T) {
	t.Parallel()
	ps := newPubSub(t, testConfig(t))
	topic := brokertest.Topic(t)
	require.NoError(t, ps.SubscribeInitialize(topic))
	c := rawClient(t)
	url := queueURL(t, c, topic)

	plain, err := c.SendMessage(context.Background(), &awssqs.SendMessageInput{
		QueueUrl:    aws.String(url),
		MessageBody: aws.String(`{"type":"interview.completed"}`),
		MessageAttributes: map[string]types.MessageAttributeValue{
			"eventType": {DataType: aws.String("String"), StringValue: aws.String("interview.completed")},
			"attempt":   {DataType: aws.String("Number"), StringValue: aws.String("3")},
			"blob":      {DataType: aws.String("Binary"), BinaryValue: []byte("raw")},
		},
	})
	require.NoError(t, err)
	// A UUID attribute of the wrong type must not crash the subscriber
	// (watermill-aws's unmarshaler dereferences its nil string value).
	odd, err := c.SendMessage(context.Background(), &awssqs.SendMessageInput{
		QueueUrl:    aws.String(url),
		MessageBody: aws.String("odd"),
		MessageAttributes: map[string]types.MessageAttributeValue{
			"_watermill_message_uuid": {DataType: aws.String("Binary"), BinaryValue: []byte{0xff}},
		},
	})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)
	got := map[string]*message.Message{}
	for range 2 {
		m := brokertest.Next(t, msgs, 10*time.Second)
		m.Ack()
		got[string(m.Payload)] = m
	}

	m := got[`{"type":"interview.completed"}`]
	require.NotNil(t, m)
	assert.Equal(t, aws.ToString(plain.MessageId), m.UUID)
	assert.Equal(t, "interview.completed", m.Metadata.Get("eventType"))
	assert.Equal(t, "3", m.Metadata.Get("attempt"))
	assert.Equal(t, "raw", m.Metadata.Get("blob"))
	assert.Equal(t, "1", m.Metadata.Get(sqs.ReceiveCountKey))

	require.NotNil(t, got["odd"])
	assert.Equal(t, aws.ToString(odd.MessageId), got["odd"].UUID)
}

func TestPing(t *testing.T) {
	t.Parallel()
	ps := newPubSub(t, testConfig(t))
	require.NoError(t, ps.Ping(context.Background()))

	cfg := testConfig(t)
	cfg.Endpoint = deadEndpoint(t)
	dead := newPubSub(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	assert.Error(t, dead.Ping(ctx))
}

// deadEndpoint returns a URL where nothing listens.
func deadEndpoint(t *testing.T) string {
	srv := httptest.NewServer(http.NotFoundHandler())
	u := srv.URL
	srv.Close()
	return u
}

func TestPublishSplitsBatches(t *testing.T) {
	t.Parallel()
	ps := newPubSub(t, testConfig(t))
	topic := brokertest.Topic(t)
	require.NoError(t, ps.SubscribeInitialize(topic))

	// 25 small ones (three requests by count) and four of 300 KiB (two
	// requests by SQS's 1 MiB per-request limit), in one call.
	sent := newMessages(25)
	for range 4 {
		sent = append(sent, message.NewMessage(watermill.NewUUID(), []byte(strings.Repeat("x", 300<<10))))
	}
	require.NoError(t, ps.Publish(topic, sent...))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)
	want := map[string]int{}
	for _, m := range sent {
		want[m.UUID] = len(m.Payload)
	}
	for len(want) > 0 {
		m := brokertest.Next(t, msgs, 10*time.Second)
		m.Ack()
		if n, ok := want[m.UUID]; ok {
			assert.Len(t, m.Payload, n)
			delete(want, m.UUID)
		}
	}
}

// SQS refusing some entries of a batch fails only those; the error names them.
func TestPublishReportsFailedEntries(t *testing.T) {
	t.Parallel()
	topic := brokertest.Topic(t)
	c := rawClient(t)
	_, err := c.CreateQueue(context.Background(), &awssqs.CreateQueueInput{
		QueueName:  aws.String(topic),
		Attributes: map[string]string{"MaximumMessageSize": "1024"},
	})
	require.NoError(t, err)
	ps := newPubSub(t, testConfig(t))

	small1 := message.NewMessage(watermill.NewUUID(), []byte("small"))
	big := message.NewMessage(watermill.NewUUID(), []byte(strings.Repeat("b", 2000)))
	small2 := message.NewMessage(watermill.NewUUID(), []byte("small"))
	err = ps.Publish(topic, small1, big, small2)

	var pubErr *sqs.PublishError
	require.ErrorAs(t, err, &pubErr)
	assert.Equal(t, 3, pubErr.Total)
	require.Len(t, pubErr.Failed, 1)
	assert.Equal(t, big.UUID, pubErr.Failed[0].UUID)
	assert.True(t, pubErr.Failed[0].SenderFault)
	assert.Contains(t, err.Error(), big.UUID)

	visible, _ := depth(t, c, queueURL(t, c, topic))
	assert.Equal(t, 2, visible, "the other two were sent")
}

func TestPublishRejectsWhatSQSRefuses(t *testing.T) {
	t.Parallel()
	ps := newPubSub(t, testConfig(t))
	topic := brokertest.Topic(t)
	require.NoError(t, ps.SubscribeInitialize(topic))

	manyKeys := message.NewMessage(watermill.NewUUID(), []byte("x"))
	for i := range 2 * sqs.MaxMessageAttributes { // more than SQS carries: packed, not refused
		manyKeys.Metadata.Set("k"+strconv.Itoa(i), "v")
	}
	nineKeys := message.NewMessage(watermill.NewUUID(), []byte("x"))
	for i := range sqs.MaxMessageAttributes - 1 {
		nineKeys.Metadata.Set("k"+strconv.Itoa(i), "v")
	}
	nineKeys.Metadata.Set("empty-values-do-not-count", "")

	for name, tc := range map[string]struct {
		msg    *message.Message
		reason string
	}{
		"empty payload":      {message.NewMessage(watermill.NewUUID(), nil), "empty payload"},
		"control character":  {message.NewMessage(watermill.NewUUID(), []byte("a\x00b")), "character SQS refuses"},
		"invalid UTF-8":      {message.NewMessage(watermill.NewUUID(), []byte{'a', 0xff}), "invalid UTF-8"},
		"bad metadata value": {withMeta("k", "\x01"), "character SQS refuses"},
		// A 1 MiB body passes the broker-wide limit, but SQS counts the
		// attributes (here the UUID) too.
		"body and attributes over 1 MiB": {message.NewMessage(watermill.NewUUID(), []byte(strings.Repeat("x", broker.MaxPayloadBytes))), "1048576-byte limit"},
	} {
		t.Run(name, func(t *testing.T) {
			ok := message.NewMessage(watermill.NewUUID(), []byte("fine"))
			err := ps.Publish(topic, ok, tc.msg)
			var invalid *sqs.InvalidMessageError
			require.ErrorAs(t, err, &invalid)
			assert.Equal(t, tc.msg.UUID, invalid.MessageUUID)
			assert.Contains(t, err.Error(), tc.reason)
		})
	}

	var tooLarge *broker.PayloadTooLargeError
	err := ps.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte(strings.Repeat("x", broker.MaxPayloadBytes))))
	assert.ErrorAs(t, err, &tooLarge, "over SQS's limit reads as too large, like everywhere")

	c := rawClient(t)
	visible, _ := depth(t, c, queueURL(t, c, topic))
	assert.Equal(t, 0, visible, "a refused message stops the whole call before anything is sent")

	require.NoError(t, ps.Publish(topic, nineKeys))
	require.NoError(t, ps.Publish(topic, manyKeys))
}

func withMeta(k, v string) *message.Message {
	m := message.NewMessage(watermill.NewUUID(), []byte("x"))
	m.Metadata.Set(k, v)
	return m
}

type failingUnmarshaler struct{ sqs.Marshaler }

func (u failingUnmarshaler) Unmarshal(m *types.Message) (*message.Message, error) {
	if aws.ToString(m.Body) == "poison" {
		return nil, errors.New("cannot decode poison")
	}
	return u.Marshaler.Unmarshal(m)
}

// A message that cannot be unmarshaled is logged and left in flight (for the
// redrive policy); the rest of the queue flows.
func TestUnmarshalFailureDoesNotBlock(t *testing.T) {
	t.Parallel()
	logs := newSyncLogs()
	cfg := testConfig(t)
	cfg.Unmarshaler = failingUnmarshaler{}
	ps, err := sqs.New(context.Background(), cfg, logs)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ps.Close() })
	topic := brokertest.Topic(t)
	require.NoError(t, ps.SubscribeInitialize(topic))

	good := newMessages(3)
	require.NoError(t, ps.Publish(topic, good[0], message.NewMessage(watermill.NewUUID(), []byte("poison")), good[1], good[2]))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)
	for range good {
		m := brokertest.Next(t, msgs, 10*time.Second)
		assert.NotEqual(t, "poison", string(m.Payload))
		m.Ack()
	}
	nothing(t, msgs, time.Second)

	c := rawClient(t)
	url := queueURL(t, c, topic)
	require.EventuallyWithT(t, func(c2 *assert.CollectT) {
		visible, inFlight := depth(c2, c, url)
		assert.Equal(c2, 0, visible)
		assert.Equal(c2, 1, inFlight, "the poison message waits for its visibility timeout")
	}, 5*time.Second, 50*time.Millisecond)

	logged := false
	for _, l := range logs.at(watermill.ErrorLogLevel) {
		if strings.Contains(l.Msg, "unmarshal") && l.Fields["message_id"] != "" {
			logged = true
		}
	}
	assert.True(t, logged, "unmarshal failure logged with the message id")
}

// Close makes the messages received but not handed out visible at once.
func TestCloseReleasesUndelivered(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Workers = 1
	ps := newPubSub(t, cfg)
	topic := brokertest.Topic(t)
	require.NoError(t, ps.SubscribeInitialize(topic))
	require.NoError(t, ps.Publish(topic, newMessages(10)...))

	msgs, err := ps.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	brokertest.Next(t, msgs, 10*time.Second).Ack()

	require.NoError(t, ps.Close())
	_, open := <-msgs
	assert.False(t, open, "channel closed by Close")

	c := rawClient(t)
	visible, inFlight := depth(t, c, queueURL(t, c, topic))
	assert.Equal(t, 9, visible, "released, not deleted and not left invisible")
	assert.Equal(t, 0, inFlight)

	assert.ErrorIs(t, ps.Publish(topic, newMessages(1)...), sqs.ErrClosed)
	_, err = ps.Subscribe(context.Background(), topic)
	assert.ErrorIs(t, err, sqs.ErrClosed)
}

// Close lets a message already handed out finish: its context stays live and
// its ack still deletes it.
func TestCloseDrainsInFlight(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.DrainTimeout = 10 * time.Second
	ps := newPubSub(t, cfg)
	topic := brokertest.Topic(t)
	require.NoError(t, ps.SubscribeInitialize(topic))
	require.NoError(t, ps.Publish(topic, newMessages(1)...))

	msgs, err := ps.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	m := brokertest.Next(t, msgs, 10*time.Second)

	closed := make(chan struct{})
	go func() {
		_ = ps.Close()
		close(closed)
	}()
	select {
	case <-closed:
		require.FailNow(t, "Close returned while a message was in flight")
	case <-time.After(500 * time.Millisecond):
	}
	require.NoError(t, m.Context().Err(), "the handler's context stays live during the drain")
	m.Ack()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "Close did not return after the last ack")
	}

	c := rawClient(t)
	visible, inFlight := depth(t, c, queueURL(t, c, topic))
	assert.Equal(t, 0, visible+inFlight, "acked during the drain: deleted")
}

func TestMissingQueue(t *testing.T) {
	t.Parallel()
	ps := newPubSub(t, testConfig(t))
	topic := brokertest.Topic(t)

	var notFound *sqs.QueueNotFoundError
	assert.ErrorAs(t, ps.Publish(topic, newMessages(1)...), &notFound)
	_, err := ps.Subscribe(context.Background(), topic)
	require.ErrorAs(t, err, &notFound)
	assert.Equal(t, topic, notFound.Queue)

	cfg := testConfig(t)
	cfg.CreateQueues = true
	creating := newPubSub(t, cfg)
	require.NoError(t, creating.Publish(topic, newMessages(1)...))
	msgs, err := creating.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	brokertest.Next(t, msgs, 10*time.Second).Ack()
}

// outage is a proxy to the emulator that can play dead.
type outage struct {
	down     atomic.Bool
	requests atomic.Int32
	proxy    *httputil.ReverseProxy
}

func (o *outage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if o.down.Load() {
		o.requests.Add(1)
		// Drop the connection, as a dead server would.
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
		return
	}
	o.proxy.ServeHTTP(w, r)
}

// While SQS is unreachable the receivers log, back off and keep trying; they
// pick up again when it is back.
func TestReceiveSurvivesOutage(t *testing.T) {
	t.Parallel()
	target, err := url.Parse(testenv.SQSEndpoint(t))
	require.NoError(t, err)
	o := &outage{proxy: httputil.NewSingleHostReverseProxy(target)}
	srv := httptest.NewServer(o)
	t.Cleanup(srv.Close)

	cfg := testConfig(t)
	cfg.Endpoint = srv.URL
	logs := newSyncLogs()
	ps, err := sqs.New(context.Background(), cfg, logs)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ps.Close() })
	topic := brokertest.Topic(t)
	require.NoError(t, ps.SubscribeInitialize(topic))
	msgs, err := ps.Subscribe(context.Background(), topic)
	require.NoError(t, err)

	o.down.Store(true)
	time.Sleep(3 * time.Second)
	o.down.Store(false)
	// Two workers, each retried by the SDK (3 attempts) and backed off by us:
	// a few dozen requests, not a busy loop's thousands.
	assert.Less(t, o.requests.Load(), int32(100), "requests while down")
	assert.NotEmpty(t, logs.at(watermill.ErrorLogLevel), "receive errors are logged")

	sent := newMessages(1)[0]
	require.NoError(t, newPubSub(t, testConfig(t)).Publish(topic, sent))
	got := brokertest.Next(t, msgs, 20*time.Second)
	assert.Equal(t, sent.UUID, got.UUID)
	got.Ack()
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, sqs.Config{}.Validate(), "zero values are the defaults")

	err := sqs.Config{
		Endpoint:       "localhost:9324",
		BatchSize:      11,
		Workers:        -1,
		WaitTime:       1500 * time.Millisecond,
		NackVisibility: -time.Second,
		DrainTimeout:   -time.Second,
		RequestTimeout: -time.Second,
	}.Validate()
	require.Error(t, err)
	for _, want := range []string{"endpoint", "batch size 11", "workers -1", "wait time 1.5s", "nack visibility -1s", "drain timeout", "request timeout"} {
		assert.Contains(t, err.Error(), want)
	}
	for name, cfg := range map[string]sqs.Config{
		"wait time over 20 s":      {WaitTime: 21 * time.Second},
		"nack visibility over 12h": {NackVisibility: 13 * time.Hour},
		"fractional visibility":    {NackVisibility: 500 * time.Millisecond},
		"batch size negative":      {BatchSize: -1},
		"visibility timeout frac":  {VisibilityTimeout: 1500 * time.Millisecond},
		"visibility timeout neg":   {VisibilityTimeout: -time.Second},
		"visibility timeout 13h":   {VisibilityTimeout: 13 * time.Hour},
		"ftp endpoint":             {Endpoint: "ftp://example.com"},
	} {
		assert.Error(t, cfg.Validate(), name)
	}

	_, err = sqs.New(context.Background(), sqs.Config{Region: "us-east-1", BatchSize: 20}, nil)
	assert.ErrorContains(t, err, "batch size 20", "New validates")
}

// Not parallel: it changes the environment.
func TestNewWithoutRegion(t *testing.T) {
	for _, k := range []string{"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
	_, err := sqs.New(context.Background(), sqs.Config{}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "region")

	t.Setenv("AWS_REGION", "eu-west-1")
	_, err = sqs.New(context.Background(), sqs.Config{}, nil)
	assert.NoError(t, err, "the SDK's own resolution counts")
}

// The largest message SQS takes is 1 MiB counting the attributes: with only
// the UUID attribute, the body may fill the rest, and one byte more is refused
// before sending. (The emulator counts the same way, so an off-by-one here
// would fail the first Publish.)
func TestLargestMessage(t *testing.T) {
	t.Parallel()
	ps := newPubSub(t, testConfig(t))
	topic := brokertest.Topic(t)
	require.NoError(t, ps.SubscribeInitialize(topic))

	uuid := watermill.NewUUID()
	overhead := len("_watermill_message_uuid") + len("String") + len(uuid)
	body := []byte(strings.Repeat("y", 1<<20-overhead))
	require.NoError(t, ps.Publish(topic, message.NewMessage(uuid, body)))

	var invalid *sqs.InvalidMessageError
	require.ErrorAs(t, ps.Publish(topic, message.NewMessage(uuid, append(body, 'y'))), &invalid)

	msgs, err := ps.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	got := brokertest.Next(t, msgs, 10*time.Second)
	got.Ack()
	assert.Equal(t, uuid, got.UUID)
	assert.Equal(t, len(body), len(got.Payload))
}
