// Package postgres is the PostgreSQL broker: one table per topic, used as a
// work queue, on watermill-sql's Publisher and Subscriber over pgx pools.
//
// # Queue semantics
//
// A topic is a queue. Subscribers of one topic, in this process or any other,
// compete for its rows: each claims the oldest batch that nobody else holds
// (SELECT … FOR UPDATE SKIP LOCKED) and keeps it locked in an open transaction
// while the messages are handled one by one. An ack deletes the row when the
// batch commits; a nack makes it available again, to any subscriber, after
// the delay in the message's metadata.NackDelayKey when it has a valid
// one (the retry middleware's back-off), else after RedeliveryDelay; a crash,
// a lost connection, an expired AckDeadline or Close rolls the transaction
// back, so the row comes back at once (its available_at was never moved: a
// claim is only a row lock). Delivery is at least once.
// Order is publish order for a single subscriber that never nacks; competing
// subscribers interleave.
//
// Every delivered message carries metadata.AttemptKey, the number of its
// earlier deliveries that ended in a nack, from the row's attempts column; a
// publisher's value is dropped on publish and never delivered. A delivery
// rolled back instead (crash, lost connection, ack deadline, Close) is not
// counted, since the count is kept in the claim's transaction. A message
// that was nacked before also carries metadata.FirstFailureKey, the time of its
// first nack (the first_failed_at column, RFC 3339 with nanoseconds, UTC —
// PostgreSQL keeps microseconds); it is absent until the first nack, and a
// publisher's value is never delivered (nor a stored metadata.NackDelayKey). A row's metadata that is not a JSON
// object of strings (written by something else) is delivered as well as it
// can be read and logged, never left to block the queue.
//
// watermill-sql's own adapters were measured and not used as they are.
// BenchmarkConsume: 1,000 queued messages, subscribers in separate pools (as
// separate processes would be), batch 10, 100 ms polls, 2 cores shared with
// other work (load 1.5-2.5), fsync on; msg/s and how many subscribers got any
// work:
//
//	                                  handler 0 ms                handler 2 ms
//	                                  1 sub        4 subs         1 sub    4 subs
//	DefaultPostgreSQLSchema (group)   10,300        7,300 (1)     390        380 (1-2)
//	PostgreSQLQueueSchema              9,800        9,300 (1)     390        390 (1)
//	this adapter, SKIP LOCKED    5,700-9,000 8,300-11,700 (4)  370-395 1,400-1,490 (4)
//
// The default schema locks the consumer group's offset row for the whole
// batch; the stock queue schema selects FOR UPDATE without SKIP LOCKED under
// REPEATABLE READ, so a second subscriber waits for the first one's batch and
// then fails with a serialization error (which watermill-sql, not checking
// pgx's Rows.Err, takes for an empty queue: it sleeps a poll interval). Either
// way one subscriber works at a time and extra subscribers add nothing. With
// a no-op handler a single subscriber here can be slower than the stock queue
// (the SQL per batch is the same, ~0.7 ms; the relay adds two goroutine
// hand-offs per message); any real handler hides that.
//
// The stock queue adapter also re-sends a nacked message in-process, holding
// its lock, until the ack deadline and then claims it again, so the message
// never leaves that subscriber; and on Close or an expired ack deadline it
// deletes the rows of its batch that it never delivered. With watermill-sql's
// pgx adapter a cancelled subscription rolls back the acks of its current
// batch. This package keeps watermill-sql's Publisher and subscriber loop and
// replaces what is around them: the schema and offsets adapters (schema.go),
// the transaction adapter (settle.go) and a relay that turns a nack into a
// release of the row.
//
// Batch size trades throughput for spread. With a no-op handler one
// subscriber does ~770 msg/s at batch 1 (a commit per message), 5,700-9,000 at
// 10 and ~30,000 at 100; with the 2 ms handler and 4 subscribers, 950, 1,450
// and 1,300. A claimed batch waits for its subscriber even when others are
// idle, and a crash redelivers the messages of the batch already acked. The
// default is 10, SQS's largest batch.
//
// Polling costs one short transaction per idle subscription per
// PollInterval: 20 idle subscriptions took about 17% of one core (PostgreSQL
// and this process together) at 100 ms, 10% at 250 ms and 3% at 1 s. The
// default, 250 ms, adds 125 ms of latency on average to a message published to
// an idle queue.
//
// # Startup
//
// New waits for the database: while PostgreSQL is unreachable it logs every
// attempt and retries with backoff (up to 5 s apart) until it answers or ctx
// ends, so a service started a few seconds before its database comes up
// cleanly. Errors that waiting cannot fix (wrong password, missing database)
// are returned at once. Callers that must fail fast bound ctx.
//
// # Tables
//
// Each topic's table is Schema.TablePrefix+topic. Its attempts,
// first_failed_at and last_failed_at columns are updated on every nack; a
// table created before they existed is not altered and must be recreated. With AutoInitializeSchema
// the schema and table are created on first use (this needs CREATE rights);
// without it they must exist already, created by SubscribeInitialize (which
// provisioning and migrations call), and a missing table is reported as such.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventpipe/eventpipe/app/broker"
)

