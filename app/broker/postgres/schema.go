package postgres

import (
	"bytes"
	"context"
	stdsql "database/sql"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	"github.com/eventpipe/eventpipe/app/metadata"
)

// maxIdentifierBytes is PostgreSQL's NAMEDATALEN-1. Longer names are silently
// truncated by the server, so two long topics could share one table.
const maxIdentifierBytes = 63

// queueSchema is the watermill-sql SchemaAdapter for one table per topic, used
// as a work queue: rows are claimed with FOR UPDATE SKIP LOCKED, so competing
// subscribers take disjoint batches instead of queueing behind one lock.
//
// Neither stock adapter does that. DefaultPostgreSQLSchema with its offsets
// table locks the consumer group's offset row for the whole batch, and
// PostgreSQLQueueSchema selects FOR UPDATE without SKIP LOCKED under
// REPEATABLE READ, so a second subscriber blocks on the first one's rows and
// then fails with a serialization error: either way one subscriber works at a
// time (see the package documentation for the numbers).
type queueSchema struct {
	schema    string
	prefix    string
	batchSize int
	// logger reports rows whose metadata had to be repaired on delivery; nil
	// logs nothing.
	logger watermill.LoggerAdapter
}

var (
	_ wsql.SchemaAdapter       = queueSchema{}
	_ wsql.RequiresTransaction = queueSchema{}
)

// tableName is the unquoted table name of a topic.
func (s queueSchema) tableName(topic string) string { return s.prefix + topic }

// table is the quoted, schema-qualified table of a topic, safe to splice into
// SQL (watermill-sql restricts topic characters too, but quoting does not
// depend on that).
func (s queueSchema) table(topic string) string {
	return pgx.Identifier{s.schema, s.tableName(topic)}.Sanitize()
}

// checkTopic rejects topics whose table name PostgreSQL would truncate.
func (s queueSchema) checkTopic(topic string) error {
	if topic == "" {
		return fmt.Errorf("postgres: empty topic")
	}
	if n := len(s.tableName(topic)); n > maxIdentifierBytes {
		return fmt.Errorf("postgres: topic %q: table name %q is %d bytes, PostgreSQL allows %d: use a shorter topic or TablePrefix",
			topic, s.tableName(topic), n, maxIdentifierBytes)
	}
	return nil
}

// initLockKey serialises schema creation across processes: two concurrent
// CREATE ... IF NOT EXISTS of the same object can still fail with a unique
// violation in the catalog. One key per schema, because the statements also
// create the schema itself.
func (s queueSchema) initLockKey() int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("eventpipe queue schema init:" + s.schema))
	return int64(h.Sum64())
}

// SchemaInitializingQueries creates the schema and the topic's table. They run
// in one transaction (RequiresTransaction) so the advisory lock covers them.
//
// available_at is what makes a nack a real redelivery: the row is pushed into
// the future and any subscriber may claim it again. attempts counts the nacks
// of the row, which is what a delivery sees as metadata.AttemptKey;
// first_failed_at and last_failed_at are the times of its first and latest
// nack (NULL until then), for dead-letter reasons. Max-attempts
// dead-lettering will join them here.
//
// A table made before the attempt columns existed gets them added — once:
// the DO block alters the table only when a column is missing, so a running
// system does not take the table lock on every start.
func (s queueSchema) SchemaInitializingQueries(params wsql.SchemaInitializingQueriesParams) ([]wsql.Query, error) {
	if err := s.checkTopic(params.Topic); err != nil {
		return nil, err
	}
	return []wsql.Query{
		{Query: `SELECT pg_advisory_xact_lock($1)`, Args: []any{s.initLockKey()}},
		{Query: `CREATE SCHEMA IF NOT EXISTS ` + pgx.Identifier{s.schema}.Sanitize()},
		{Query: `CREATE TABLE IF NOT EXISTS ` + s.table(params.Topic) + ` (
			"offset"     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			uuid         TEXT NOT NULL,
			payload      BYTEA NOT NULL,
			metadata     JSON NOT NULL,
			created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
			available_at TIMESTAMPTZ NOT NULL DEFAULT now(),
			attempts     INTEGER NOT NULL DEFAULT 0,
			first_failed_at TIMESTAMPTZ,
			last_failed_at  TIMESTAMPTZ
		)`},
		{Query: `DO $$BEGIN
			IF NOT EXISTS (SELECT 1 FROM pg_attribute
				WHERE attrelid = '` + strings.ReplaceAll(s.table(params.Topic), "'", "''") + `'::regclass
				AND attname = 'last_failed_at' AND NOT attisdropped) THEN
				ALTER TABLE ` + s.table(params.Topic) + `
					ADD COLUMN IF NOT EXISTS attempts INTEGER NOT NULL DEFAULT 0,
					ADD COLUMN IF NOT EXISTS first_failed_at TIMESTAMPTZ,
					ADD COLUMN IF NOT EXISTS last_failed_at TIMESTAMPTZ;
			END IF;
		END$$`},
	}, nil
}

