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
)

// metadata.AttemptKey on a delivery is the number of earlier deliveries of that
// message, from 0; a publisher's value is neither stored nor delivered, and a
// republished message's count starts again.
func TestAttemptCounts(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.RedeliveryDelay = 100 * time.Millisecond
	ps := newPubSub(t, cfg)
	topic := brokertest.Topic(t)
	republished := topic + "_again"

	retried := message.NewMessage(watermill.NewUUID(), []byte("nacked twice"))
	once := message.NewMessage(watermill.NewUUID(), []byte("acked at once"))
	forged := message.NewMessage(watermill.NewUUID(), []byte("publisher sets x-attempt"))
	forged.Metadata.Set(metadata.AttemptKey, "5")
	require.NoError(t, ps.Publish(topic, retried, once, forged))
	assert.Equal(t, "5", forged.Metadata.Get(metadata.AttemptKey), "the publisher's message is not changed")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, cfg.DSN)
	require.NoError(t, err)
	defer conn.Close(ctx)
	table := pgx.Identifier{cfg.Schema, postgres.DefaultTablePrefix + topic}.Sanitize()

	var stored string
	require.NoError(t, conn.QueryRow(ctx, `SELECT metadata::text FROM `+table+` WHERE uuid = $1`, forged.UUID).Scan(&stored))
	assert.NotContains(t, stored, metadata.AttemptKey, "a publisher's attempt number is not stored")

	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)
	seen := map[string][]string{}
	for len(seen[retried.UUID]) < 3 {
		m := brokertest.Next(t, msgs, 10*time.Second)
		attempt := m.Metadata.Get(metadata.AttemptKey)
		seen[m.UUID] = append(seen[m.UUID], attempt)
		if m.UUID != retried.UUID {
			m.Ack()
			continue
		}
		switch attempt {
		case "0", "1":
			m.Nack()
		default:
			// The row is claimed by this third delivery, which its
			// attempts column already counts; its failure columns are
			// those of the two nacks.
			var (
				attempts    int
				first, last *time.Time
			)
			require.NoError(t, conn.QueryRow(ctx,
				`SELECT attempts, first_failed_at, last_failed_at FROM `+table+` WHERE uuid = $1`,
				retried.UUID).Scan(&attempts, &first, &last))
			assert.Equal(t, 3, attempts)
			if assert.NotNil(t, first) && assert.NotNil(t, last) {
				assert.True(t, last.After(*first), "last failure %s after first %s", last, first)
			}
			// A handler that forwards the received metadata does not
			// forward the count.
			fwd := message.NewMessage(watermill.NewUUID(), m.Payload)
			for k, v := range m.Metadata {
				fwd.Metadata.Set(k, v)
			}
			require.NoError(t, ps.Publish(republished, fwd))
			m.Ack()
		}
	}
	assert.Equal(t, map[string][]string{
		retried.UUID: {"0", "1", "2"},
		once.UUID:    {"0"},
		forged.UUID:  {"0"},
	}, seen)

	again, err := ps.Subscribe(ctx, republished)
	require.NoError(t, err)
	m := brokertest.Next(t, again, 10*time.Second)
	m.Ack()
	assert.Equal(t, "0", m.Metadata.Get(metadata.AttemptKey), "a republished message starts at attempt 0")
}

// Queue tables of earlier releases, one without the attempt columns and one
// without the claim's lease, get the missing columns on initialization, keep
// their rows, and work: a row is delivered with metadata.AttemptKey, its
// claim counts, and a nack brings it back.
func TestOldTablesGetNewColumns(t *testing.T) {
	t.Parallel()
	for name, extra := range map[string]string{
		"without attempts": ``,
		"without lease": `,
			attempts     INTEGER NOT NULL DEFAULT 0,
			first_failed_at TIMESTAMPTZ,
			last_failed_at  TIMESTAMPTZ`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t)
			cfg.RedeliveryDelay = 50 * time.Millisecond
			topic := brokertest.Topic(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			conn, err := pgx.Connect(ctx, cfg.DSN)
			require.NoError(t, err)
			defer conn.Close(ctx)
			table := pgx.Identifier{cfg.Schema, postgres.DefaultTablePrefix + topic}.Sanitize()
			_, err = conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{cfg.Schema}.Sanitize())
			require.NoError(t, err)
			_, err = conn.Exec(ctx, `CREATE TABLE `+table+` (
				"offset"     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
				uuid         TEXT NOT NULL,
				payload      BYTEA NOT NULL,
				metadata     JSON NOT NULL,
				created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
				available_at TIMESTAMPTZ NOT NULL DEFAULT now()`+extra+`)`)
			require.NoError(t, err)
			_, err = conn.Exec(ctx, `INSERT INTO `+table+` (uuid, payload, metadata) VALUES ('old-1', 'from before', '{}')`)
			require.NoError(t, err)

			ps := newPubSub(t, cfg)
			require.NoError(t, ps.SubscribeInitialize(topic))
			var columns []string
			rows, err := conn.Query(ctx, `SELECT attname FROM pg_attribute
				WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, table)
			require.NoError(t, err)
			columns, err = pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			assert.Subset(t, columns, []string{"attempts", "first_failed_at", "last_failed_at", "claimed_until"})

			msgs, err := ps.Subscribe(ctx, topic)
			require.NoError(t, err)
			m := brokertest.Next(t, msgs, 10*time.Second)
			assert.Equal(t, "old-1", m.UUID)
			assert.Equal(t, "0", m.Metadata.Get(metadata.AttemptKey))
			require.True(t, m.Nack())
			m = brokertest.Next(t, msgs, 10*time.Second)
			assert.Equal(t, "old-1", m.UUID)
			assert.Equal(t, "1", m.Metadata.Get(metadata.AttemptKey))
			require.True(t, m.Ack())
		})
	}
}
