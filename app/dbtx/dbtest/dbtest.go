// Package dbtest gives a test its own migrated PostgreSQL schema, so
// that tests of stores run in parallel against one database without seeing
// each other's rows (River's approach). The schema is dropped when the test
// ends.
package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/migrations"
)

// Schema creates a fresh schema named after a random suffix, applies every
// migration to it and returns a pool on the test database and the schema's
// name. The test fails (never skips) when PostgreSQL is not reachable.
func Schema(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	return migrated(t, Pool(t))
}

// TracedSchema is Schema on a pool of at most maxConns connections whose
// statements and batches are counted by the returned RoundTrips (reset after
// the migration).
func TracedSchema(t testing.TB, maxConns int32) (*pgxpool.Pool, string, *RoundTrips) {
	t.Helper()
	trips := &RoundTrips{}
	pool := newPool(t, func(cfg *pgxpool.Config) {
		cfg.MaxConns = maxConns
		cfg.ConnConfig.Tracer = trips
	})
	pool, schema := migrated(t, pool)
	trips.Reset()
	return pool, schema, trips
}

func migrated(t testing.TB, pool *pgxpool.Pool) (*pgxpool.Pool, string) {
	t.Helper()
	schema := NewSchemaName(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Cleanup(func() { Drop(t, pool, schema) })
	if _, err := migrations.Up(ctx, pool, schema); err != nil {
		t.Fatalf("migrate %s: %v", schema, err)
	}
	return pool, schema
}

// Pool returns a small pool on the test database, closed when the test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	// Many tests run at once against one server; keep each one's share small.
	return newPool(t, func(cfg *pgxpool.Config) { cfg.MaxConns = 8 })
}

func newPool(t testing.TB, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresDSN(t))
	if err != nil {
		t.Fatalf("parse test dsn: %v", err)
	}
	configure(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("connect to the test database: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// NewSchemaName returns an unused schema name ("ept_" + 12 hex digits). The
// schema is dropped when the test ends, whether or not it was created.
func NewSchemaName(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "ept_" + hex.EncodeToString(b)
}

// Drop drops schema and everything in it.
func Drop(t testing.TB, pool *pgxpool.Pool, schema string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		t.Errorf("drop schema %s: %v", schema, err)
	}
}

// RoundTrips counts what a pool's connections send: one per statement
// (Exec, Query, QueryRow) and one per batch, however many statements it
// holds. Once a statement is prepared (pgx caches it on the connection after
// its first use), each is one round trip to the server. It is a pgx tracer
// (pgx.QueryTracer, pgx.BatchTracer, pgx.CopyFromTracer) for
// pgx.ConnConfig.Tracer.
type RoundTrips struct{ n atomic.Int64 }

// Count returns the round trips since the last Reset.
func (r *RoundTrips) Count() int64 { return r.n.Load() }

// Reset starts the count again from zero.
func (r *RoundTrips) Reset() { r.n.Store(0) }

// TraceQueryStart implements pgx.QueryTracer.
func (r *RoundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.n.Add(1)
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (*RoundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart implements pgx.BatchTracer.
func (r *RoundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.n.Add(1)
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer.
func (*RoundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd implements pgx.BatchTracer.
func (*RoundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TraceCopyFromStart implements pgx.CopyFromTracer.
func (r *RoundTrips) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	r.n.Add(1)
	return ctx
}

// TraceCopyFromEnd implements pgx.CopyFromTracer.
func (*RoundTrips) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}
