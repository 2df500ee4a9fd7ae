package rabbitmq_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/rabbitmq"
	"github.com/eventpipe/eventpipe/app/metadata"
)

var queueTypes = []rabbitmq.QueueType{rabbitmq.QueueClassic, rabbitmq.QueueQuorum}

// publishRaw publishes body to queue through the default exchange as a
// foreign client would, with amqp091 and nothing of eventpipe's.
func publishRaw(t *testing.T, amqpURL, queue string, pub amqp.Publishing) {
	t.Helper()
	conn, err := amqp.Dial(amqpURL)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	confirm, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, true, false, pub)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	acked, err := confirm.WaitContext(ctx)
	require.NoError(t, err)
	require.True(t, acked)
}

// A peer's x-attempt (§3: its earlier attempts, from 0) is honoured, sent as
// an AMQP number or as a decimal string: the first delivery starts there, and
// eventpipe's and the broker's counts add to it. Anything that is not a whole
// number counts as 0; a classic queue's x-delivery-count is a publisher's
// header like any other and counts nothing.
func TestPeerAttemptIsHonoured(t *testing.T) {
	t.Parallel()
	amqpURL, _ := newVhost(t)
	for _, qt := range queueTypes {
		for name, tc := range map[string]struct {
			header any
			want   int
		}{
			"string":       {"2", 2},
			"bytes":        {[]byte("2"), 2},
			"int32":        {int32(2), 2},
			"int64":        {int64(2), 2},
			"uint8":        {uint8(2), 2},
			"whole double": {float64(2), 2},
			"fraction":     {1.5, 0},
			"word":         {"two", 0},
			"negative":     {int32(-3), 0},
			"huge":         {int64(1) << 40, 0},
		} {
			t.Run(string(qt)+"/"+name, func(t *testing.T) {
				t.Parallel()
				ps := newPubSub(t, amqpURL, func(c *rabbitmq.Config) { c.QueueType = qt })
				topic := brokertest.Topic(t)
				require.NoError(t, ps.SubscribeInitialize(topic))
				publishRaw(t, amqpURL, topic, amqp.Publishing{
					MessageId: "peer-1",
					Headers: amqp.Table{
						metadata.AttemptKey:      tc.header,
						"x-delivery-count":       int64(5),
						metadata.FirstFailureKey: "2001-01-01T00:00:00Z",
					},
					Body: []byte(`{}`),
				})

				msgs, err := ps.Subscribe(context.Background(), topic)
				require.NoError(t, err)
				first := brokertest.Next(t, msgs, 30*time.Second)
				assert.Equal(t, strconv.Itoa(tc.want), first.Metadata.Get(metadata.AttemptKey), "the peer's count, on a first delivery")
				assert.Empty(t, first.Metadata.Get(metadata.FirstFailureKey), "the peer's failure time is not ours")
				first.Nack()

				again := brokertest.Next(t, msgs, 30*time.Second)
				again.Ack()
				assert.Equal(t, "peer-1", again.UUID)
				assert.Equal(t, strconv.Itoa(tc.want+1), again.Metadata.Get(metadata.AttemptKey), "one nack more")
			})
		}
	}
}

// A message that kills its consumer every time (kill -9: the connection
// drops, nothing is settled) is counted every time, on both queue types, so
// it reaches its attempt limit instead of looping forever. Nothing is left
// behind: each redelivery was settled once its count was.
func TestCrashLoopCountsEveryAttempt(t *testing.T) {
	t.Parallel()
	amqpURL, _ := newVhost(t)
	const crashes = 3
	for _, qt := range queueTypes {
		t.Run(string(qt), func(t *testing.T) {
			t.Parallel()
			withType := func(c *rabbitmq.Config) { c.QueueType = qt }
			publisher := newPubSub(t, amqpURL, withType)
			topic := brokertest.Topic(t)
			sent := message.NewMessage(watermill.NewUUID(), []byte("crash me"))
			require.NoError(t, publisher.Publish(topic, sent))

			for i := range crashes {
				proxy, viaProxy := proxyURL(t, amqpURL)
				ps := newPubSub(t, viaProxy, withType)
				msgs, err := ps.Subscribe(context.Background(), topic)
				require.NoError(t, err)
				got := brokertest.Next(t, msgs, 30*time.Second)
				require.Equal(t, sent.UUID, got.UUID)
				require.Equal(t, strconv.Itoa(i), got.Metadata.Get(metadata.AttemptKey), "delivery %d", i+1)
				proxy.kill()   // the consumer dies holding the message
				_ = ps.Close() // may report the connections it just lost
			}

			ps := newPubSub(t, amqpURL, withType)
			msgs, err := ps.Subscribe(context.Background(), topic)
			require.NoError(t, err)
			got := brokertest.Next(t, msgs, 30*time.Second)
			got.Ack()
			assert.Equal(t, sent.UUID, got.UUID)
			assert.Equal(t, strconv.Itoa(crashes), got.Metadata.Get(metadata.AttemptKey), "every crash counted")
			stats, err := ps.QueueStats(context.Background(), topic)
			require.NoError(t, err)
			assert.Zero(t, stats.Ready, "no copy left behind")
		})
	}
}

// A foreign message without message_id gets an id on its first delivery and
// keeps it across its redeliveries, nacked or crashed, so that its retries
// can be followed: the copies eventpipe republishes carry it as message_id.
func TestMessageWithoutIDKeepsItsID(t *testing.T) {
	t.Parallel()
	amqpURL, _ := newVhost(t)
	for _, qt := range queueTypes {
		t.Run(string(qt), func(t *testing.T) {
			t.Parallel()
			withType := func(c *rabbitmq.Config) { c.QueueType = qt }
			topic := brokertest.Topic(t)
			require.NoError(t, newPubSub(t, amqpURL, withType).SubscribeInitialize(topic))
			publishRaw(t, amqpURL, topic, amqp.Publishing{Body: []byte(`{"messageId":"smoke-1"}`)})

			proxy, viaProxy := proxyURL(t, amqpURL)
			dying := newPubSub(t, viaProxy, withType)
			msgs, err := dying.Subscribe(context.Background(), topic)
			require.NoError(t, err)
			first := brokertest.Next(t, msgs, 30*time.Second)
			first.Nack()
			again := brokertest.Next(t, msgs, 30*time.Second)
			assert.Equal(t, first.UUID, again.UUID, "the same id after a nack")
			proxy.kill()
			_ = dying.Close() // may report the connections it just lost

			ps := newPubSub(t, amqpURL, withType)
			msgs, err = ps.Subscribe(context.Background(), topic)
			require.NoError(t, err)
			last := brokertest.Next(t, msgs, 30*time.Second)
			last.Ack()
			assert.Equal(t, first.UUID, last.UUID, "the same id after a crash")
			assert.Equal(t, "2", last.Metadata.Get(metadata.AttemptKey))
		})
	}
}
