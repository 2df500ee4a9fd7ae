// Package dbtest gives a test its own migrated PostgreSQL schema, so
// that tests of stores run in parallel against one database without seeing
// each other's rows (River's approach). The schema is dropped when the test
// ends.
package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
	pool := Pool(t)
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
	cfg, err := pgxpool.ParseConfig(testenv.PostgresDSN(t))
	if err != nil {
		t.Fatalf("parse test dsn: %v", err)
	}
	// Many tests run at once against one server; keep each one's share small.
	cfg.MaxConns = 8
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
