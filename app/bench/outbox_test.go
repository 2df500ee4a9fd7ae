package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventpipe/eventpipe/app/dbtx"
	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/outbox"
)

// outboxDB is one migrated schema shared by the outbox and inbox pairs.
type outboxDB struct {
	pool   *pgxpool.Pool
	schema string
}

func newOutboxDB(tb testing.TB) outboxDB {
	pool, schema := dbtest.Schema(tb)
	return outboxDB{pool: pool, schema: schema}
}

func (d outboxDB) table(name string) string { return pgx.Identifier{d.schema, name}.Sanitize() }

func (d outboxDB) exec(tb testing.TB, sql string, args ...any) {
	tb.Helper()
	if _, err := d.pool.Exec(context.Background(), sql, args...); err != nil {
		tb.Fatalf("%s: %v", sql, err)
	}
}

// prefill writes n messages for topic to an emptied outbox, 500 per
// transaction, untimed.
func (d outboxDB) prefill(tb testing.TB, topic string, n, size int) {
	tb.Helper()
	d.exec(tb, `TRUNCATE `+d.table("outbox")+` RESTART IDENTITY`)
	ctx := context.Background()
	for i := 0; i < n; i += 500 {
		msgs := make([]*message.Message, min(500, n-i))
		for j := range msgs {
			msgs[j] = message.NewMessage(watermill.NewUUID(), stampedBody(size))
		}
		err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
			return outbox.Table{Schema: d.schema}.Write(ctx, tx, topic, msgs...)
		})
		if err != nil {
			tb.Fatalf("outbox prefill: %v", err)
		}
	}
}

// rawRelayOnce is the relay written by hand: claim batch rows FOR UPDATE
// SKIP LOCKED, publish them in one call, mark them published, commit.
func (d outboxDB) rawRelayOnce(ctx context.Context, batch int, publish func(ctx context.Context, topic string, bodies [][]byte) error) (int, error) {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rows, err := tx.Query(ctx, `SELECT id, topic, payload FROM `+d.table("outbox")+`
		WHERE published_at IS NULL AND parked_at IS NULL AND next_attempt_at <= now()
		ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`, batch)
	if err != nil {
		return 0, err
	}
	var (
		ids    []int64
		topic  string
		bodies [][]byte
	)
	for rows.Next() {
		var id int64
		var body []byte
		if err := rows.Scan(&id, &topic, &body); err != nil {
			rows.Close()
			return 0, err
		}
		ids = append(ids, id)
		bodies = append(bodies, body)
	}
	if err := rows.Err(); err != nil || len(ids) == 0 {
		return 0, err
	}
	if err := publish(ctx, topic, bodies); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, `UPDATE `+d.table("outbox")+` SET published_at = now() WHERE id = ANY($1)`, ids); err != nil {
		return 0, err
	}
	return len(ids), tx.Commit(ctx)
}

// sqsBatchPublisher is the raw AWS SDK sending bodies ten per
// SendMessageBatch, the batched baseline for the SQS relay.
type sqsBatchPublisher struct {
	client *awssqs.Client
	mu     sync.Mutex
	urls   map[string]string
}

func (p *sqsBatchPublisher) publish(ctx context.Context, topic string, bodies [][]byte) error {
	p.mu.Lock()
	u, ok := p.urls[topic]
	p.mu.Unlock()
	if !ok {
		out, err := p.client.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(topic)})
		if err != nil {
			return err
		}
		u = aws.ToString(out.QueueUrl)
		p.mu.Lock()
		p.urls[topic] = u
		p.mu.Unlock()
	}
	for i := 0; i < len(bodies); i += 10 {
		part := bodies[i:min(i+10, len(bodies))]
		entries := make([]types.SendMessageBatchRequestEntry, len(part))
		for j, b := range part {
			entries[j] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(j)), MessageBody: aws.String(string(b))}
		}
		out, err := p.client.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(u), Entries: entries})
		if err != nil {
			return err
		}
		if len(out.Failed) > 0 {
			return fmt.Errorf("send message batch: %d failed", len(out.Failed))
		}
	}
	return nil
}

