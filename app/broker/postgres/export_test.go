package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TraceConsuming replaces p's consuming pool, before it has a subscription,
// with one whose connections report every statement to tracer: a test sees
// which claims and settlements a subscription sends.
func TraceConsuming(t testing.TB, p *PubSub, tracer pgx.QueryTracer) {
	t.Helper()
	cfg := p.consumePool.Config()
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("traced consuming pool: %v", err)
	}
	p.consumePool.Close()
	p.consumePool = pool
}

// CommitModes reports synchronous_commit on a connection of each of p's
// pools.
func CommitModes(ctx context.Context, p *PubSub) (publish, consume string, err error) {
	if err = p.publishPool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&publish); err != nil {
		return "", "", err
	}
	err = p.consumePool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&consume)
	return publish, consume, err
}

// ExplainClaim is the plan of a claim of batch rows of topic on a connection
// of the consuming pool, or of the publishing pool.
func ExplainClaim(ctx context.Context, p *PubSub, topic string, batch int, consuming bool) (string, error) {
	pool := p.publishPool
	if consuming {
		pool = p.consumePool
	}
	rows, err := pool.Query(ctx, "EXPLAIN "+p.schema.claimSQL(topic, false, batch, time.Minute))
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return strings.Join(lines, "\n"), err
}
