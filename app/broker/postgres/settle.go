package postgres

import (
	"context"
	stdsql "database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// settleTimeout bounds the statements that settle a batch once they no longer
// follow the subscription's context.
const settleTimeout = 15 * time.Second

// settlingBeginner is watermill-sql's pgx Beginner with one change: the
// statements that settle a batch (the ack query and COMMIT) do not stop when
// the subscription's context is cancelled. watermill-sql runs them with that
// context, so a shutdown in the middle of a batch rolled back the acks the
// handlers had already given, and every one of those messages came back. The
// claiming SELECT still stops at once.
type settlingBeginner struct {
	pool   *pgxpool.Pool
	logger watermill.LoggerAdapter
}

var _ wsql.Beginner = settlingBeginner{}

func (b settlingBeginner) BeginTx(ctx context.Context, opts *stdsql.TxOptions) (wsql.Tx, error) {
	txOpts := pgx.TxOptions{IsoLevel: pgx.ReadCommitted}
	if opts != nil && opts.Isolation != stdsql.LevelReadCommitted && opts.Isolation != stdsql.LevelDefault {
		return nil, fmt.Errorf("postgres: isolation level %s is not supported", opts.Isolation)
	}
	tx, err := b.pool.BeginTx(ctx, txOpts)
	if err != nil {
		return nil, err
	}
	return settlingTx{tx: tx, logger: b.logger}, nil
}

func (b settlingBeginner) ExecContext(ctx context.Context, query string, args ...any) (wsql.Result, error) {
	tag, err := b.pool.Exec(ctx, query, args...)
	return wsql.PgxResult{CommandTag: tag}, err
}

func (b settlingBeginner) QueryContext(ctx context.Context, query string, args ...any) (wsql.Rows, error) {
	rows, err := b.pool.Query(ctx, query, args...)
	return wsql.PgxRows{Rows: rows}, err
}

type settlingTx struct {
	tx     pgx.Tx
	logger watermill.LoggerAdapter
}

// ExecContext runs the ack query, the only statement watermill-sql's
// subscriber executes in its transaction with our adapters.
func (t settlingTx) ExecContext(ctx context.Context, query string, args ...any) (wsql.Result, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	tag, err := t.tx.Exec(ctx, query, args...)
	return wsql.PgxResult{CommandTag: tag}, err
}

func (t settlingTx) QueryContext(ctx context.Context, query string, args ...any) (wsql.Rows, error) {
	rows, err := t.tx.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return checkedRows{Rows: rows, logger: t.logger}, nil
}

// checkedRows reports a query that failed while its rows were read. pgx
// returns such errors from Rows.Err, which watermill-sql never consults: a
// claim that failed (a dropped connection, a serialization error) looked like
// an empty queue. Returning the error from Close makes watermill-sql roll back
// and wait RetryInterval; its own log line garbles the error, so it is logged
// here as well.
type checkedRows struct {
	pgx.Rows
	logger watermill.LoggerAdapter
}

func (r checkedRows) Close() error {
	r.Rows.Close()
	err := r.Err()
	if err == nil || errors.Is(err, context.Canceled) {
		return nil // a subscription that ends is no failure
	}
	r.logger.Error("Claiming messages failed", err, nil)
	return err
}

func (t settlingTx) Commit() error {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	return t.tx.Commit(ctx)
}

func (t settlingTx) Rollback() error {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	return t.tx.Rollback(ctx)
}
