// Package dbtx carries a caller's PostgreSQL transaction in a context, so that
// a store called from inside an effect (the inbox's Process, a handler's own
// repository) writes in the same transaction as the effect instead of
// committing on its own — which is what makes "effect and dedupe marker commit
// together" hold.
package dbtx

import (
	"context"

	"github.com/jackc/pgx/v5"
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
