package postgres_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/postgres"
)

// leasedRows counts topic's rows claimed and still leased.
func leasedRows(t *testing.T, cfg postgres.Config, topic string) int {
	t.Helper()
	return countRows(t, cfg, topic, "claimed_until > now()")
}

// A busy queue is claimed by Workers loops, each holding a claim of its
// own: while the handlers hold as many messages as the subscription may have
// out, the next batch is already claimed, so a settled message's successor
// is handed out without waiting for a claim's round trip. The loops share
// the concurrency: never more out at once than asked for.
func TestWorkersClaimAheadOfTheHandlers(t *testing.T) {
	t.Parallel()
	const batch, workers = 2, 3
	cfg := testConfig(t)
	cfg.BatchSize = batch
	cfg.Workers = workers
	ps := newPubSub(t, cfg)
	topic := brokertest.Topic(t)
	publishNumbered(t, ps, topic, 10)

	ctx, cancel := context.WithCancel(broker.WithConcurrency(context.Background(), batch))
	defer cancel()
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)
	held := []*message.Message{brokertest.Next(t, msgs, 10*time.Second), brokertest.Next(t, msgs, 10*time.Second)}
	assert.Eventually(t, func() bool { return leasedRows(t, cfg, topic) == 4 }, 10*time.Second, 20*time.Millisecond,
		"the handlers' batch and one more claimed ahead (two loops of the three: no more than the concurrency asked)")
	select {
	case m := <-msgs:
		t.Fatalf("message %s handed out while %d were unsettled (asked for %d)", m.UUID, len(held), batch)
	case <-time.After(300 * time.Millisecond):
	}
	held[0].Ack()
	next := brokertest.Next(t, msgs, 10*time.Second)
	assert.NotEqual(t, held[0].UUID, next.UUID)
	held[1].Ack()
	next.Ack()
	for range 7 {
		brokertest.Next(t, msgs, 10*time.Second).Ack()
	}
	assert.Eventually(t, func() bool { return rowsLeft(t, cfg, topic) == 0 }, 10*time.Second, 20*time.Millisecond, "every message acked")
}

// A subscription asked for one message at a time runs one loop: it holds
// one claim, as before, whatever Workers says.
func TestOneAtATimeHoldsOneClaim(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.BatchSize = 1
	cfg.Workers = 4
	ps := newPubSub(t, cfg)
	topic := brokertest.Topic(t)
	publishNumbered(t, ps, topic, 5)

	msgs, err := ps.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	m := brokertest.Next(t, msgs, 10*time.Second)
	time.Sleep(300 * time.Millisecond)
	assert.Equal(t, 1, leasedRows(t, cfg, topic), "one row claimed: the one being handled")
	m.Ack()
}

// claimCounter counts the claim statements a subscription sends and keeps
// their arguments.
type claimCounter struct {
	mu     sync.Mutex
	claims int
	args   [][]any
}

func (c *claimCounter) record(sql string, args []any) {
	if !strings.Contains(sql, "WITH claimable AS") {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.claims++
	c.args = append(c.args, args)
}

func (c *claimCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.claims
}

func (c *claimCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.record(d.SQL, d.Args)
	return ctx
}
func (c *claimCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *claimCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (c *claimCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.record(d.SQL, d.Args)
}
func (c *claimCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// An idle queue is polled by one loop of a subscription, not by each of its
// Workers: an idle subscription costs one claim per poll interval. A claim
// carries no parameters (its limit and lease are literals), so that
// PostgreSQL plans it once per connection instead of at every claim.
func TestIdleQueueIsPolledByOneLoop(t *testing.T) {
	t.Parallel()
	const poll, window = 50 * time.Millisecond, 1500 * time.Millisecond
	cfg := testConfig(t)
	cfg.Workers = 4
	cfg.PollInterval = poll
	ps := newPubSub(t, cfg)
	claims := &claimCounter{}
	postgres.TraceConsuming(t, ps, claims)
	topic := brokertest.Topic(t)
	require.NoError(t, ps.SubscribeInitialize(topic))

	ctx, cancel := context.WithCancel(broker.WithConcurrency(context.Background(), 0))
	defer cancel()
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)
	time.Sleep(poll) // the loops' first claims, all at once
	before := claims.count()
	time.Sleep(window)
	polls := claims.count() - before
	assert.LessOrEqual(t, polls, int(window/poll)+3, "one loop polls an idle queue (%d loops would claim about %d times)", cfg.Workers, cfg.Workers*int(window/poll))
	assert.GreaterOrEqual(t, polls, int(window/poll)/2, "it is still polled")

	// A backlog wakes them: the messages arrive, and are all handled.
	ids := publishNumbered(t, ps, topic, 25)
	for range ids {
		brokertest.Next(t, msgs, 10*time.Second).Ack()
	}
	claims.mu.Lock()
	defer claims.mu.Unlock()
	for _, a := range claims.args {
		assert.Empty(t, a, "a claim's limit and lease are part of its text")
	}
}

// Claims, settlements and renewals commit without waiting for the disk
// (decision 0039): the consuming pool's connections run with
// synchronous_commit off. Publishing, the only way a message's sole copy
// gets into a table, keeps the server's setting.
func TestOnlyTheConsumingPoolCommitsAsynchronously(t *testing.T) {
	t.Parallel()
	ps := newPubSub(t, testConfig(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	publish, consume, err := postgres.CommitModes(ctx, ps)
	require.NoError(t, err)
	assert.Equal(t, "off", consume)
	assert.Equal(t, "on", publish, "the test server's default, untouched")
}

// A claim finds its rows by offset through the primary key on the consuming
// pool whatever the table's statistics say. Planned on a small table, as a
// connection's cached plan may have been, it would join them by a
// sequential scan of the table — the publishing pool, with PostgreSQL's
// defaults, shows that plan — which a table grown since makes slow.
func TestClaimsUseThePrimaryKeyWhateverTheStatistics(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	ps := newPubSub(t, cfg)
	topic := brokertest.Topic(t)
	publishNumbered(t, ps, topic, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, cfg.DSN)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `ANALYZE `+pgx.Identifier{cfg.Schema, postgres.DefaultTablePrefix + topic}.Sanitize())
	require.NoError(t, err)

	defaults, err := postgres.ExplainClaim(ctx, ps, topic, 10, false)
	require.NoError(t, err)
	assert.Contains(t, defaults, "Seq Scan", "what the planner's defaults make of a small table")
	consuming, err := postgres.ExplainClaim(ctx, ps, topic, 10, true)
	require.NoError(t, err)
	assert.NotContains(t, consuming, "Seq Scan", "the consuming pool's plan:\n%s", consuming)
}
