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

// queueSchema is the watermill-sql SchemaAdapter of one table per topic, used
// as a work queue. watermill-sql's Publisher uses it to create tables and
// insert rows; the subscriber is this package's own (subscribe.go), which
// claims rows with claimSQL and settles them with settleSQL.
type queueSchema struct {
	schema string
	prefix string
	// logger reports rows whose metadata had to be repaired on delivery; nil
	// logs nothing.
	logger watermill.LoggerAdapter
}

var (
	_ wsql.SchemaAdapter       = queueSchema{}
	_ wsql.RequiresTransaction = queueSchema{}
)

// QueueTable is the quoted, schema-qualified table that holds topic's
// messages in a PubSub with Schema schema and the default TablePrefix
// (what `eventpipe topology list` prints).
func QueueTable(schema, topic string) string {
	return queueSchema{schema: schema, prefix: DefaultTablePrefix}.table(topic)
}

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
// attempts counts the row's claims, i.e. its deliveries: a delivery sees the
// count before its own claim as metadata.AttemptKey. available_at is when
// the row may be claimed next: pushed to the end of the claim's lease by a
// claim, to the end of its delay by a nack. claimed_until is the end of the
// current claim's lease, NULL once the claim is released (QueueStats tells
// in-flight rows from delayed ones with it). first_failed_at and
// last_failed_at are the times of the row's first and latest nack (NULL until
// then), for dead-letter reasons.
//
// A table made by an earlier release gets the columns it lacks added — once:
// the DO block alters the table only when a column is missing, so a running
// system does not take the table lock on every start. claimed_until is the
// newest column: a table that has it has the others.
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
			last_failed_at  TIMESTAMPTZ,
			claimed_until   TIMESTAMPTZ
		) WITH (fillfactor = ` + queueFillFactor + `)`},
		{Query: `DO $$BEGIN
			IF NOT EXISTS (SELECT 1 FROM pg_attribute
				WHERE attrelid = '` + strings.ReplaceAll(s.table(params.Topic), "'", "''") + `'::regclass
				AND attname = 'claimed_until' AND NOT attisdropped) THEN
				ALTER TABLE ` + s.table(params.Topic) + `
					ADD COLUMN IF NOT EXISTS attempts INTEGER NOT NULL DEFAULT 0,
					ADD COLUMN IF NOT EXISTS first_failed_at TIMESTAMPTZ,
					ADD COLUMN IF NOT EXISTS last_failed_at TIMESTAMPTZ,
					ADD COLUMN IF NOT EXISTS claimed_until TIMESTAMPTZ;
			END IF;
			-- A table made before the fill factor was set gets it, unless
			-- someone chose one.
			IF NOT EXISTS (SELECT 1 FROM pg_class
				WHERE oid = '` + strings.ReplaceAll(s.table(params.Topic), "'", "''") + `'::regclass
				AND EXISTS (SELECT 1 FROM unnest(reloptions) AS o WHERE o LIKE 'fillfactor=%')) THEN
				ALTER TABLE ` + s.table(params.Topic) + ` SET (fillfactor = ` + queueFillFactor + `);
			END IF;
		END$$`},
	}, nil
}

// queueFillFactor leaves a queue table's pages 30 % free, so that a claim's
// UPDATE of a row (its attempt count and lease) finds room on the row's own
// page: a heap-only update, with no new primary-key entry and less WAL. A
// message row is updated once per delivery and then deleted; pages filled
// to the brim by its INSERT made every claim a full update (EXPLAIN (ANALYZE,
// WAL) of a claim of 10 rows: 40 WAL records, 6 KB, against 28, 3.3 KB).
const queueFillFactor = "70"

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

// claimSQL claims the oldest available rows of topic, at most limit of
// them, for lease: in one statement, committed before any of them is handed
// out, each row's attempts goes up by one and the row becomes unavailable
// until the lease ends (available_at = claimed_until = the statement's start
// plus lease). A consumer that dies holding the rows has used their attempt;
// the rows come back when the lease ends. FOR UPDATE SKIP LOCKED keeps two
// claims running at once from taking the same row: the second skips what the
// first has locked, and a row committed by the first no longer matches
// available_at (READ COMMITTED rechecks the condition on the newest version).
//
// A claimed row reads as UnmarshalMessage scans it (attempts as the number of
// earlier claims), with the claim's own count last: the claim's identity,
// which settleSQL checks so that a subscriber whose lease ran out cannot
// settle a row that another one has claimed since.
//
// The limit and the lease are literals, not parameters: the statement then
// has one plan whatever it is run with, which PostgreSQL makes once per
// connection (pgx prepares the text once per connection). With LIMIT $1 it
// planned the statement anew at every claim, since a generic plan with an
// unknown limit is a sequential scan and a sort; that planning was about
// 0.2 ms of a claim's 0.5 ms. A subscription builds each limit's text once
// (claimTexts).
//
// On an ordered (FIFO) queue a row is claimable only while no earlier row of
// its group is in the table: acked rows are deleted, so an earlier row of
// the group that is still there is leased, delayed or about to be claimed,
// and the later one must wait for it.
func (s queueSchema) claimSQL(topic string, ordered bool, limit int, lease time.Duration) string {
	table := s.table(topic)
	groupHead := ""
	if ordered {
		groupHead = `
				AND NOT EXISTS (SELECT 1 FROM ` + table + ` AS earlier
					WHERE earlier."offset" < c."offset"
					  AND (earlier.metadata->>'` + metadata.GroupIDKey + `') IS NOT DISTINCT FROM (c.metadata->>'` + metadata.GroupIDKey + `'))`
	}
	// The lease runs from the statement's start, so that the subscriber's
	// estimate of its end (its own clock, read before sending, plus lease)
	// is never later than the database's.
	until := `statement_timestamp() + interval '` + strconv.FormatInt(lease.Microseconds(), 10) + ` microseconds'`
	return `WITH claimable AS (
				SELECT "offset" FROM ` + table + ` AS c
				WHERE available_at <= clock_timestamp()` + groupHead + `
				ORDER BY "offset"
				LIMIT ` + strconv.Itoa(limit) + `
				FOR UPDATE SKIP LOCKED
			)
			UPDATE ` + table + ` AS q
			SET attempts = q.attempts + 1,
				available_at = ` + until + `,
				claimed_until = ` + until + `
			FROM claimable
			WHERE q."offset" = claimable."offset"
			RETURNING q."offset", q.uuid, q.payload, q.metadata, q.attempts - 1, q.first_failed_at, q.attempts`
}

// claimTexts are one subscription's claim statements (claimSQL), each built
// on first use: a subscription claims a few limits (its batch, the room left
// beside the messages it has out).
type claimTexts struct {
	build func(limit int) string
	texts map[int]string
}

func newClaimTexts(s queueSchema, topic string, ordered bool, lease time.Duration) *claimTexts {
	return &claimTexts{
		build: func(limit int) string { return s.claimSQL(topic, ordered, limit, lease) },
		texts: map[int]string{},
	}
}

// text is the statement claiming at most limit rows.
func (c *claimTexts) text(limit int) string {
	t, ok := c.texts[limit]
	if !ok {
		t = c.build(limit)
		c.texts[limit] = t
	}
	return t
}

// SelectQuery is part of watermill-sql's SchemaAdapter, which only its
// Subscriber calls; this package's subscriber claims with claimSQL.
func (s queueSchema) SelectQuery(wsql.SelectQueryParams) (wsql.Query, error) {
	return wsql.Query{}, fmt.Errorf("postgres: rows are claimed with a lease, not selected in a transaction")
}

// UnmarshalMessage turns a claimed row into a message: see deliveredMessage.
// Its scanner yields offset, uuid, payload, metadata, attempts (the number of
// earlier claims) and first_failed_at.
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
	r.Msg = s.deliveredMessage(r.Offset, uuid, r.Payload, r.Metadata, attempts, firstFailed)
	return r, nil
}

// deliveredMessage is the message a claimed row is delivered as.
// metadata.AttemptKey is set from earlier, the row's claims before this one,
// over whatever the metadata holds: every earlier delivery counts, whatever
// ended it (ack deadline, nack, crash, lost connection, Close).
// metadata.FirstFailureKey is set from first_failed_at, the time of the row's
// first nack, when there was one, and is otherwise absent: a publisher's value
// is never delivered.
//
// It never fails on the metadata: a row that cannot be delivered would be
// claimed again and again, its attempts climbing, blocking the queue.
// Metadata that is not a JSON object of strings (written by something other
// than this broker) is repaired as decodeMetadata says, and logged.
func (s queueSchema) deliveredMessage(offset int64, uuid string, payload, rawMetadata []byte, earlier int64, firstFailed *time.Time) *message.Message {
	msg := message.NewMessage(uuid, payload)
	md, err := decodeMetadata(rawMetadata)
	if err != nil && s.logger != nil {
		s.logger.Error("Queue row has malformed metadata; delivering what could be read", err,
			watermill.LogFields{"message_uuid": uuid, "offset": offset})
	}
	setDeliveryMetadata(md, earlier, firstFailed)
	msg.Metadata = md
	return msg
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
	// What this broker writes decodes in one pass; only anything else takes
	// the field-by-field repair below.
	md := message.Metadata{}
	if json.Unmarshal(raw, &md) == nil && md != nil { // null leaves it nil
		return md, nil
	}
	md = message.Metadata{}
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

// SubscribeIsolationLevel is part of watermill-sql's SchemaAdapter, for its
// Subscriber, which this package does not use. The claim is one statement in
// READ COMMITTED, PostgreSQL's default.
func (s queueSchema) SubscribeIsolationLevel() stdsql.IsolationLevel {
	return stdsql.LevelReadCommitted
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
