package cli_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/cli"
	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/app/testenv"
)

// `eventpipe outbox requeue` un-parks the rows it selects and prints how
// many.
func TestOutboxRequeueCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := dbtest.Schema(t)
	table := pgx.Identifier{schema, "outbox"}.Sanitize()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	tb := outbox.Table{Schema: schema}
	require.NoError(t, tb.Write(ctx, tx, "a", message.NewMessage("a-1", []byte(`{}`)), message.NewMessage("a-2", []byte(`{}`))))
	require.NoError(t, tb.Write(ctx, tx, "b", message.NewMessage("b-1", []byte(`{}`)), message.NewMessage("b-2", []byte(`{}`))))
	require.NoError(t, tx.Commit(ctx))
	_, err = pool.Exec(ctx, `UPDATE `+table+` SET parked_at = now(), attempts = 1, next_attempt_at = now() + interval '1 hour'`)
	require.NoError(t, err)
	parked := func() (ids []string) {
		rows, err := pool.Query(ctx, `SELECT event_id FROM `+table+` WHERE parked_at IS NOT NULL ORDER BY event_id`)
		require.NoError(t, err)
		ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return ids
	}
	environ := []string{"EVENTPIPE_POSTGRES_DSN=" + testenv.PostgresDSN(t)}
	requeue := func(args ...string) result {
		return run(t, environ, append([]string{"outbox", "requeue", "--schema", schema}, args...)...)
	}

	r := requeue("--id", "a-1", "--id", "b-1", "--id", "unknown")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Equal(t, "requeued 2 parked outbox row(s) in "+schema+".outbox\n", r.stdout)
	assert.Equal(t, []string{"a-2", "b-2"}, parked())
	var due int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE event_id IN ('a-1', 'b-1') AND attempts = 0 AND next_attempt_at <= now()`).Scan(&due))
	assert.Equal(t, 2, due)

	r = requeue("--all", "--topic", "b")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "requeued 1 parked outbox row(s)")
	assert.Equal(t, []string{"a-2"}, parked())

	r = requeue("--all")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "requeued 1 parked outbox row(s)")
	assert.Empty(t, parked())

	r = requeue("--all")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "requeued 0 parked outbox row(s)")
}

func TestOutboxRequeueUsageErrors(t *testing.T) {
	t.Parallel()
	dsn := []string{"EVENTPIPE_POSTGRES_DSN=postgres://nobody@127.0.0.1:1/x"}
	for name, c := range map[string]struct {
		environ []string
		args    []string
		want    string
	}{
		"no selection":   {dsn, []string{"outbox", "requeue"}, "give --all or at least one --id"},
		"only a topic":   {dsn, []string{"outbox", "requeue", "--topic", "t"}, "give --all or at least one --id"},
		"both":           {dsn, []string{"outbox", "requeue", "--all", "--id", "x"}, "(not both)"},
		"no subcommand":  {dsn, []string{"outbox"}, "subcommand is required"},
		"unknown verb":   {dsn, []string{"outbox", "drop"}, "unknown subcommand"},
		"positional ids": {dsn, []string{"outbox", "requeue", "x"}, "takes no arguments"},
		"no dsn":         {nil, []string{"outbox", "requeue", "--all"}, "postgres.dsn is required"},
		"bad schema":     {dsn, []string{"outbox", "requeue", "--all", "--schema", "Bad-Name"}, "--schema"},
		"unknown flag":   {dsn, []string{"outbox", "requeue", "--every"}, "unknown flag"},
	} {
		r := run(t, c.environ, c.args...)
		assert.Equal(t, cli.ExitUsage, r.code, "%s: %s", name, r.stderr)
		assert.Contains(t, r.stderr, c.want, name)
	}
	r := run(t, []string{"EVENTPIPE_POSTGRES_DSN=postgres://nobody@127.0.0.1:1/x?connect_timeout=2"}, "outbox", "requeue", "--all")
	assert.Equal(t, cli.ExitFailure, r.code, "unreachable database: %s", r.stderr)

	r = run(t, nil, "outbox", "requeue", "--help")
	assert.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "--all")
}