// Config configures the PostgreSQL broker. The zero value of every field but
// DSN means its default.
type Config struct {
	// DSN is a PostgreSQL URL or key=value string, e.g.
	// postgres://user:pass@host:5432/db?sslmode=disable. Required.
	DSN string

	// ApplicationName is reported to PostgreSQL (pg_stat_activity) for every
	// connection, so that an operator can tell this broker's connections apart
	// and terminate them. Default: the DSN's application_name, else "eventpipe".
	ApplicationName string

	// MaxConns bounds the consuming pool (it overrides the DSN's
	// pool_max_conns). A subscription holds one connection for as long as it
	// works through a batch, so subscriptions beyond MaxConns wait for one
	// another. Default 16.
	MaxConns int

	// MaxPublishConns bounds the publishing pool. It is separate from the
	// consuming pool because a handler that publishes while every consuming
	// connection is held by a batch in progress (its own included) would wait
	// for a connection that only its own ack can free. Default 4.
	MaxPublishConns int

	// ConnectTimeout bounds one connection attempt when the DSN sets no
	// connect_timeout. Default 5 s.
	ConnectTimeout time.Duration

	// PollInterval is how long an idle subscription waits before looking for
	// new rows again: the delivery latency of a message published to an idle
	// queue, and one short transaction per idle subscription per interval.
	// Default 250 ms.
	PollInterval time.Duration

	// RetryInterval is how long a subscription waits after a database error
	// before it queries again. Default 1 s.
	RetryInterval time.Duration

	// BatchSize is how many rows a subscription claims at once. Larger batches
	// cost fewer transactions, but the rows of a claimed batch wait for this
	// subscriber even when others are idle. Default 10, at most 1000.
	BatchSize int

	// AckDeadline is how long a delivered message may stay unacknowledged.
	// After that the subscription gives the rest of its batch back (the
	// message is delivered again) and moves on. Set it above the slowest
	// handler, as a visibility timeout. Default 30 s.
	AckDeadline time.Duration

	// RedeliveryDelay is how long a nacked message stays invisible before any
	// subscriber may claim it again, unless the message asks for its own delay
	// with metadata.NackDelayKey (the retry middleware's back-off does; its
	// delay then replaces this one, even when shorter). Default 1 s.
	RedeliveryDelay time.Duration

	// Schema is the PostgreSQL schema holding the queue tables. Default
	// "eventpipe".
	Schema string

	// TablePrefix is prepended to a topic to name its table. Prefix and topic
	// together must fit PostgreSQL's 63-byte identifiers. Default "queue_".
	TablePrefix string

	// AutoInitializeSchema creates the schema and a topic's table on first
	// publish or subscribe. Off, the tables must have been created (by
	// SubscribeInitialize, as provisioning and migrations do).
	AutoInitializeSchema bool
}

// Defaults, in one place.
const (
	DefaultApplicationName = "eventpipe"
	DefaultMaxConns        = 16
	DefaultMaxPublishConns = 4
	DefaultConnectTimeout  = 5 * time.Second
	DefaultPollInterval    = 250 * time.Millisecond
	DefaultRetryInterval   = time.Second
	DefaultBatchSize       = 10
	DefaultAckDeadline     = 30 * time.Second
	DefaultRedeliveryDelay = time.Second
	DefaultSchema          = "eventpipe"
	DefaultTablePrefix     = "queue_"

	// MaxBatchSize caps BatchSize: every claimed row stays locked until the
	// whole batch is handled.
	MaxBatchSize = 1000
)