// RequiresTransaction makes watermill-sql run the initialising queries in a
// transaction, which the advisory lock needs.
func (s queueSchema) RequiresTransaction() bool { return true }

// InsertQuery inserts all messages with one statement and three array
// parameters, so a batch of any size stays under PostgreSQL's 65,535-parameter
// limit and commits atomically. WITH ORDINALITY keeps the offsets in publish
// order. A publisher's metadata.AttemptKey is not stored: the attempt number is
// the row's, set on delivery, and a handler that republishes a received
// message's metadata must not carry its count into the new message.
func (s queueSchema) InsertQuery(params wsql.InsertQueryParams) (wsql.Query, error) {
	uuids := make([]string, len(params.Msgs))
	payloads := make([][]byte, len(params.Msgs))
	metadatas := make([]string, len(params.Msgs))
	for i, m := range params.Msgs {
		md := m.Metadata
		if md == nil {
			md = message.Metadata{}
		}
		if _, ok := md[metadata.AttemptKey]; ok {
			md = withoutKey(md, metadata.AttemptKey)
		}
		b, err := json.Marshal(md)
		if err != nil {
			return wsql.Query{}, fmt.Errorf("marshal metadata of message %s: %w", m.UUID, err)
		}
		uuids[i] = m.UUID
		payloads[i] = nonNil(m.Payload)
		metadatas[i] = string(b)
	}
	return wsql.Query{
		Query: `INSERT INTO ` + s.table(params.Topic) + ` (uuid, payload, metadata)
			SELECT u, p, m::json
			FROM unnest($1::text[], $2::bytea[], $3::text[]) WITH ORDINALITY AS batch(u, p, m, n)
			ORDER BY n`,
		Args: []any{uuids, payloads, metadatas},
	}, nil
}

// withoutKey is a copy of md without key; the publisher's message is left as
// it is.
func withoutKey(md message.Metadata, key string) message.Metadata {
	out := make(message.Metadata, len(md))
	for k, v := range md {
		if k != key {
			out[k] = v
		}
	}
	return out
}

// nonNil keeps an empty payload from becoming SQL NULL.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// SelectQuery claims the oldest available batch that no other transaction
// holds. The rows stay locked until the subscriber's transaction ends, which
// watermill-sql keeps open while the batch is being handled.
func (s queueSchema) SelectQuery(params wsql.SelectQueryParams) (wsql.Query, error) {
	if params.ConsumerGroup != "" {
		return wsql.Query{}, fmt.Errorf("postgres: consumer groups are not supported: a topic is a queue")
	}
	// clock_timestamp, not now(): now() is the start of this transaction, which
	// can precede the insert of a row that is already committed and visible.
	return wsql.Query{Query: fmt.Sprintf(`SELECT "offset", uuid, payload, metadata, attempts, first_failed_at
		FROM %s
		WHERE available_at <= clock_timestamp()
		ORDER BY "offset"
		LIMIT %d
		FOR UPDATE SKIP LOCKED`, s.table(params.Topic), s.batchSize)}, nil
}

// UnmarshalMessage turns a claimed row into a message. metadata.AttemptKey is
// set from the row's attempts column, over whatever the metadata holds: the
// number of earlier deliveries that ended in a nack. A delivery that ended
// without a settlement (a crash, a lost connection, an expired ack deadline,
// Close) is not counted: its increment would roll back with the claim.
// metadata.FirstFailureKey is set from first_failed_at, the time of the row's
// first nack, when there was one, and is otherwise absent: a publisher's value
// is never delivered.
//
// It never fails on the metadata: an error here would make watermill-sql roll
// back the claim and try the same oldest row again forever, blocking the
// queue. Metadata that is not a JSON object of strings (written by something
// other than this broker) is repaired as decodeMetadata says, and logged.
func (s queueSchema) UnmarshalMessage(params wsql.UnmarshalMessageParams) (wsql.Row, error) {
	var (
		r           wsql.Row
		uuid        string
		attempts    int64
		firstFailed *time.Time
	)
	if err := params.Row.Scan(&r.Offset, &uuid, &r.Payload, &r.Metadata, &attempts, &firstFailed); err != nil {
		return wsql.Row{}, fmt.Errorf("scan message row: %w", err)
	}
	r.UUID = []byte(uuid)
	msg := message.NewMessage(uuid, r.Payload)
	md, err := decodeMetadata(r.Metadata)
	if err != nil && s.logger != nil {
		s.logger.Error("Queue row has malformed metadata; delivering what could be read", err,
			watermill.LogFields{"message_uuid": uuid, "offset": r.Offset})
	}
	setDeliveryMetadata(md, attempts, firstFailed)
	msg.Metadata = md
	r.Msg = msg
	return r, nil
}

