package postgres

import (
	stdsql "database/sql"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	"github.com/eventpipe/eventpipe/app/broker"
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
// of the row, which is what a delivery sees as broker.AttemptKey;
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
// order. A publisher's broker.AttemptKey is not stored: the attempt number is
// the row's, set on delivery, and a handler that republishes a received
// message's metadata must not carry its count into the new message.
func (s queueSchema) InsertQuery(params wsql.InsertQueryParams) (wsql.Query, error) {
	uuids := make([]string, len(params.Msgs))
	payloads := make([][]byte, len(params.Msgs))
	metadata := make([]string, len(params.Msgs))
	for i, m := range params.Msgs {
		md := m.Metadata
		if md == nil {
			md = message.Metadata{}
		}
		if _, ok := md[broker.AttemptKey]; ok {
			md = withoutKey(md, broker.AttemptKey)
		}
		b, err := json.Marshal(md)
		if err != nil {
			return wsql.Query{}, fmt.Errorf("marshal metadata of message %s: %w", m.UUID, err)
		}
		uuids[i] = m.UUID
		payloads[i] = nonNil(m.Payload)
		metadata[i] = string(b)
	}
	return wsql.Query{
		Query: `INSERT INTO ` + s.table(params.Topic) + ` (uuid, payload, metadata)
			SELECT u, p, m::json
			FROM unnest($1::text[], $2::bytea[], $3::text[]) WITH ORDINALITY AS batch(u, p, m, n)
			ORDER BY n`,
		Args: []any{uuids, payloads, metadata},
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
	return wsql.Query{Query: fmt.Sprintf(`SELECT "offset", uuid, payload, metadata, attempts
		FROM %s
		WHERE available_at <= clock_timestamp()
		ORDER BY "offset"
		LIMIT %d
		FOR UPDATE SKIP LOCKED`, s.table(params.Topic), s.batchSize)}, nil
}

// UnmarshalMessage turns a claimed row into a message. broker.AttemptKey is
// set from the row's attempts column, over whatever the metadata holds: the
// number of earlier deliveries that ended in a nack. A delivery that ended
// without a settlement (a crash, a lost connection, an expired ack deadline,
// Close) is not counted: its increment would roll back with the claim.
func (s queueSchema) UnmarshalMessage(params wsql.UnmarshalMessageParams) (wsql.Row, error) {
	var (
		r        wsql.Row
		uuid     string
		attempts int64
	)
	if err := params.Row.Scan(&r.Offset, &uuid, &r.Payload, &r.Metadata, &attempts); err != nil {
		return wsql.Row{}, fmt.Errorf("scan message row: %w", err)
	}
	r.UUID = []byte(uuid)
	msg := message.NewMessage(uuid, r.Payload)
	// Decoded into a fresh map: JSON null would otherwise leave Metadata nil
	// and a later Set would panic.
	md := message.Metadata{}
	if err := json.Unmarshal(r.Metadata, &md); err != nil {
		return wsql.Row{}, fmt.Errorf("message %s at offset %d: metadata is not a JSON object: %w", uuid, r.Offset, err)
	}
	if md != nil {
		msg.Metadata = md
	}
	msg.Metadata.Set(broker.AttemptKey, strconv.FormatInt(attempts, 10))
	r.Msg = msg
	return r, nil
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
	var acked, nacked []int64
	settled := true
	for _, row := range params.Rows {
		// take runs for every row so that a nack racing the end of the batch
		// leaves nothing behind in the set.
		wasNacked := a.nacked.take(row.Msg)
		if !settled {
			continue
		}
		if wasNacked {
			nacked = append(nacked, row.Offset)
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
	// A nack counts one attempt and stamps the failure times. The seam for max
	// attempts: moving the row to a dead-letter table belongs in this UPDATE.
	return wsql.Query{
		Query: `WITH redeliver AS (
				UPDATE ` + table + `
				SET available_at = clock_timestamp() + $3::bigint * interval '1 microsecond',
					attempts = attempts + 1,
					first_failed_at = coalesce(first_failed_at, clock_timestamp()),
					last_failed_at = clock_timestamp()
				WHERE "offset" = ANY($2)
			)
			DELETE FROM ` + table + ` WHERE "offset" = ANY($1)`,
		Args: []any{acked, nacked, a.redeliveryDelay.Microseconds()},
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
	m  map[*message.Message]struct{}
}

func newNackSet() *nackSet { return &nackSet{m: map[*message.Message]struct{}{}} }

func (s *nackSet) add(m *message.Message) {
	s.mu.Lock()
	s.m[m] = struct{}{}
	s.mu.Unlock()
}

func (s *nackSet) take(m *message.Message) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[m]
	delete(s.m, m)
	return ok
}