func (c *Config) setDefaults() {
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxPublishConns == 0 {
		c.MaxPublishConns = DefaultMaxPublishConns
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = DefaultRetryInterval
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.AckDeadline == 0 {
		c.AckDeadline = DefaultAckDeadline
	}
	if c.RedeliveryDelay == 0 {
		c.RedeliveryDelay = DefaultRedeliveryDelay
	}
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if c.TablePrefix == "" {
		c.TablePrefix = DefaultTablePrefix
	}
}

// Validate reports every problem with the configuration, joined. New calls it
// after filling in defaults, so zero values pass.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("postgres: "+format, args...))
	}
	if strings.TrimSpace(c.DSN) == "" {
		add("DSN is required")
	} else if _, err := pgxpool.ParseConfig(c.DSN); err != nil {
		add("DSN: %w", err)
	}
	if len(c.ApplicationName) > maxIdentifierBytes {
		add("application name %q is longer than %d bytes (PostgreSQL would truncate it)", c.ApplicationName, maxIdentifierBytes)
	}
	if c.MaxConns < 0 {
		add("max conns must not be negative, got %d", c.MaxConns)
	}
	if c.MaxPublishConns < 0 {
		add("max publish conns must not be negative, got %d", c.MaxPublishConns)
	}
	if c.ConnectTimeout < 0 {
		add("connect timeout must not be negative, got %s", c.ConnectTimeout)
	}
	if c.PollInterval < 0 {
		add("poll interval must not be negative, got %s", c.PollInterval)
	}
	if c.RetryInterval < 0 {
		add("retry interval must not be negative, got %s", c.RetryInterval)
	}
	if c.BatchSize < 0 || c.BatchSize > MaxBatchSize {
		add("batch size must be between 0 (default) and %d, got %d", MaxBatchSize, c.BatchSize)
	}
	if c.AckDeadline < 0 {
		add("ack deadline must not be negative, got %s", c.AckDeadline)
	}
	if c.RedeliveryDelay < 0 {
		add("redelivery delay must not be negative, got %s", c.RedeliveryDelay)
	}
	if len(c.Schema) > maxIdentifierBytes {
		add("schema %q is longer than %d bytes", c.Schema, maxIdentifierBytes)
	}
	if len(c.TablePrefix) >= maxIdentifierBytes {
		add("table prefix %q leaves no room for a topic in %d bytes", c.TablePrefix, maxIdentifierBytes)
	}
	return errors.Join(errs...)
}

// PubSub is the PostgreSQL broker. It implements broker.PubSub, broker.Pinger,
// broker.NackDelayer and message.SubscribeInitializer.
type PubSub struct {
	cfg    Config
	logger watermill.LoggerAdapter
	schema queueSchema

	publishPool *pgxpool.Pool
	consumePool *pgxpool.Pool
	publisher   *wsql.Publisher

	// initialized holds the topics whose table this PubSub has created or
	// found, so that AutoInitializeSchema costs one round trip per topic.
	initialized sync.Map

	// mu guards closed and subs; Publish holds it shared so that Close waits
	// for publishes in flight before closing the pool under them.
	mu     sync.RWMutex
	closed bool
	subs   map[*wsql.Subscriber]struct{}
	relays sync.WaitGroup
}

var (
	_ broker.PubSub                = (*PubSub)(nil)
	_ broker.Pinger                = (*PubSub)(nil)
	_ broker.NackDelayer           = (*PubSub)(nil)
	_ message.SubscribeInitializer = (*PubSub)(nil)
)

// NacksWithDelay reports that a nack honours metadata.NackDelayKey: the row
// becomes available again after the requested delay instead of
// Config.RedeliveryDelay.
func (p *PubSub) NacksWithDelay() bool { return true }

// ErrClosed is returned by Publish and Subscribe after Close.
var ErrClosed = errors.New("postgres: pubsub is closed")

