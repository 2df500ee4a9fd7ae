package cli_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/cli"
	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/app/testenv"
)

func TestMigrateUpStatusDown(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	schema := dbtest.NewSchemaName(t)
	t.Cleanup(func() { dbtest.Drop(t, pool, schema) })
	environ := []string{"EVENTPIPE_POSTGRES_DSN=" + testenv.PostgresDSN(t)}
	migrate := func(args ...string) result {
		return run(t, environ, append([]string{"migrate"}, append(args, "--schema", schema)...)...)
	}

	r := migrate("status")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "VERSION")
	assert.Regexp(t, `1\s+pending\s+-\s+00001_processed_messages.sql`, r.stdout)

	r = migrate("up")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "up   00001_processed_messages.sql")
	assert.Contains(t, r.stdout, "up   00002_outbox.sql")
	assert.Regexp(t, `schema \S+ now at version \d+ \(0 pending\)`, r.stdout)

	r = migrate("up")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Regexp(t, `already at version \d+ \(0 pending\)`, r.stdout)

	r = migrate("status")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Regexp(t, `2\s+applied\s+\d{4}-\d\d-\d\dT\S+\s+00002_outbox.sql`, r.stdout)

	r = migrate("down")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Regexp(t, `down \d+_\w+\.sql`, r.stdout)
	assert.Contains(t, r.stdout, "(1 pending)")

	r = migrate("down", "--to", "0")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "down 00001_processed_messages.sql")
	assert.Contains(t, r.stdout, "now at version 0")
}

func TestMigrateUsageErrors(t *testing.T) {
	t.Parallel()
	dsn := []string{"EVENTPIPE_POSTGRES_DSN=postgres://nobody@127.0.0.1:1/x"}
	cases := map[string]struct {
		environ []string
		args    []string
		want    string
	}{
		"no dsn":           {nil, []string{"migrate", "up"}, "postgres.dsn is required"},
		"bad schema":       {dsn, []string{"migrate", "up", "--schema", "Bad-Name"}, "--schema"},
		"unknown verb":     {dsn, []string{"migrate", "sideways"}, "unknown subcommand"},
		"no verb":          {dsn, []string{"migrate"}, "subcommand is required"},
		"bad down target":  {dsn, []string{"migrate", "down", "--to", "-5"}, "--to"},
		"unknown flag":     {dsn, []string{"migrate", "up", "--frob"}, "unknown flag"},
		"relay without db": {nil, []string{"relay"}, "postgres.dsn is required"},
	}
	for name, c := range cases {
		r := run(t, c.environ, c.args...)
		assert.Equal(t, cli.ExitUsage, r.code, "%s: %s", name, r.stderr)
		assert.Contains(t, r.stderr, c.want, name)
	}
}

func TestMigrateUnreachableDatabaseFails(t *testing.T) {
	t.Parallel()
	r := run(t, []string{"EVENTPIPE_POSTGRES_DSN=postgres://nobody@127.0.0.1:1/x?connect_timeout=2"}, "migrate", "status")
	assert.Equal(t, cli.ExitFailure, r.code, r.stderr)
	assert.Contains(t, r.stderr, "connect to postgres")
}

func TestMigrateAndRelayHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"migrate", "--help"}, {"migrate", "up", "--help"}, {"migrate", "down", "--help"}, {"migrate", "status", "--help"}, {"relay", "--help"}} {
		r := run(t, nil, args...)
		assert.Equal(t, cli.ExitOK, r.code, "%v: %s", args, r.stderr)
		assert.Contains(t, r.stdout, "Usage:", "%v", args)
	}
}
