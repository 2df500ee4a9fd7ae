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

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/postgres"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// Each queue claims its own batch size and leases for its own ack deadline;
// a queue without either takes the global values.
func TestQueueBatchSizesAndAckDeadlines(t *testing.T) {
	t.Parallel()
	short, long, plain := brokertest.Topic(t), brokertest.Topic(t), brokertest.Topic(t)
	cfg := testConfig(t)
	cfg.BatchSize = 4
	cfg.AckDeadline = 3 * time.Second
	cfg.QueueBatchSizes = map[string]int{short: 1, long: 3}
	cfg.QueueAckDeadlines = map[string]time.Duration{short: 700 * time.Millisecond, long: time.Minute}
	ps := newPubSub(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, cfg.DSN)
	require.NoError(t, err)
	defer conn.Close(ctx)

	held := map[string]*message.Message{}
	received := map[string]time.Time{}
	claimed := map[string]int64{}
	stop := map[string]context.CancelFunc{}
	for _, q := range []string{short, long, plain} {
		for range 5 {
			require.NoError(t, ps.Publish(q, message.NewMessage(watermill.NewUUID(), []byte(q))))
		}
		subCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop[q] = cancel
		msgs, err := ps.Subscribe(subCtx, q)
		require.NoError(t, err)
		held[q] = brokertest.Next(t, msgs, 10*time.Second)
		received[q] = time.Now()
		s, err := ps.QueueStats(ctx, q)
		require.NoError(t, err)
		claimed[q] = s.InFlight
	}
	assert.Equal(t, map[string]int64{short: 1, long: 3, plain: 4}, claimed, "rows claimed by each queue's first batch")

	// Each queue's lease is its own deadline.
	for q, want := range map[string]time.Duration{short: 700 * time.Millisecond, long: time.Minute, plain: cfg.AckDeadline} {
		var left time.Duration
		table := pgx.Identifier{cfg.Schema, postgres.DefaultTablePrefix + q}.Sanitize()
		require.NoError(t, conn.QueryRow(ctx, `SELECT max(claimed_until) - statement_timestamp() FROM `+table+` WHERE uuid = $1`, held[q].UUID).Scan(&left))
		assert.InDelta(t, want, left, float64(want/2+200*time.Millisecond), "lease left of %s", q)
	}
	// The short queue's message, past its handler's deadline, is cancelled
	// at the end of its lease; the others keep theirs.
	broker.StartAttempt(held[short].Context(), time.Now())
	select {
	case <-held[short].Context().Done():
		assert.Less(t, time.Since(received[short]), 2*time.Second, "the short queue's deadline")
	case <-time.After(5 * time.Second):
		t.Fatal("the short queue's message outlived its 700 ms deadline")
	}
	assert.NoError(t, held[long].Context().Err(), "the long queue's message keeps its lease")
	assert.NoError(t, held[plain].Context().Err(), "the plain queue's message keeps its lease")
	require.True(t, held[long].Ack())
	require.True(t, held[plain].Ack())

	// The short queue's message comes back, counted once. Its first
	// subscription, whose channel is no longer read, may claim it again and
	// give it back (uncounted) until it is stopped; meanwhile another
	// subscriber may get younger messages first.
	stop[short]()
	msgs, err := ps.Subscribe(ctx, short)
	require.NoError(t, err)
	for {
		m := brokertest.Next(t, msgs, 10*time.Second)
		require.True(t, m.Ack())
		if m.UUID == held[short].UUID {
			assert.Equal(t, "1", m.Metadata.Get(metadata.AttemptKey))
			return
		}
		assert.Equal(t, "0", m.Metadata.Get(metadata.AttemptKey), "never delivered before")
	}
}