// New connects to PostgreSQL and returns a ready broker. While the database
// is unreachable it retries with backoff, logging each attempt, until it
// answers or ctx ends (see the package documentation).
func New(ctx context.Context, cfg Config, logger watermill.LoggerAdapter) (*PubSub, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	logger = logger.With(watermill.LogFields{"broker": "postgres"})

	poolCfg, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("postgres: DSN: %w", err)
	}
	if cfg.ApplicationName != "" {
		poolCfg.ConnConfig.RuntimeParams["application_name"] = cfg.ApplicationName
	} else if poolCfg.ConnConfig.RuntimeParams["application_name"] == "" {
		poolCfg.ConnConfig.RuntimeParams["application_name"] = DefaultApplicationName
	}
	if poolCfg.ConnConfig.ConnectTimeout == 0 {
		poolCfg.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	}

	publishCfg := poolCfg.Copy()
	publishCfg.MaxConns = int32(cfg.MaxPublishConns)
	consumeCfg := poolCfg.Copy()
	consumeCfg.MaxConns = int32(cfg.MaxConns)

	publishPool, err := pgxpool.NewWithConfig(ctx, publishCfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: publish pool: %w", err)
	}
	consumePool, err := pgxpool.NewWithConfig(ctx, consumeCfg)
	if err != nil {
		publishPool.Close()
		return nil, fmt.Errorf("postgres: consume pool: %w", err)
	}
	// Waiting on the consume pool leaves its connection to the first
	// subscription; a subscriber-only process then holds no idle publish one.
	if err := waitForDatabase(ctx, consumePool, describe(poolCfg), logger); err != nil {
		publishPool.Close()
		consumePool.Close()
		return nil, err
	}

	schema := queueSchema{schema: cfg.Schema, prefix: cfg.TablePrefix, batchSize: cfg.BatchSize, logger: logger}
	publisher, err := wsql.NewPublisher(wsql.BeginnerFromPgx(publishPool), wsql.PublisherConfig{
		SchemaAdapter: schema,
		// Table creation is ours (ensureTable), so that a missing table gets a
		// clear error and provisioning shares the code path.
		AutoInitializeSchema: false,
	}, logger)
	if err != nil {
		publishPool.Close()
		consumePool.Close()
		return nil, fmt.Errorf("postgres: publisher: %w", err)
	}
	return &PubSub{
		cfg:         cfg,
		logger:      logger,
		schema:      schema,
		publishPool: publishPool,
		consumePool: consumePool,
		publisher:   publisher,
		subs:        map[*wsql.Subscriber]struct{}{},
	}, nil
}

// describe names the server for log lines and errors without the password.
func describe(cfg *pgxpool.Config) string {
	c := cfg.ConnConfig
	return net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port))) + "/" + c.Database
}

// waitForDatabase pings until the database answers, ctx ends, or the error is
// one that waiting cannot fix.
func waitForDatabase(ctx context.Context, pool *pgxpool.Pool, addr string, logger watermill.LoggerAdapter) error {
	const firstDelay, maxDelay = 200 * time.Millisecond, 5 * time.Second
	delay := firstDelay
	for attempt := 1; ; attempt++ {
		err := pool.Ping(ctx)
		if err == nil {
			if attempt > 1 {
				logger.Info("PostgreSQL is reachable", watermill.LogFields{"addr": addr, "attempts": attempt})
			}
			return nil
		}
		if permanentConnectError(err) {
			return fmt.Errorf("postgres: connect to %s: %w", addr, err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("postgres: %s not reachable after %d attempts: %w", addr, attempt, errors.Join(ctx.Err(), err))
		}
		logger.Error("PostgreSQL not reachable, retrying", err, watermill.LogFields{
			"addr": addr, "attempt": attempt, "retry_in": delay,
		})
		select {
		case <-ctx.Done():
			return fmt.Errorf("postgres: %s not reachable after %d attempts: %w", addr, attempt, errors.Join(ctx.Err(), err))
		case <-time.After(delay):
		}
		delay = min(2*delay, maxDelay)
	}
}

// permanentConnectError is true for errors that the server will repeat no
// matter how long we wait: authentication (class 28) and a database that does
// not exist (3D000).
func permanentConnectError(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	return strings.HasPrefix(pgErr.Code, "28") || pgErr.Code == "3D000"
}

// Publish checks the payload limit, then inserts all messages in one
// statement: they commit together, in order. The first message's context
// bounds the call.
func (p *PubSub) Publish(topic string, msgs ...*message.Message) error {
	if err := broker.CheckPayloads(msgs); err != nil {
		return err
	}
	if len(msgs) == 0 {
		return nil
	}
	if err := p.schema.checkTopic(topic); err != nil {
		return err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrClosed
	}
	ctx := msgs[0].Context()
	if p.cfg.AutoInitializeSchema {
		if err := p.ensureTable(ctx, topic); err != nil {
			return err
		}
	}
	if err := p.publisher.Publish(topic, msgs...); err != nil {
		return p.explain(topic, fmt.Errorf("postgres: publish %s: %w", topic, err))
	}
	return nil
}

// explain adds what to do to an undefined_table error.
func (p *PubSub) explain(topic string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return fmt.Errorf("%w (queue table %s does not exist: create it with SubscribeInitialize or enable AutoInitializeSchema)",
			err, p.schema.table(topic))
	}
	return err
}

