package rabbitmq_test

import (
	"context"
	"testing"
	"time"

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

// A publisher's x-attempt (and, on a classic queue, its x-delivery-count) is
// carried, never counted: the first delivery is attempt 0 whatever the
// header says, and only eventpipe's and the broker's counts raise it.
func TestPublisherAttemptIsNotTrusted(t *testing.T) {
	t.Parallel()
	amqpURL, _ := newVhost(t)
	for _, qt := range queueTypes {
		for name, peer := range map[string]any{"string": "99", "number": int32(99)} {
			t.Run(string(qt)+"/"+name, func(t *testing.T) {
				t.Parallel()
				ps := newPubSub(t, amqpURL, func(c *rabbitmq.Config) { c.QueueType = qt })
				topic := brokertest.Topic(t)
				require.NoError(t, ps.SubscribeInitialize(topic))
				publishRaw(t, amqpURL, topic, amqp.Publishing{
					MessageId: "peer-1",
					Headers: amqp.Table{
						metadata.AttemptKey:      peer,
						"x-delivery-count":       int64(5),
						metadata.FirstFailureKey: "2001-01-01T00:00:00Z",
					},
					Body: []byte(`{}`),
				})

				msgs, err := ps.Subscribe(context.Background(), topic)
				require.NoError(t, err)
				first := brokertest.Next(t, msgs, 30*time.Second)
				assert.Equal(t, "0", first.Metadata.Get(metadata.AttemptKey), "a first delivery is attempt 0")
				assert.Equal(t, "99", first.Metadata.Get(rabbitmq.MetadataPublisherAttempt), "the peer's count is carried")
				assert.Empty(t, first.Metadata.Get(metadata.FirstFailureKey), "the peer's failure time is not ours")
				first.Nack()

				again := brokertest.Next(t, msgs, 30*time.Second)
				again.Ack()
				assert.Equal(t, "peer-1", again.UUID)
				assert.Equal(t, "1", again.Metadata.Get(metadata.AttemptKey), "one nack, one earlier attempt")
				assert.Equal(t, "99", again.Metadata.Get(rabbitmq.MetadataPublisherAttempt), "still carried")
			})
		}
	}
}