// relayPair: n rows already in the outbox, drained by eventpipe's relay
// (RelayOnce until a claim finds nothing, as Run does) and by the raw relay,
// both with batch 50; and one writer INSERTing n rows, one per statement
// (autocommit), for the rate the relay must beat.
func relayPair(tb testing.TB, db outboxDB, e *env, n, size int, publisher message.Publisher, rawPublish func(context.Context, string, [][]byte) error, rawName string) pair {
	topic := e.topic(tb)
	const batch = outbox.DefaultBatchSize
	relay, err := outbox.NewRelay(db.pool, publisher, outbox.RelayConfig{Schema: db.schema, BatchSize: batch}, slog.New(slog.DiscardHandler))
	if err != nil {
		tb.Fatal(err)
	}
	drain := func(tb testing.TB, once func(context.Context) (int, error)) Sample {
		db.prefill(tb, topic, n, size)
		e.purge(tb, topic)
		ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
		defer cancel()
		start, total := time.Now(), 0
		for {
			k, err := once(ctx)
			if err != nil {
				tb.Fatalf("relay: %v", err)
			}
			if k == 0 {
				break
			}
			total += k
		}
		el := time.Since(start)
		if total != n {
			tb.Fatalf("relay published %d of %d rows", total, n)
		}
		return Sample{Messages: total, Elapsed: el}
	}
	return pair{
		id: "R5", scenario: "outbox relay → " + e.kind, kind: throughput,
		settings: fmt.Sprintf("body=%s backlog=%d claim-batch=%d, one Publish per claim (%s)", sizeName(size), n, batch, rawName),
		sides: []side{
			{name: "eventpipe relay", run: func(tb testing.TB) Sample {
				return drain(tb, func(ctx context.Context) (int, error) {
					res, err := relay.RelayOnce(ctx)
					if err == nil && res.Failed > 0 {
						err = fmt.Errorf("%d rows failed", res.Failed)
					}
					return res.Published, err
				})
			}},
			{name: "raw batched relay", run: func(tb testing.TB) Sample {
				return drain(tb, func(ctx context.Context) (int, error) { return db.rawRelayOnce(ctx, batch, rawPublish) })
			}},
			{name: "one writer, INSERT per row", run: func(tb testing.TB) Sample {
				return db.insertLoop(tb, topic, n, size)
			}},
		},
		checks: []*check{nil, {target: "drains faster than one writer inserts", pass: func(o, b summary) bool { return o.rate > b.rate }}},
	}
}

// insertLoop is one writer inserting n outbox rows, one autocommit INSERT
// each.
func (d outboxDB) insertLoop(tb testing.TB, topic string, n, size int) Sample {
	tb.Helper()
	d.exec(tb, `TRUNCATE `+d.table("outbox")+` RESTART IDENTITY`)
	ctx := context.Background()
	q := `INSERT INTO ` + d.table("outbox") + ` (event_id, topic, payload, metadata) VALUES ($1, $2, $3, '{}')`
	start := time.Now()
	for range n {
		if _, err := d.pool.Exec(ctx, q, watermill.NewUUID(), topic, stampedBody(size)); err != nil {
			tb.Fatalf("insert: %v", err)
		}
	}
	return Sample{Messages: n, Elapsed: time.Since(start)}
}

// writePair: one writer committing business transactions of one effect row
// each, with one outbox row written by outbox.Write in the same transaction
// (through dbtx.InTx, as eventpipe's handlers do: the row goes with COMMIT)
// and without it (the outbox row's cost, NOTIFY included) — without it both
// in pgx's own transaction and through dbtx.InTx, so that the ratio to the
// former is not the helper's lazy BEGIN alone; and the same writer's
// autocommit raw INSERT of outbox rows.
func writePair(tb testing.TB, db outboxDB, n, size int) pair {
	w := newWriteSides(tb, db, size)
	return pair{
		id: "R5", scenario: "outbox write, sides in blocks", kind: throughput,
		settings: fmt.Sprintf("body=%s one writer, one effect row + one event per transaction, n=%d per side and repetition", sizeName(size), n),
		sides: []side{
			{name: w.names[0], run: w.block(0, n)},
			{name: w.names[1], run: w.block(1, n)},
			{name: w.names[2], run: func(tb testing.TB) Sample { return db.insertLoop(tb, "bench_write", n, size) }},
			{name: w.names[3], run: w.block(3, n)},
		},
	}
}