// Subscribe starts a subscription that competes with every other subscriber
// of topic. The channel closes when ctx ends or the PubSub closes. Each
// message must be acked or nacked before the next one arrives.
func (p *PubSub) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if err := p.schema.checkTopic(topic); err != nil {
		return nil, err
	}
	if p.isClosed() {
		return nil, ErrClosed
	}
	if p.cfg.AutoInitializeSchema {
		if err := p.ensureTable(ctx, topic); err != nil {
			return nil, err
		}
	} else if err := p.checkTable(ctx, topic); err != nil {
		return nil, err
	}

	nacked := newNackSet()
	// One watermill-sql Subscriber per subscription: it is cheap (no
	// connection of its own) and gives each subscription its own nack set.
	logger := p.logger.With(watermill.LogFields{"topic": topic})
	sub, err := wsql.NewSubscriber(settlingBeginner{pool: p.consumePool, logger: logger}, wsql.SubscriberConfig{
		AckDeadline:    &p.cfg.AckDeadline,
		PollInterval:   p.cfg.PollInterval,
		RetryInterval:  p.cfg.RetryInterval,
		ResendInterval: p.cfg.RetryInterval, // unused: nacks never reach watermill-sql
		SchemaAdapter:  p.schema,
		OffsetsAdapter: queueOffsets{schema: p.schema, nacked: nacked, redeliveryDelay: p.cfg.RedeliveryDelay},
	}, logger)
	if err != nil {
		return nil, fmt.Errorf("postgres: subscribe %s: %w", topic, err)
	}

	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	p.subs[sub] = struct{}{}
	p.relays.Add(1)
	p.mu.Unlock()

	upstream, err := sub.Subscribe(ctx, topic)
	if err != nil {
		p.forget(sub)
		p.relays.Done()
		return nil, fmt.Errorf("postgres: subscribe %s: %w", topic, err)
	}
	out := make(chan *message.Message)
	go func() {
		defer p.relays.Done()
		defer p.forget(sub)
		defer close(out)
		relay(upstream, out, nacked)
	}()
	return out, nil
}

// relay hands each upstream message to the consumer as a copy, so that it can
// turn the consumer's nack into a release of the row (see queueOffsets). The
// copy shares the upstream context: it carries watermill-sql's transaction and
// is cancelled when the message is settled, the ack deadline passes, or the
// subscription ends.
func relay(upstream <-chan *message.Message, out chan<- *message.Message, nacked *nackSet) {
	for m := range upstream {
		delivered := m.Copy()
		delivered.SetContext(m.Context())
		select {
		case out <- delivered:
		case <-m.Context().Done():
			// Nobody took it before watermill-sql gave up on it; the row
			// goes back to the queue with the rollback.
			continue
		}
		select {
		case <-delivered.Acked():
			m.Ack()
		case <-delivered.Nacked():
			// The delay is read from the consumer's copy, where the retry
			// middleware set it.
			nacked.add(m, nackOf(delivered))
			m.Ack()
		case <-m.Context().Done():
			// Ack deadline, Close or ctx: the row is released; a late
			// ack or nack from the consumer changes nothing.
		}
	}
}

func (p *PubSub) forget(sub *wsql.Subscriber) {
	p.mu.Lock()
	delete(p.subs, sub)
	p.mu.Unlock()
	_ = sub.Close()
}

func (p *PubSub) isClosed() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.closed
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

// Ping tells whether PostgreSQL answers now.
func (p *PubSub) Ping(ctx context.Context) error {
	if p.isClosed() {
		return ErrClosed
	}
	if err := p.publishPool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: ping: %w", err)
	}
	return nil
}

// Close stops every subscription (their unsettled rows go back to the queue),
// waits for publishes in flight, and closes the pools. It is safe to call more
// than once.
func (p *PubSub) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	subs := make([]*wsql.Subscriber, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.mu.Unlock()

	var errs []error
	for _, s := range subs {
		if err := s.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	p.relays.Wait()
	if err := p.publisher.Close(); err != nil {
		errs = append(errs, err)
	}
	p.consumePool.Close()
	p.publishPool.Close()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("postgres: close: %w", err)
	}
	return nil
}
