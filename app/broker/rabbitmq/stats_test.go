package rabbitmq_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/rabbitmq"
)

// Without the management API the ready count is still exact, but in flight
// is unknown, said so, and an empty-looking queue is never reported empty.
func TestQueueStatsWithoutManagementAPI(t *testing.T) {
	t.Parallel()
	amqpURL, _ := newVhost(t)
	dead := "http://" + closedPort(t)
	ps := newPubSub(t, amqpURL, func(c *rabbitmq.Config) { c.ManagementURL = dead })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topic := brokertest.Topic(t)
	require.NoError(t, ps.SubscribeInitialize(topic))

	s, err := ps.QueueStats(ctx, topic)
	require.NoError(t, err)
	assert.False(t, s.InFlightKnown)
	assert.Contains(t, s.Note, "in flight unknown")
	assert.Contains(t, s.Note, dead)
	assert.False(t, s.Empty(), "in flight unknown: never empty")

	require.NoError(t, ps.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("x"))))
	s, err = ps.QueueStats(ctx, topic)
	require.NoError(t, err)
	assert.Equal(t, int64(1), s.Ready, "a passive declare counts the ready message at once")
}

// The management API's figures lag by its statistics interval. A message
// delivered after they were collected is still counted in flight, from the
// ready count they had; the request names the vhost and queue, escaped, and
// logs in with the AMQP URL's user.
func TestQueueStatsCountsDeliveriesTheStatisticsMissed(t *testing.T) {
	t.Parallel()
	amqpURL, vhost := newVhost(t)
	var requests atomic.Int32
	mgmt := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		user, password, _ := r.BasicAuth()
		if user != "guest" || password != "guest" {
			http.Error(w, `{"error":"not_authorised"}`, http.StatusUnauthorized)
			return
		}
		want := "/api/queues/" + url.PathEscape(vhost) + "/" + url.PathEscape("q/stats")
		if r.URL.EscapedPath() != want {
			http.NotFound(w, r)
			return
		}
		// Collected before the consumer took the message.
		_, _ = w.Write([]byte(`{"name":"q/stats","messages_ready":1,"messages_unacknowledged":0}`))
	}))
	t.Cleanup(mgmt.Close)
	ps := newPubSub(t, amqpURL, func(c *rabbitmq.Config) { c.ManagementURL = mgmt.URL })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	const queue = "q/stats"
	require.NoError(t, ps.Publish(queue, message.NewMessage(watermill.NewUUID(), []byte("x"))))
	msgs, err := ps.Subscribe(ctx, queue)
	require.NoError(t, err)
	held := brokertest.Next(t, msgs, 30*time.Second)
	defer held.Ack()

	s, err := ps.QueueStats(ctx, queue)
	require.NoError(t, err)
	assert.Equal(t, broker.QueueStats{Queue: queue, InFlight: 1, InFlightKnown: true}, s)
	assert.Equal(t, int32(1), requests.Load())

	wrongUser := newPubSub(t, amqpURL, func(c *rabbitmq.Config) {
		u, _ := url.Parse(mgmt.URL)
		u.User = url.UserPassword("nobody", "s3cret")
		c.ManagementURL = u.String()
	})
	s, err = wrongUser.QueueStats(ctx, queue)
	require.NoError(t, err)
	assert.False(t, s.InFlightKnown)
	assert.Contains(t, s.Note, "401")
	assert.NotContains(t, s.Note, "s3cret", "no password in the note")

	_, err = ps.QueueStats(ctx, "no-such-queue")
	require.ErrorIs(t, err, broker.ErrQueueNotFound)
}
