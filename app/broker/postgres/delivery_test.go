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

// A nack with metadata.NackDelayKey makes the row available after that delay;
// a nack without it keeps RedeliveryDelay. Both are nacked together, so the
// one without a delay must come back first, and the delayed one not before
// its delay.
func TestNackDelay(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.RedeliveryDelay = 100 * time.Millisecond
	ps := newPubSub(t, cfg)
	var b broker.PubSub = ps
	d, ok := b.(broker.NackDelayer)
	require.True(t, ok, "the Postgres PubSub is a broker.NackDelayer")
	require.True(t, d.NacksWithDelay())

	topic := brokertest.Topic(t)
	delayed := message.NewMessage(watermill.NewUUID(), []byte("delayed"))
	plain := message.NewMessage(watermill.NewUUID(), []byte("plain"))
	require.NoError(t, ps.Publish(topic, delayed, plain))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)

	const delay = 2 * time.Second
	var nackedAt time.Time
	m := brokertest.Next(t, msgs, 10*time.Second)
	require.Equal(t, delayed.UUID, m.UUID)
	m.Metadata.Set(metadata.NackDelayKey, delay.String())
	nackedAt = time.Now()
	require.True(t, m.Nack())
	m = brokertest.Next(t, msgs, 10*time.Second)
	require.Equal(t, plain.UUID, m.UUID)
	require.True(t, m.Nack())

	first := brokertest.Next(t, msgs, 10*time.Second)
	assert.Equal(t, plain.UUID, first.UUID, "the message nacked without a delay comes back first")
	assert.Equal(t, "1", first.Metadata.Get(metadata.AttemptKey))
	require.True(t, first.Ack())

	second := brokertest.Next(t, msgs, 20*time.Second)
	waited := time.Since(nackedAt)
	require.True(t, second.Ack())
	assert.Equal(t, delayed.UUID, second.UUID)
	assert.Equal(t, "1", second.Metadata.Get(metadata.AttemptKey))
	assert.GreaterOrEqual(t, waited, delay-200*time.Millisecond, "redelivered before the requested delay")
	assert.Empty(t, second.Metadata.Get(metadata.NackDelayKey), "the delay request is not stored with the row")
}

// metadata.FirstFailureKey is absent until the first nack (a publisher's value
// included) and then the row's first_failed_at, the same on every
// redelivery.
func TestFirstFailureTime(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.RedeliveryDelay = 50 * time.Millisecond
	ps := newPubSub(t, cfg)
	topic := brokertest.Topic(t)
	sent := message.NewMessage(watermill.NewUUID(), []byte("fails"))
	sent.Metadata.Set(metadata.FirstFailureKey, "2000-01-01T00:00:00Z")
	require.NoError(t, ps.Publish(topic, sent))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)

	m := brokertest.Next(t, msgs, 10*time.Second)
	assert.NotContains(t, m.Metadata, metadata.FirstFailureKey, "a publisher's value is not delivered")
	before := time.Now()
	require.True(t, m.Nack())

	conn, err := pgx.Connect(ctx, cfg.DSN)
	require.NoError(t, err)
	defer conn.Close(ctx)
	table := pgx.Identifier{cfg.Schema, postgres.DefaultTablePrefix + topic}.Sanitize()

	var firstSeen string
	for range 2 {
		m := brokertest.Next(t, msgs, 10*time.Second)
		got := m.Metadata.Get(metadata.FirstFailureKey)
		at, err := time.Parse(time.RFC3339Nano, got)
		require.NoError(t, err, "%q", got)
		assert.Equal(t, time.UTC, at.Location())
		// The database's clock is this machine's.
		assert.WithinRange(t, at, before.Add(-time.Second), time.Now().Add(time.Second))
		var column time.Time
		require.NoError(t, conn.QueryRow(ctx, `SELECT first_failed_at FROM `+table+` WHERE uuid = $1`, sent.UUID).Scan(&column))
		assert.True(t, column.Equal(at), "column %s, metadata %s", column, at)
		if firstSeen == "" {
			firstSeen = got
			require.True(t, m.Nack())
		} else {
			assert.Equal(t, firstSeen, got, "the same on every redelivery")
			require.True(t, m.Ack())
		}
	}
}

