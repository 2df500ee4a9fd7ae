package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/outbox"
)

// The outbox row exists if and only if the business row does (disputes LLD
// §5, first test).
func TestWriteCommitsWithTheBusinessRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	_, err := e.pool.Exec(ctx, `CREATE TABLE `+e.q("business_rows")+` (id text PRIMARY KEY)`)
	require.NoError(t, err)

	raise := func(id string, commit bool, failAfterOutbox bool) error {
		tx, err := e.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, `INSERT INTO `+e.q("business_rows")+` (id) VALUES ($1)`, id); err != nil {
			return err
		}
		if err := e.table.Write(ctx, tx, "domain-events", message.NewMessage("evt-"+id, []byte(`{}`))); err != nil {
			return err
		}
		if failAfterOutbox {
			return errors.New("business rule failed after the outbox write")
		}
		if commit {
			return tx.Commit(ctx)
		}
		return nil
	}
	businessRows := func(id string) int {
		var n int
		require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FROM `+e.q("business_rows")+` WHERE id = $1`, id).Scan(&n))
		return n
	}

	require.NoError(t, raise("d1", true, false))
	assert.Equal(t, 1, businessRows("d1"))
	assert.Equal(t, 1, e.count(t, "event_id = 'evt-d1'"))

	require.NoError(t, raise("d2", false, false)) // rolled back by the deferred Rollback
	assert.Equal(t, 0, businessRows("d2"))
	assert.Equal(t, 0, e.count(t, "event_id = 'evt-d2'"))

	require.Error(t, raise("d3", true, true))
	assert.Equal(t, 0, businessRows("d3"))
	assert.Equal(t, 0, e.count(t, "event_id = 'evt-d3'"))

	// The event id is unique: writing it again fails, and the transaction
	// with it.
	tx, err := e.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.Error(t, e.table.Write(ctx, tx, "domain-events", message.NewMessage("evt-d1", []byte(`{}`))))
}

func TestWriteStoresTheMessage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	m1 := message.NewMessage("e1", []byte(`{"a":1}`))
	m1.Metadata.Set("x-trace-id", "abc")
	m1.Metadata.Set(outbox.OrderingKeyMetadata, "dispute-7")
	m2 := message.NewMessage("e2", nil)
	e.write(t, "domain-events", m1, m2)

	var (
		topic    string
		payload  []byte
		metadata []byte
		key      *string
		attempts int
	)
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT topic, payload, metadata, ordering_key, attempts FROM `+e.q("outbox")+` WHERE event_id = 'e1'`).
		Scan(&topic, &payload, &metadata, &key, &attempts))
	assert.Equal(t, "domain-events", topic)
	assert.JSONEq(t, `{"a":1}`, string(payload))
	var md map[string]string
	require.NoError(t, json.Unmarshal(metadata, &md))
	assert.Equal(t, map[string]string{"x-trace-id": "abc", outbox.OrderingKeyMetadata: "dispute-7"}, md)
	require.NotNil(t, key)
	assert.Equal(t, "dispute-7", *key)
	assert.Equal(t, 0, attempts)

	require.NoError(t, e.pool.QueryRow(ctx, `SELECT ordering_key, payload FROM `+e.q("outbox")+` WHERE event_id = 'e2'`).Scan(&key, &payload))
	assert.Nil(t, key)
	assert.Empty(t, payload)
}

func TestWriteRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	tx, err := e.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()

	assert.ErrorContains(t, e.table.Write(ctx, tx, "", message.NewMessage("a", nil)), "empty topic")
	assert.ErrorContains(t, e.table.Write(ctx, tx, "t", message.NewMessage("", nil)), "no UUID")
	var tooLarge *broker.PayloadTooLargeError
	require.ErrorAs(t, e.table.Write(ctx, tx, "t", message.NewMessage("big", []byte(strings.Repeat("x", broker.MaxPayloadBytes+1)))), &tooLarge)
	assert.ErrorContains(t, outbox.Table{Schema: "Bad-Schema"}.Write(ctx, tx, "t", message.NewMessage("a", nil)), "schema")
	require.NoError(t, e.table.Write(ctx, tx, "t"), "nothing to write")
}

// Writing commits a NOTIFY on "<schema>_outbox", and only at commit.
func TestWriteNotifiesAtCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	conn, err := e.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `LISTEN `+e.schema+`_outbox`)
	require.NoError(t, err)

	tx, err := e.pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, e.table.Write(ctx, tx, "t", msgs("n", 3)...))
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = conn.Conn().WaitForNotification(wctx)
	cancel()
	require.Error(t, err, "no notification before commit")
	require.NoError(t, tx.Commit(ctx))

	wctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := conn.Conn().WaitForNotification(wctx)
	require.NoError(t, err)
	assert.Equal(t, e.schema+"_outbox", n.Channel)
	_, err = conn.Exec(ctx, `UNLISTEN *`)
	require.NoError(t, err)
}
