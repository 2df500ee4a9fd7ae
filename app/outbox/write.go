package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/dbtx"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/migrations"
)

// OrderingKeyMetadata is the metadata key whose value, when set on a message
// given to Write, becomes the row's ordering key (see the package doc, Order).
// The key stays in the message's metadata, so it is published too.
const OrderingKeyMetadata = metadata.OrderingKeyKey

// Table is the outbox table of one schema. The zero value is the default
// schema's.
type Table struct {
	// Schema holding the outbox table; migrations.DefaultSchema when empty.
	Schema string
}

// Write adds msgs for topic to the default schema's outbox inside tx; see
// Table.Write.
func Write(ctx context.Context, tx pgx.Tx, topic string, msgs ...*message.Message) error {
	return Table{}.Write(ctx, tx, topic, msgs...)
}

// Write adds msgs for topic to the outbox inside tx: they are published after
// tx commits and never if it rolls back. Each message must already be encoded
// by its route's codec; its UUID is the event id (unique: writing an id twice
// fails) and its metadata is stored as JSON. A payload over
// broker.MaxPayloadBytes, or a message without a UUID, is refused here rather
// than failing at every relay attempt.
//
// When tx is a *dbtx.PipelinedTx (what dbtx.InTx begins on a pool, so every
// handler's transaction), the rows and their ordering-key locks are not sent
// now but with tx's COMMIT, in the same round trip (dbtx.PipelinedTx's
// ExecAtCommit): a row that fails there — an event id written twice — fails
// the Commit, which rolls the whole transaction back, not Write. The
// transaction does not see its own outbox rows before it commits. With any
// other pgx.Tx the rows are inserted now and such a failure is Write's.
func (t Table) Write(ctx context.Context, tx pgx.Tx, topic string, msgs ...*message.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if topic == "" {
		return errors.New("outbox write: empty topic")
	}
	table, err := t.name()
	if err != nil {
		return err
	}
	if err := broker.CheckPayloads(msgs); err != nil {
		return fmt.Errorf("outbox write %s: %w", topic, err)
	}
	ids := make([]string, len(msgs))
	payloads := make([][]byte, len(msgs))
	metas := make([]string, len(msgs))
	keys := make([]string, len(msgs))
	for i, m := range msgs {
		if m.UUID == "" {
			return fmt.Errorf("outbox write %s: message %d has no UUID (the event id)", topic, i)
		}
		md := m.Metadata
		if md == nil {
			md = message.Metadata{}
		}
		b, err := json.Marshal(md)
		if err != nil {
			return fmt.Errorf("outbox write %s: message %s: metadata: %w", topic, m.UUID, err)
		}
		ids[i], payloads[i], metas[i], keys[i] = m.UUID, m.Payload, string(b), md.Get(OrderingKeyMetadata)
		if payloads[i] == nil {
			payloads[i] = []byte{}
		}
	}
	run := runNow(tx)
	if p, ok := tx.(*dbtx.PipelinedTx); ok {
		run = atCommit(p)
	}
	if err := lockKeys(ctx, run, table, topic, keys); err != nil {
		return err
	}
	if len(msgs) == 1 {
		// One row, the common case, as plain VALUES: unnest's four array
		// parameters cost the server about a third of the row (decision
		// 0044).
		var key any
		if keys[0] != "" {
			key = keys[0]
		}
		err = run(ctx, "outbox write "+topic, `INSERT INTO `+table+` (event_id, topic, payload, metadata, ordering_key)
		VALUES ($1, $2, $3, $4, $5)`,
			ids[0], topic, payloads[0], metas[0], key)
	} else {
		err = run(ctx, "outbox write "+topic, `INSERT INTO `+table+` (event_id, topic, payload, metadata, ordering_key)
		SELECT id, $1, payload, meta::jsonb, NULLIF(key, '')
		FROM unnest($2::text[], $3::bytea[], $4::text[], $5::text[]) AS m(id, payload, meta, key)`,
			topic, ids, payloads, metas, keys)
	}
	if err != nil {
		return fmt.Errorf("outbox write %s: %w", topic, err)
	}
	return nil
}

// runner runs one of Write's statements, now or at commit; purpose names it
// in a commit's error.
type runner func(ctx context.Context, purpose, sql string, args ...any) error

func runNow(tx pgx.Tx) runner {
	return func(ctx context.Context, _, sql string, args ...any) error {
		_, err := tx.Exec(ctx, sql, args...)
		return err
	}
}

func atCommit(tx *dbtx.PipelinedTx) runner {
	return func(_ context.Context, purpose, sql string, args ...any) error {
		return tx.ExecAtCommit(purpose, sql, args...)
	}
}

// lockKeys takes a transaction-scoped advisory lock per distinct (topic,
// ordering key), in sorted order so that two writers cannot deadlock. It makes
// a key's ids follow its commit order, which strict ordering relies on: a
// later writer gets its id only after the earlier one committed. The lock id
// is a 64-bit hash; a collision only makes two unrelated keys' writers wait
// for each other. Held back to the commit (a PipelinedTx), the locks are
// taken just before the rows are inserted and held until the COMMIT that
// follows them in the same pipeline, which keeps that order.
func lockKeys(ctx context.Context, run runner, table, topic string, keys []string) error {
	var distinct []string
	for _, k := range keys {
		if k != "" {
			distinct = append(distinct, k)
		}
	}
	if len(distinct) == 0 {
		return nil
	}
	slices.Sort(distinct)
	distinct = slices.Compact(distinct)
	for _, k := range distinct {
		purpose := fmt.Sprintf("outbox write %s: lock ordering key %q", topic, k)
		if err := run(ctx, purpose, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, table+"\x1f"+topic+"\x1f"+k); err != nil {
			return fmt.Errorf("outbox write %s: lock ordering key %q: %w", topic, k, err)
		}
	}
	return nil
}

func (t Table) name() (string, error) {
	s := migrations.SchemaOrDefault(t.Schema)
	if err := migrations.ValidateSchema(s); err != nil {
		return "", fmt.Errorf("outbox: %w", err)
	}
	return pgx.Identifier{s, "outbox"}.Sanitize(), nil
}

// channel is the NOTIFY channel of schema's outbox trigger.
func channel(schema string) string {
	return migrations.SchemaOrDefault(schema) + "_outbox"
}
