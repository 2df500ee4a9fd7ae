package dbtx_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/dbtx"
	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
)

func TestWithTxFrom(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, ok := dbtx.From(ctx)
	assert.False(t, ok, "empty context")
	_, ok = dbtx.From(dbtx.WithTx(ctx, nil))
	assert.False(t, ok, "nil transaction")

	pool := dbtest.Pool(t)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	got, ok := dbtx.From(dbtx.WithTx(ctx, tx))
	require.True(t, ok)
	assert.Same(t, tx, got)
}