// writeInterleavedPair is writePair's transactions taken in turns, one of
// each side after the other, within every repetition: each side's rate is
// its transactions over the time they took. On this shared machine a side's
// block of n transactions ran up to 30 % faster or slower than the block
// before it, more than the outbox row costs; taken in turns, the sides see
// the same machine. It carries issue 18's target.
func writeInterleavedPair(tb testing.TB, db outboxDB, n, size, reps int) pair {
	w := newWriteSides(tb, db, size)
	sides := []int{0, 1, 3}
	p := pair{
		id: "R5", scenario: "outbox write, sides in turns", kind: throughput,
		settings: fmt.Sprintf("body=%s one writer, one effect row + one event per transaction, n=%d per side and repetition, one transaction of each side in turn", sizeName(size), n),
		checks:   []*check{atLeast(0.85), nil},
	}
	for _, i := range sides {
		p.sides = append(p.sides, side{name: w.names[i]})
	}
	p.measure = func(tb testing.TB) []Row {
		samples := make([][]Sample, len(sides))
		for range reps {
			db.exec(tb, `TRUNCATE `+db.table("outbox")+`, `+db.table("bench_effects")+` RESTART IDENTITY`)
			took := make([]time.Duration, len(sides))
			for range n {
				for k, i := range sides {
					took[k] += w.one(tb, i)
				}
			}
			for k := range sides {
				samples[k] = append(samples[k], Sample{Messages: n, Elapsed: took[k]})
			}
		}
		sums := make([]summary, len(sides))
		for k := range sides {
			sums[k] = summarize(samples[k])
		}
		return p.rows(sums)
	}
	return p
}

// writeSides are the business transactions of the R5 write pairs: one
// effect row and, on the eventpipe side, one outbox row.
type writeSides struct {
	db     outboxDB
	insert string
	body   []byte
	size   int
	names  [4]string
}

func newWriteSides(tb testing.TB, db outboxDB, size int) *writeSides {
	db.exec(tb, `CREATE TABLE IF NOT EXISTS `+db.table("bench_effects")+` (id text PRIMARY KEY, body bytea NOT NULL)`)
	return &writeSides{
		db: db, insert: `INSERT INTO ` + db.table("bench_effects") + ` (id, body) VALUES ($1, $2)`, body: stampedBody(256), size: size,
		names: [4]string{"eventpipe outbox.Write", "same transaction without the outbox row", "raw INSERT",
			"same transaction through dbtx.InTx without the outbox row"},
	}
}

// one runs one transaction of side i (0 eventpipe, 1 pgx without the row, 3
// dbtx.InTx without the row) and returns how long it took.
func (w *writeSides) one(tb testing.TB, i int) time.Duration {
	ctx := context.Background()
	msg := message.NewMessage(watermill.NewUUID(), stampedBody(w.size))
	fn := func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, w.insert, msg.UUID, w.body); err != nil {
			return err
		}
		if i != 0 {
			return nil
		}
		return outbox.Table{Schema: w.db.schema}.Write(ctx, tx, "bench_write", msg)
	}
	start := time.Now()
	var err error
	if i == 1 {
		err = pgx.BeginFunc(ctx, w.db.pool, func(tx pgx.Tx) error { return fn(ctx, tx) })
	} else {
		err = dbtx.InTx(ctx, w.db.pool, fn)
	}
	if err != nil {
		tb.Fatalf("business transaction: %v", err)
	}
	return time.Since(start)
}

