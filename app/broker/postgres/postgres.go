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
// the delay in the message's metadata.NackDelayKey metadata when it has a valid
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
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventpipe/eventpipe/app/broker"
)

// PubSub is the PostgreSQL broker. It implements broker.PubSub, broker.Pinger,
// broker.NackDelayer, broker.QueueStatter and message.SubscribeInitializer.
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

func (p *PubSub) isClosed() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.closed
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
