package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/postgres"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// claimsOf returns, per row of topic's table in offset order, its attempts
// and the end of its claim's lease (zero when not claimed).
func claimsOf(t *testing.T, cfg postgres.Config, topic string) (attempts []int, leases []time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, cfg.DSN)
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT attempts, coalesce(claimed_until, 'epoch') FROM `+
		pgx.Identifier{cfg.Schema, postgres.DefaultTablePrefix + topic}.Sanitize()+` ORDER BY "offset"`)
	require.NoError(t, err)
	var (
		a int
		l time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&a, &l}, func() error {
		attempts = append(attempts, a)
		if l.Equal(time.Unix(0, 0)) {
			l = time.Time{}
		}
		leases = append(leases, l)
		return nil
	})
	require.NoError(t, err)
	return attempts, leases
}

// A batch is one claim: Next returns at most the batch size, in publish
// order, every row of it leased by the same statement (one claimed_until)
// with its attempt counted; Ack deletes what Next returned since the last
// Ack, and only that; Close gives the rest back at once, uncounted; an
// empty queue returns nothing once wait has passed.
func TestReceiveBatchesClaimsAndSettlesABatchAtOnce(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.PollInterval = 20 * time.Millisecond
	ps := newPubSub(t, cfg)
	topic := brokertest.Topic(t)
	var sent []*message.Message
	for i := range 25 {
		sent = append(sent, message.NewMessage(fmt.Sprintf("%s-%02d", topic, i), []byte(fmt.Sprint(i))))
	}
	require.NoError(t, ps.Publish(topic, sent...))
	ctx := context.Background()

	r, err := ps.ReceiveBatches(ctx, topic, 10)
	require.NoError(t, err)
	first, err := r.Next(ctx, 100, time.Second)
	require.NoError(t, err)
	require.Len(t, first, 10, "at most the batch size")
	for i, m := range first {
		assert.Equal(t, sent[i].UUID, m.UUID)
		assert.Equal(t, "0", m.Metadata.Get(metadata.AttemptKey))
	}
	attempts, leases := claimsOf(t, cfg, topic)
	for i := range 10 {
		assert.Equal(t, 1, attempts[i])
		assert.Equal(t, leases[0], leases[i], "one claim statement for the batch")
	}
	assert.False(t, leases[0].IsZero())
	assert.True(t, leases[10].IsZero(), "the rest are not claimed")

	second, err := r.Next(ctx, 4, time.Second)
	require.NoError(t, err)
	require.Len(t, second, 4, "at most the limit")
	assert.Equal(t, sent[10].UUID, second[0].UUID)
	require.NoError(t, r.Ack())
	assert.Equal(t, 11, rowsLeft(t, cfg, topic), "the 14 rows read are deleted, the others stay")

	third, err := r.Next(ctx, 10, time.Second)
	require.NoError(t, err)
	require.Len(t, third, 10)
	require.NoError(t, r.Close())
	attempts, leases = claimsOf(t, cfg, topic)
	require.Len(t, attempts, 11)
	for i := range attempts {
		assert.Equal(t, 0, attempts[i], "given back uncounted")
		assert.True(t, leases[i].IsZero(), "given back at once")
	}

	r, err = ps.ReceiveBatches(ctx, topic, 100)
	require.NoError(t, err)
	all, err := r.Next(ctx, 100, time.Second)
	require.NoError(t, err)
	require.Len(t, all, 11)
	require.NoError(t, r.Ack())
	start := time.Now()
	none, err := r.Next(ctx, 100, 300*time.Millisecond)
	require.NoError(t, err)
	assert.Empty(t, none)
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "waited for a message")
	require.NoError(t, r.Close())
	assert.Zero(t, rowsLeft(t, cfg, topic))
}

// Rows a slow caller holds for several ack deadlines stay its own: the
// heartbeat renews their lease, a subscriber of the queue gets none of them
// meanwhile, and the Ack deletes them all.
func TestReceiveBatchesKeepsTheLeaseOfASlowCaller(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.AckDeadline = 600 * time.Millisecond
	cfg.PollInterval = 20 * time.Millisecond
	ps := newPubSub(t, cfg)
	topic := brokertest.Topic(t)
	for i := range 5 {
		require.NoError(t, ps.Publish(topic, message.NewMessage(fmt.Sprintf("%s-%d", topic, i), nil)))
	}
	ctx := context.Background()
	r, err := ps.ReceiveBatches(ctx, topic, 10)
	require.NoError(t, err)
	defer func() { _ = r.Close() }()
	held, err := r.Next(ctx, 10, time.Second)
	require.NoError(t, err)
	require.Len(t, held, 5)

	subCtx, stop := context.WithCancel(ctx)
	defer stop()
	other, err := newPubSub(t, cfg).Subscribe(subCtx, topic)
	require.NoError(t, err)
	select {
	case m := <-other:
		require.Failf(t, "a held row went to a subscriber", "%s, attempt %s", m.UUID, m.Metadata.Get(metadata.AttemptKey))
	case <-time.After(3 * cfg.AckDeadline):
	}
	require.NoError(t, r.Ack())
	assert.Zero(t, rowsLeft(t, cfg, topic))
}