// block runs n transactions of side i on emptied tables.
func (w *writeSides) block(i, n int) func(tb testing.TB) Sample {
	return func(tb testing.TB) Sample {
		w.db.exec(tb, `TRUNCATE `+w.db.table("outbox")+`, `+w.db.table("bench_effects")+` RESTART IDENTITY`)
		start := time.Now()
		for range n {
			w.one(tb, i)
		}
		return Sample{Messages: n, Elapsed: time.Since(start)}
	}
}

// inboxPair: a handler whose effect is one INSERT in its own transaction,
// with the inbox marker in that transaction (inbox.Postgres.Process) and
// without, from `workers` goroutines.
func inboxPair(tb testing.TB, db outboxDB, n, workers int) pair {
	db.exec(tb, `CREATE TABLE IF NOT EXISTS `+db.table("bench_effects")+` (id text PRIMARY KEY, body bytea NOT NULL)`)
	store, err := inbox.NewPostgres(db.pool, db.schema)
	if err != nil {
		tb.Fatal(err)
	}
	insert := `INSERT INTO ` + db.table("bench_effects") + ` (id, body) VALUES ($1, $2)`
	run := func(tb testing.TB, handle func(ctx context.Context, id string) error) Sample {
		db.exec(tb, `TRUNCATE `+db.table("bench_effects")+`, `+db.table("processed_messages"))
		ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
		defer cancel()
		ids := make(chan string, n)
		for range n {
			ids <- watermill.NewUUID()
		}
		close(ids)
		errs := make([]error, workers)
		var wg sync.WaitGroup
		start := time.Now()
		for w := range workers {
			wg.Go(func() {
				for id := range ids {
					if err := handle(ctx, id); err != nil {
						errs[w] = err
						return
					}
				}
			})
		}
		wg.Wait()
		el := time.Since(start)
		if err := errors.Join(errs...); err != nil {
			tb.Fatalf("inbox: %v", err)
		}
		return Sample{Messages: n, Elapsed: el}
	}
	body := stampedBody(256)
	return pair{
		id: "R6", scenario: "inbox dedupe in the effect's transaction", kind: throughput,
		settings: fmt.Sprintf("effect=1 INSERT, workers=%d, n=%d", workers, n),
		sides: []side{
			{name: "eventpipe inbox", run: func(tb testing.TB) Sample {
				return run(tb, func(ctx context.Context, id string) error {
					return store.Process(ctx, "bench", id, func(ctx context.Context) error {
						tx, _ := dbtx.From(ctx)
						_, err := tx.Exec(ctx, insert, id, body)
						return err
					})
				})
			}},
			{name: "same handler without dedupe", run: func(tb testing.TB) Sample {
				return run(tb, func(ctx context.Context, id string) error {
					return pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
						_, err := tx.Exec(ctx, insert, id, body)
						return err
					})
				})
			}},
			{name: "dedupe with the marker sent along with BEGIN", run: func(tb testing.TB) Sample {
				// What the inbox could do: the same statements, one round
				// trip fewer (BEGIN and the marker INSERT pipelined).
				return run(tb, func(ctx context.Context, id string) error {
					return pipelinedDedupe(ctx, db, id, func(conn *pgxpool.Conn) error {
						_, err := conn.Exec(ctx, insert, id, body)
						return err
					})
				})
			}},
		},
		checks: []*check{atLeast(0.9), nil},
	}
}

func pipelinedDedupe(ctx context.Context, db outboxDB, id string, effect func(*pgxpool.Conn) error) (err error) {
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	defer func() {
		if err != nil {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	marker := b.Queue(`INSERT INTO `+db.table("processed_messages")+` (consumer, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`, "bench", id)
	var fresh bool
	marker.Exec(func(tag pgconn.CommandTag) error {
		fresh = tag.RowsAffected() == 1
		return nil
	})
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	if !fresh {
		return fmt.Errorf("message %s already processed", id)
	}
	if err := effect(conn); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, "COMMIT")
	return err
}
