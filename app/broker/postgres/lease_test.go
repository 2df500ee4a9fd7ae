package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/postgres"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/middleware"
)

// rowsLeft counts the rows of topic's table.
func rowsLeft(t *testing.T, cfg postgres.Config, topic string) int {
	t.Helper()
	return countRows(t, cfg, topic, "true")
}

// countRows counts the rows of topic's table that match where.
func countRows(t *testing.T, cfg postgres.Config, topic, where string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, cfg.DSN)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	table := pgx.Identifier{cfg.Schema, postgres.DefaultTablePrefix + topic}.Sanitize()
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE `+where).Scan(&n))
	return n
}

// handleWithTimeout runs handle in the route's Timeout middleware, as the
// router does, then acks the message, and reports when it has acked.
func handleWithTimeout(msg *message.Message, timeout time.Duration, handle func(*message.Message)) <-chan bool {
	acked := make(chan bool, 1)
	h := middleware.Timeout(timeout)(func(msg *message.Message) ([]*message.Message, error) {
		handle(msg)
		return nil, nil
	})
	go func() {
		_, _ = h(msg)
		acked <- msg.Ack()
	}()
	return acked
}

// A handler that runs three times the ack deadline, within its route's
// timeout, keeps its message: the heartbeat renews the lease, so a second
// subscriber of the queue never receives it meanwhile, its context is not
// cut short, and its ack deletes the row.
func TestHeartbeatKeepsALongHandlerLeased(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.AckDeadline = time.Second
	cfg.PollInterval = 50 * time.Millisecond
	topic := brokertest.Topic(t)
	sent := message.NewMessage(watermill.NewUUID(), []byte("long"))
	require.NoError(t, newPubSub(t, cfg).Publish(topic, sent))

	first, err := newPubSub(t, cfg).Subscribe(context.Background(), topic)
	require.NoError(t, err)
	msg := brokertest.Next(t, first, 10*time.Second)
	require.Equal(t, sent.UUID, msg.UUID)
	second, err := newPubSub(t, cfg).Subscribe(context.Background(), topic)
	require.NoError(t, err)

	const runs = 3 * time.Second
	var cut error
	acked := handleWithTimeout(msg, time.Minute, func(msg *message.Message) {
		select {
		case <-msg.Context().Done():
			cut = msg.Context().Err()
		case <-time.After(runs):
		}
	})
	select {
	case m := <-second:
		require.Failf(t, "delivered to a second subscriber while its handler ran", "attempt %s", m.Metadata.Get(metadata.AttemptKey))
	case ok := <-acked:
		require.NoError(t, cut, "the handler's context ended before it was done")
		require.True(t, ok)
	case <-time.After(runs + 5*time.Second):
		require.FailNow(t, "the handler did not finish")
	}
	assert.Eventually(t, func() bool { return rowsLeft(t, cfg, topic) == 0 }, 5*time.Second, 50*time.Millisecond, "acked: deleted")
	select {
	case m := <-second:
		require.Failf(t, "delivered again after its ack", "attempt %s", m.Metadata.Get(metadata.AttemptKey))
	case m := <-first:
		require.Failf(t, "delivered again after its ack", "attempt %s", m.Metadata.Get(metadata.AttemptKey))
	case <-time.After(2 * cfg.AckDeadline):
	}
}

// The heartbeat stops at the handler's deadline: a handler that ignores its
// context keeps its message no longer than its route's timeout and one lease
// after it; then the row goes to another subscriber, counted, and the late
// ack of the first one does not delete the row the second one holds.
func TestHeartbeatStopsAtTheHandlerDeadline(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.AckDeadline = time.Second
	cfg.PollInterval = 50 * time.Millisecond
	topic := brokertest.Topic(t)
	sent := message.NewMessage(watermill.NewUUID(), []byte("stuck"))
	require.NoError(t, newPubSub(t, cfg).Publish(topic, sent))

	first, err := newPubSub(t, cfg).Subscribe(context.Background(), topic)
	require.NoError(t, err)
	msg := brokertest.Next(t, first, 10*time.Second)
	received := time.Now()
	second, err := newPubSub(t, cfg).Subscribe(context.Background(), topic)
	require.NoError(t, err)

	const timeout = 2 * time.Second
	release := make(chan struct{})
	acked := handleWithTimeout(msg, timeout, func(*message.Message) { <-release }) // ignores its context

	again := brokertest.Next(t, second, timeout+3*cfg.AckDeadline)
	took := time.Since(received)
	assert.Equal(t, sent.UUID, again.UUID)
	assert.Equal(t, "1", again.Metadata.Get(metadata.AttemptKey), "the first delivery counts")
	assert.GreaterOrEqual(t, took, timeout, "leased until the handler's deadline")
	assert.LessOrEqual(t, took, timeout+cfg.AckDeadline+time.Second, "renewed past the handler's deadline")

	close(release)
	select {
	case ok := <-acked:
		t.Logf("late ack taken by the message: %v", ok)
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the first handler did not end")
	}
	time.Sleep(200 * time.Millisecond) // what the first subscription might still apply
	assert.Equal(t, 1, rowsLeft(t, cfg, topic), "the late ack deleted a row another subscriber holds")
	require.True(t, again.Ack())
	assert.Eventually(t, func() bool { return rowsLeft(t, cfg, topic) == 0 }, 5*time.Second, 50*time.Millisecond, "acked: deleted")
}
