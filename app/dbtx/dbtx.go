// Package dbtx carries a caller's PostgreSQL transaction in a context, so that
// a store called from inside an effect (the inbox's Process, a handler's own
// repository) writes in the same transaction as the effect instead of
// committing on its own — which is what makes "effect and dedupe marker commit
// together" hold. A new transaction InTx begins on a pool is a PipelinedTx,
// which spends fewer round trips than pgx's own (decision 0038).
package dbtx

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

type key struct{}

// WithTx returns a copy of ctx carrying tx.
func WithTx(ctx context.Context, tx pgx.Tx) context.Context {
	return context.WithValue(ctx, key{}, tx)
}

// From returns the transaction ctx carries, if any. A store that finds one
// must use it (never begin a transaction of its own beside it).
func From(ctx context.Context) (pgx.Tx, bool) {
	tx, ok := ctx.Value(key{}).(pgx.Tx)
	return tx, ok && tx != nil
}

// Querier is what a pool and a transaction share: the statements a store runs.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Q is "transaction or pool": the transaction ctx carries, else pool. A store
// runs a single statement through it, so that inside an effect the statement
// joins the effect's transaction.
func Q(ctx context.Context, pool Beginner) Querier {
	if tx, ok := From(ctx); ok {
		return tx
	}
	return pool
}

// Beginner is a pool (or anything that begins transactions and queries).
type Beginner interface {
	Querier
	Begin(ctx context.Context) (pgx.Tx, error)
}

// InTx runs fn in a transaction and commits it when fn returns nil: a
// savepoint inside the transaction ctx carries (the caller's commit then
// decides), else a new transaction on pool. fn's ctx carries the transaction
// (WithTx), so the stores fn calls write in it too. Any error, or a panic,
// rolls back.
//
// A new transaction on a pool that hands out connections (an Acquirer, as
// *pgxpool.Pool is) is a PipelinedTx: BEGIN goes with fn's first statement,
// and what fn holds back with ExecAtCommit goes with COMMIT, so a failure of
// those is returned as InTx's commit error. Any other pool begins its own
// transaction.
func InTx(ctx context.Context, pool Beginner, fn func(ctx context.Context, tx pgx.Tx) error) error {
	var (
		tx  pgx.Tx
		err error
	)
	if outer, ok := From(ctx); ok {
		tx, err = outer.Begin(ctx)
	} else if a, ok := pool.(Acquirer); ok {
		tx, err = BeginPipelined(ctx, a)
	} else {
		tx, err = pool.Begin(ctx)
	}
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	// Rollback after Commit is a no-op; on every other path it undoes fn.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(WithTx(ctx, tx), tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