// setDeliveryMetadata sets the keys only the row may give, over whatever the
// stored metadata holds. A stored metadata.NackDelayKey (a publisher forwarding
// what it received) is dropped too: only this consumer's nack may ask for a
// delay.
func setDeliveryMetadata(md message.Metadata, attempts int64, firstFailed *time.Time) {
	md.Set(metadata.AttemptKey, strconv.FormatInt(attempts, 10))
	delete(md, metadata.NackDelayKey)
	delete(md, metadata.FirstFailureKey)
	// The column is only ever set from clock_timestamp(); a time RFC 3339
	// cannot write (outside years 0-9999, which PostgreSQL allows) could only
	// come from a hand edit, and is left out rather than sent unparsable.
	if firstFailed != nil {
		if at := firstFailed.UTC(); at.Year() >= 0 && at.Year() <= 9999 {
			md.Set(metadata.FirstFailureKey, at.Format(time.RFC3339Nano))
		}
	}
}

// decodeMetadata reads a row's metadata column. What this broker writes is a
// JSON object of strings, which decodes as it is. Anything else still yields
// metadata, never nil, and an error that says what was wrong: a value that is
// not a string is kept as its compact JSON text (null as ""), and a column
// that is not an object (null, an array, a scalar, invalid JSON) gives empty
// metadata.
func decodeMetadata(raw []byte) (message.Metadata, error) {
	md := message.Metadata{}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return md, fmt.Errorf("metadata is not a JSON object: %w", err)
	}
	var notStrings []string
	for k, v := range fields {
		var str *string
		if err := json.Unmarshal(v, &str); err == nil {
			if str != nil {
				md[k] = *str
			} else {
				md[k] = ""
			}
			continue
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, v); err != nil {
			buf.Reset()
			buf.Write(v) // unreachable: v is valid JSON
		}
		// Compact copies the strings inside the value byte for byte, invalid
		// UTF-8 included; made valid here, as decoded strings are.
		md[k] = strings.ToValidUTF8(buf.String(), "\uFFFD")
		notStrings = append(notStrings, k)
	}
	if len(notStrings) > 0 {
		sort.Strings(notStrings)
		return md, fmt.Errorf("metadata values of %q are not strings: kept as JSON text", notStrings)
	}
	return md, nil
}

// SubscribeIsolationLevel is READ COMMITTED: under REPEATABLE READ, claiming a
// row that another subscriber deleted after this transaction's snapshot raises
// a serialization error instead of skipping it. Note that watermill-sql's pgx
// adapter maps the zero level to SERIALIZABLE, so this must be explicit.
func (s queueSchema) SubscribeIsolationLevel() stdsql.IsolationLevel {
	return stdsql.LevelReadCommitted
}

// queueOffsets is the OffsetsAdapter of one subscription. It settles a batch
// when watermill-sql commits it: acked rows are deleted, nacked rows are made
// available again after the redelivery delay.
//
// watermill-sql itself never tells the adapter about a nack: it re-sends the
// same message in-process, holding the row lock, for as long as the handler
// keeps failing. The subscription's relay therefore turns a consumer's nack
// into an upstream ack and records it in nacked, so that the row is released
// rather than deleted.
type queueOffsets struct {
	schema          queueSchema
	nacked          *nackSet
	redeliveryDelay time.Duration
}

var _ wsql.OffsetsAdapter = queueOffsets{}

// AckMessageQuery settles only the rows up to LastRow: watermill-sql passes the
// whole batch in Rows even when it stopped early (ack deadline, Close), and its
// stock queue adapter deletes all of them, losing the rows it never delivered.
func (a queueOffsets) AckMessageQuery(params wsql.AckMessageQueryParams) (wsql.Query, error) {
	var acked, nacked, delays []int64
	settled := true
	for _, row := range params.Rows {
		// take runs for every row so that a nack racing the end of the batch
		// leaves nothing behind in the set.
		n, wasNacked := a.nacked.take(row.Msg)
		if !settled {
			continue
		}
		if wasNacked {
			delay := a.redeliveryDelay
			if n.requested {
				delay = n.delay
			}
			nacked = append(nacked, row.Offset)
			delays = append(delays, delay.Microseconds())
		} else {
			acked = append(acked, row.Offset)
		}
		settled = row.Offset != params.LastRow.Offset
	}
	table := a.schema.table(params.Topic)
	if len(nacked) == 0 {
		return wsql.Query{
			Query: `DELETE FROM ` + table + ` WHERE "offset" = ANY($1)`,
			Args:  []any{acked},
		}, nil
	}
	// A nack counts one attempt, stamps the failure times and hides the row
	// for its delay (each row its own). The seam for max attempts: moving the
	// row to a dead-letter table belongs in this UPDATE.
	return wsql.Query{
		Query: `WITH redeliver AS (
				UPDATE ` + table + ` AS q
				SET available_at = clock_timestamp() + n.delay * interval '1 microsecond',
					attempts = q.attempts + 1,
					first_failed_at = coalesce(q.first_failed_at, clock_timestamp()),
					last_failed_at = clock_timestamp()
				FROM unnest($2::bigint[], $3::bigint[]) AS n(off, delay)
				WHERE q."offset" = n.off
			)
			DELETE FROM ` + table + ` WHERE "offset" = ANY($1)`,
		Args: []any{acked, nacked, delays},
	}, nil
}

