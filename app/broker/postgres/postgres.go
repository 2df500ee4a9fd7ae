// Package postgres is the PostgreSQL broker: one table per topic, used as a
// work queue, with watermill-sql's Publisher and a subscriber of its own, over
// pgx pools.
//
// # Queue semantics
//
// A topic is a queue. Subscribers of one topic, in this process or any other,
// compete for its rows. A subscription claims the oldest available rows, at
// most the queue's batch size (Config.QueueBatchSizes, else BatchSize), in
// one short statement that commits before any of them is handed out: it adds
// one to each row's attempts and leases the row for the queue's ack deadline
// (Config.QueueAckDeadlines, else AckDeadline; the topology's visibility
// timeout), moving available_at and claimed_until to the end of the lease,
// so that no other subscriber can claim it until then (FOR UPDATE SKIP
// LOCKED keeps two claims running at once apart). It then hands the
// messages out one at a time, or up to the number the subscription's context
// asks for at once (broker.WithConcurrency; at most the batch, which 0 asks
// for): the Watermill router then runs that many handlers at once, and
// while some are out the subscription claims more for the free room (once
// half of it is free behind a handler running longer than the slack while
// the queue is busy, a poll interval after a claim that drained it), the
// settlements so far riding with that claim. A subscription allowed more
// than one message at once runs Config.Workers such claim loops (at most as
// many as messages it may have out), which share its concurrency: while one
// loop's messages are handled, another's claim is on its way or its rows
// wait for a free slot, so a handler that finishes gets its next message
// without a round trip, and the database works on several claims at once.
// An idle queue is polled by one loop only (broker.IdleLoops). On an
// ordered queue a claim holds at most one row of each group (see
// Config.OrderedQueues), so its messages handed out at once are of different
// groups and each group is still handled one message at a time. An ack
// deletes the row; a nack ends the claim and makes the row available again,
// to any subscriber, after the delay in the message's metadata.NackDelayKey
// metadata when it has a valid one (the retry middleware's back-off), else
// after RedeliveryDelay. A batch's acks and nacks are applied together in one
// statement when the batch is done, sent with the next claim in one round
// trip that commits both (or earlier, see Leases): a batch costs one commit,
// however many of its messages were handled at once. Claims, settlements
// and renewals commit without waiting for the disk (the consuming pool runs
// with synchronous_commit off; decision 0039): a database crash can take one
// back, which only brings a message back, never loses one. Delivery is at least
// once. Order is publish order for a single subscriber that never nacks and
// handles one message at a time; competing subscribers interleave.
//
// A delivery that ends in neither an ack nor a nack still counts:
//
//   - The subscriber dies (kill -9, a crash, a lost host or network): its
//     claim stays, and its rows come back when the lease ends, one ack
//     deadline after the claim or its latest renewal. That is the trade-off
//     of counting at the claim: a claim that is only a row lock in an open
//     transaction (as in watermill-sql, and in this package before) is
//     released the moment PostgreSQL sees the connection die, but its count
//     is rolled back with it, so a message that kills its consumer every time
//     never reaches its attempt limit. The rows of the batch that were not
//     delivered yet wait for the lease too, and each has used an attempt, as
//     SQS counts every message of a received batch: with a batch of 10, a
//     crash costs up to 10 rows an attempt.
//   - The handler passes its deadline (the route's timeout, which the Timeout
//     middleware reports with broker.StartAttempt) and goes on, ignoring its
//     context: its lease is no longer renewed, and when it runs out, at most
//     an ack deadline later, the message's context is cancelled and the row
//     can be claimed again; the subscription goes on with its batch. A late
//     ack or nack then changes nothing.
//   - The end of the subscription's context (shutdown stops intake first):
//     no more messages are handed out, the message being handled keeps its
//     lease, renewed, until it is acked or nacked, its handler passes its
//     deadline, or Close (its context is not cancelled with the
//     subscription's: a graceful drain lets it finish), and the rows of the
//     batch not yet delivered go back at once with their attempt taken back,
//     since nobody tried them.
//   - Close: as above, but the message being handled goes back at once with
//     its attempt counted.
//   - A lost database connection ends no delivery: no connection is held
//     while a handler runs. A settlement that fails is retried for up to 15 s;
//     after that its rows are left to their lease (acked ones then come back).
//
// # Attempts
//
// Every delivered message carries metadata.AttemptKey, the number of its
// earlier deliveries, from 0: the row's attempts before its claim. It is one
// number, whatever ended each earlier delivery (a nack, the ack deadline, a
// crash, Close), so the max-attempts rule holds for messages that kill their
// consumer. A publisher's value is dropped on publish and never delivered. A
// message that was nacked before also carries metadata.FirstFailureKey, the
// time of its first nack (the first_failed_at column, RFC 3339 with
// nanoseconds, UTC — PostgreSQL keeps microseconds); it is absent until the
// first nack — a crash or an expired deadline stamps no failure time — and a
// publisher's value is never delivered (nor a stored metadata.NackDelayKey). A
// row's metadata that is not a JSON object of strings (written by something
// else) is delivered as well as it can be read and logged, never left to
// block the queue.
//
// # Leases
//
// A message is handed out only while its lease is younger than a third of
// the ack deadline, or fresh from the database (the claim's or a renewal's,
// however slow its round trip was: a database slower than the slack must
// not keep the subscription renewing instead of delivering); otherwise the
// subscription first renews the lease of the rows it still holds, applying
// the settlements so far in the same statement. A consumer that does not
// take a message within a slack of a tenth of the ack deadline, at most 1 s,
// (it stopped reading without cancelling) gets nothing renewed: the rest of
// the batch is given back, uncounted, to whoever claims first, and the
// subscription claims again a poll interval later.
//
// While a delivered message is neither acked nor nacked, a heartbeat renews
// the lease of every row the subscription holds (the messages handed out and
// the rest of their batch) whenever the lease is a third of the ack deadline old, in
// one statement that also applies the batch's settlements so far: a handler
// may run longer than the ack deadline — a report generation, a model call —
// and no other subscriber gets its message meanwhile. The heartbeat stops
// with the ack or nack, with Close, and while the handler is past the
// deadline of its attempt (broker.StartAttempt; the Timeout middleware
// reports the route's timeout), when it also gives the rest of the batch
// back so that it does not wait behind a stuck handler. A message whose
// context carries no reported deadline is renewed until it is settled or
// the PubSub closes, as an SQS message is. A renewal that fails (the
// database is unreachable) is tried again until the lease ends; then the
// message's context is cancelled and the row is anyone's again. The
// handler's context has no deadline of the broker's own: it ends when the
// lease does, by this process's clock (which starts each lease before the
// database does).
//
// While a handler runs longer than the slack, the batch's settlements
// before it are applied, so that none outlives its lease. Every settlement
// and renewal names its claim by the count the claim set: a subscriber whose
// lease has ended and whose row another one has claimed since changes
// nothing — its renewal finds the row gone (logged: the message will be
// delivered again, and its context is cancelled), and its ack deletes
// nothing.
//
// # Measurements
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
//	row lock, SKIP LOCKED (before) 5,700-9,000 8,300-11,700 (4)  370-395 1,400-1,490 (4)
//
// The default schema locks the consumer group's offset row for the whole
// batch; the stock queue schema selects FOR UPDATE without SKIP LOCKED under
// REPEATABLE READ, so a second subscriber waits for the first one's batch and
// then fails with a serialization error (which watermill-sql, not checking
// pgx's Rows.Err, takes for an empty queue: it sleeps a poll interval). Either
// way one subscriber works at a time and extra subscribers add nothing. The
// stock queue adapter also re-sends a nacked message in-process, holding its
// lock, until the ack deadline and then claims it again, so the message never
// leaves that subscriber; on Close or an expired ack deadline it deletes the
// rows of its batch that it never delivered; and with watermill-sql's pgx
// adapter a cancelled subscription rolls back the acks of its current batch.
// This package's first version kept watermill-sql's subscriber loop with its
// own schema, offsets and transaction adapters (the "row lock" row); the
// claim with a lease replaced it, because a count kept in the claim's
// transaction is rolled back by the crash it should count.
//
// The claim with a lease against the row lock, measured side by side (same
// machine, same hour, load 4-6), msg/s:
//
//	                      handler 0 ms                 handler 2 ms
//	                      1 sub          4 subs         1 sub     4 subs
//	batch 1    row lock   1,300          3,000          320       910
//	           lease      1,170          2,280          190       730
//	batch 10   row lock   2,500-4,700    11,400-11,700  340-410   1,340-1,430
//	           lease      11,600         17,200         430       1,480
//	batch 100  row lock   13,600-15,600  25,900-28,600  370-380   1,250-1,480
//	           lease      25,700         29,500         440       1,450
//
// A batch then cost two commits (the claim, then its settlements) where the
// row lock cost one, which showed at batch 1 with a short handler; from batch
// 10 on the lease was faster in these runs (it holds no transaction open
// across the batch and hands messages out without a relay goroutine).
//
// A batch's settlements now go with the next claim, in one round trip and
// one commit. BenchmarkConsume, handler 0 ms, the two builds alternating six
// times (benchstat, load 4.4-6.2, ± is the spread), msg/s and allocations
// per message:
//
//	                      separate commits        settle with the next claim
//	batch 1,  1 sub        990 ± 45%, 102          1,750 ± 37%, 96
//	batch 1,  4 subs     2,270 ± 11%, 102          3,260 ± 17%, 96
//	batch 10, 1 sub     12,200 ± 35%,  43         18,200 ± 14%, 26
//	batch 10, 4 subs    16,400 ± 11%,  44         21,200 ± 26%, 27
//
// Batch size trades throughput for spread: a claimed batch waits for its
// subscriber even when others are idle, a crash redelivers the messages of
// the batch already acked (their settlement had not been applied), and costs
// the batch's undelivered rows an attempt. The default is 10, SQS's largest
// batch.
//
// Polling costs one short statement per idle subscription per PollInterval
// (an UPDATE that matches no row writes nothing). With the row lock's poll, a
// transaction of three round trips, 20 idle subscriptions took about 17% of
// one core (PostgreSQL and this process together) at 100 ms, 10% at 250 ms
// and 3% at 1 s; the claim's one round trip was not measured again. The
// default, 250 ms, adds 125 ms of latency on average to a message published
// to an idle queue.
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
// Each topic's table is Schema.TablePrefix+topic, with the columns attempts
// (claims so far), claimed_until (the end of the current claim's lease, NULL
// when none), first_failed_at and last_failed_at (first and latest nack). A
// table made by an earlier release gets the columns it lacks when it is
// initialised (AutoInitializeSchema or SubscribeInitialize), in one ALTER
// TABLE that runs only when one is missing; its rows are kept. While
// subscribers of an earlier release still run on the same table, they and
// this one skip each other's claims (the lease moves available_at, which they
// also check), but their deliveries count only when nacked. With
// AutoInitializeSchema the schema and table are created on first use (this
// needs CREATE rights); without it they must exist already, created by
// SubscribeInitialize (which provisioning and migrations call), and a missing
// table is reported as such.
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
// broker.NackDelayer, broker.QueueStatter, broker.Peeker, broker.BatchReceiver
// and message.SubscribeInitializer.
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
	// subs holds each running subscription's cancel.
	subs map[*subscription]context.CancelFunc
	// closing ends when Close is called: only then (or at the end of its
	// lease) is a message being handled cut short; a subscription whose
	// context ends stops claiming but lets its handler settle.
	closing     context.Context
	stopClosing context.CancelFunc
	// running counts the subscriptions' loops, which Close waits for: they
	// settle what they hold before the pools close.
	running sync.WaitGroup
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
	// The consuming pool only claims, settles and renews rows: its commits
	// need not wait for the disk (decision 0039). Publishing has its own
	// pool, which does.
	consumeCfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	// Its statements find rows by offset, a primary-key lookup whatever the
	// table holds; but a plan is cached per connection, and one made while a
	// queue table was small joined a claim's rows to the table by a
	// sequential scan, which a table grown since (live rows, and the dead
	// ones of every settled message until vacuum) made cost milliseconds per
	// claim: the Postgres end-to-end benchmark's slow mode, 0.2-0.35x of raw
	// pgx (decision 0041). Without sequential scans the planner takes the
	// index whatever the statistics said when it planned.
	consumeCfg.ConnConfig.RuntimeParams["enable_seqscan"] = "off"

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

	schema := queueSchema{schema: cfg.Schema, prefix: cfg.TablePrefix, logger: logger}
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
	closing, stopClosing := context.WithCancel(context.Background())
	return &PubSub{
		cfg:         cfg,
		logger:      logger,
		schema:      schema,
		publishPool: publishPool,
		consumePool: consumePool,
		publisher:   publisher,
		subs:        map[*subscription]context.CancelFunc{},
		closing:     closing,
		stopClosing: stopClosing,
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

// Close stops every subscription and waits until each has settled what it
// held: acks and nacks already given are applied, a message delivered and not
// yet settled goes back to the queue at once (its attempt counted), and rows
// claimed but never delivered go back uncounted. A claim under way is let
// finish, so that its rows are given back rather than left claimed; while
// the database fails, claims and settlements give up after 15 s. Then Close
// waits for publishes in flight and closes the pools. It is safe to call
// more than once.
func (p *PubSub) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.stopClosing()
	for _, cancel := range p.subs {
		cancel()
	}
	p.mu.Unlock()

	p.running.Wait()
	err := p.publisher.Close()
	p.consumePool.Close()
	p.publishPool.Close()
	if err != nil {
		return fmt.Errorf("postgres: close: %w", err)
	}
	return nil
}