// A message delivered and neither acked nor nacked when its PubSub closes
// goes back to the queue at once: a new subscriber gets it long before the
// ack deadline. The delivery Close ended counts, as any other does.
func TestCloseReleasesClaimed(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.AckDeadline = 2 * time.Minute
	topic := brokertest.Topic(t)
	pub := newPubSub(t, cfg)
	sent := message.NewMessage(watermill.NewUUID(), []byte("held"))
	require.NoError(t, pub.Publish(topic, sent))

	first := newPubSub(t, cfg)
	msgs, err := first.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	held := brokertest.Next(t, msgs, 10*time.Second)
	require.Equal(t, sent.UUID, held.UUID)
	require.NoError(t, first.Close())
	assert.Error(t, held.Context().Err(), "the handler is told")

	again, err := newPubSub(t, cfg).Subscribe(context.Background(), topic)
	require.NoError(t, err)
	m := brokertest.Next(t, again, 20*time.Second) // the ack deadline is 2 min
	m.Ack()
	assert.Equal(t, sent.UUID, m.UUID)
	assert.Equal(t, "1", m.Metadata.Get(metadata.AttemptKey), "the delivery Close ended counts")
}

// Rows whose metadata is not a JSON object of strings (written by something
// other than this broker) are delivered with what can be read, and do not
// block the queue.
func TestMalformedMetadataIsDelivered(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	ps := newPubSub(t, cfg)
	topic := brokertest.Topic(t)
	require.NoError(t, ps.SubscribeInitialize(topic))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, cfg.DSN)
	require.NoError(t, err)
	defer conn.Close(ctx)
	table := pgx.Identifier{cfg.Schema, postgres.DefaultTablePrefix + topic}.Sanitize()
	for uuid, md := range map[string]string{
		"mixed":  `{"a": 1, "b": "x", "c": {"d": [true, null]}, "e": null}`,
		"array":  `[1, 2]`,
		"null":   `null`,
		"scalar": `"just a string"`,
	} {
		_, err := conn.Exec(ctx, `INSERT INTO `+table+` (uuid, payload, metadata) VALUES ($1, 'p', $2::json)`, uuid, md)
		require.NoError(t, err)
	}
	last := message.NewMessage(watermill.NewUUID(), []byte("normal"))
	require.NoError(t, ps.Publish(topic, last))

	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)
	got := map[string]message.Metadata{}
	for len(got) < 5 {
		m := brokertest.Next(t, msgs, 10*time.Second)
		got[m.UUID] = m.Metadata
		m.Ack()
	}
	assert.Equal(t, message.Metadata{"a": "1", "b": "x", "c": `{"d":[true,null]}`, "e": "", metadata.AttemptKey: "0"}, got["mixed"])
	for _, uuid := range []string{"array", "null", "scalar"} {
		assert.Equal(t, message.Metadata{metadata.AttemptKey: "0"}, got[uuid], uuid)
	}
	assert.Contains(t, got, last.UUID)
}

// A subscription whose consumer stops taking messages (without cancelling
// it) gives its claimed rows back, uncounted, instead of holding them: other
// subscribers get them.
func TestStalledConsumerGivesBatchBack(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.AckDeadline = 2 * time.Second
	topic := brokertest.Topic(t)
	pub := newPubSub(t, cfg)
	var sent []string
	for range 3 {
		m := message.NewMessage(watermill.NewUUID(), []byte("work"))
		sent = append(sent, m.UUID)
		require.NoError(t, pub.Publish(topic, m))
	}

	stalled, err := newPubSub(t, cfg).Subscribe(context.Background(), topic)
	require.NoError(t, err)
	first := brokertest.Next(t, stalled, 10*time.Second)
	require.Equal(t, sent[0], first.UUID)
	require.True(t, first.Ack())
	// stalled is not read again.

	other, err := newPubSub(t, cfg).Subscribe(context.Background(), topic)
	require.NoError(t, err)
	for _, want := range sent[1:] {
		m := brokertest.Next(t, other, 10*time.Second)
		require.True(t, m.Ack())
		assert.Equal(t, want, m.UUID)
		assert.Equal(t, "0", m.Metadata.Get(metadata.AttemptKey), "never delivered before")
	}
}