// ConsumedMessageQuery is not needed: the row lock already marks a message as
// taken.
func (a queueOffsets) ConsumedMessageQuery(wsql.ConsumedMessageQueryParams) (wsql.Query, error) {
	return wsql.Query{}, nil
}

// NextOffsetQuery is not needed: a queue has no offsets to resume from.
func (a queueOffsets) NextOffsetQuery(wsql.NextOffsetQueryParams) (wsql.Query, error) {
	return wsql.Query{}, nil
}

// SchemaInitializingQueries is empty: queueSchema creates the only table.
func (a queueOffsets) SchemaInitializingQueries(wsql.OffsetsSchemaInitializingQueriesParams) ([]wsql.Query, error) {
	return nil, nil
}

// BeforeSubscribingQueries is empty: a queue subscriber registers nothing.
func (a queueOffsets) BeforeSubscribingQueries(wsql.BeforeSubscribingQueriesParams) ([]wsql.Query, error) {
	return nil, nil
}

// nackSet holds the upstream messages whose consumer nacked them, keyed by
// pointer: that is the one identity shared by the relay and the Row that
// watermill-sql hands back at commit (UUIDs need not be unique).
type nackSet struct {
	mu sync.Mutex
	m  map[*message.Message]nack
}

// nack is one consumer's nack: the redelivery delay it asked for with
// metadata.NackDelayKey, if it did.
type nack struct {
	delay     time.Duration
	requested bool
}

// nackOf reads the delay a nacked message asks for: a valid
// metadata.NackDelayKey duration (negative counts as 0). Without one, or with
// one that does not parse, the nack gets Config.RedeliveryDelay.
func nackOf(msg *message.Message) nack {
	raw, ok := msg.Metadata[metadata.NackDelayKey]
	if !ok {
		return nack{}
	}
	d, err := time.ParseDuration(raw)
	if err != nil {
		return nack{}
	}
	return nack{delay: max(d, 0), requested: true}
}

func newNackSet() *nackSet { return &nackSet{m: map[*message.Message]nack{}} }

func (s *nackSet) add(m *message.Message, n nack) {
	s.mu.Lock()
	s.m[m] = n
	s.mu.Unlock()
}

func (s *nackSet) take(m *message.Message) (nack, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.m[m]
	delete(s.m, m)
	return n, ok
}

// SubscribeInitialize creates the schema and the topic's table if they do not
// exist, whatever AutoInitializeSchema says: it is the provisioning step.
func (p *PubSub) SubscribeInitialize(topic string) error {
	if err := p.schema.checkTopic(topic); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return p.ensureTable(ctx, topic)
}

// ensureTable creates the topic's table once per PubSub.
func (p *PubSub) ensureTable(ctx context.Context, topic string) error {
	if _, ok := p.initialized.Load(topic); ok {
		return nil
	}
	queries, err := p.schema.SchemaInitializingQueries(wsql.SchemaInitializingQueriesParams{Topic: topic})
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, p.publishPool, func(tx pgx.Tx) error {
		for _, q := range queries {
			if _, err := tx.Exec(ctx, q.Query, q.Args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("postgres: create queue table %s: %w", p.schema.table(topic), err)
	}
	p.initialized.Store(topic, struct{}{})
	return nil
}

// checkTable fails a subscription to a topic whose table is missing, instead
// of letting it poll and log the same error forever.
func (p *PubSub) checkTable(ctx context.Context, topic string) error {
	if _, ok := p.initialized.Load(topic); ok {
		return nil
	}
	var exists bool
	err := p.consumePool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, p.schema.table(topic)).Scan(&exists)
	if err != nil {
		return fmt.Errorf("postgres: look up queue table %s: %w", p.schema.table(topic), err)
	}
	if !exists {
		return fmt.Errorf("postgres: subscribe %s: queue table %s does not exist: create it with SubscribeInitialize or enable AutoInitializeSchema",
			topic, p.schema.table(topic))
	}
	p.initialized.Store(topic, struct{}{})
	return nil
}
