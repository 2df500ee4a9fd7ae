package cli_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/cli"
	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/handlers/interviews"
)

// `eventpipe interviews report retry` brings a FAILED report back: NOT_STARTED
// with its attempts cleared and a new report.generate request in the outbox,
// in one transaction; a report that is not FAILED is refused and unchanged.
func TestReportRetryCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := dbtest.Schema(t)
	store, err := interviews.NewPostgres(pool, schema)
	require.NoError(t, err)
	org := interviews.Organization{ID: interviews.NewObjectID(), Name: "Acme"}
	require.NoError(t, store.CreateOrganization(ctx, org))
	id := interviews.NewObjectID()
	require.NoError(t, store.CreateInterview(ctx, interviews.NewInterview{ID: id, OrganizationID: org.ID, Status: "COMPLETED", DurationSeconds: 60}))
	for range 3 {
		c, err := store.ClaimReport(ctx, org.ID, id, 0)
		require.NoError(t, err)
		require.NoError(t, store.FailReport(ctx, id, c.AttemptCount, "model unavailable"))
	}
	environ := []string{"EVENTPIPE_POSTGRES_DSN=" + testenv.PostgresDSN(t), "EVENTPIPE_POSTGRES_SCHEMA=" + schema}

	r := run(t, environ, "interviews", "report", "retry", "--interview", id)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "re-queued (was FAILED after 3 attempt(s): model unavailable)")
	rep, ok, err := store.LoadReport(ctx, id)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, interviews.ReportNotStarted, rep.Status)
	assert.Zero(t, rep.AttemptCount, "a fresh attempt budget")
	assert.Empty(t, rep.LastError)
	var topic string
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT min(topic), count(*) FROM `+pgx.Identifier{schema, "outbox"}.Sanitize()).Scan(&topic, &n))
	assert.Equal(t, 1, n, "one request written with the reset")
	assert.Equal(t, interviews.ReportGenerateQueue, topic)

	r = run(t, environ, "interviews", "report", "retry", "--interview", id)
	assert.Equal(t, cli.ExitFailure, r.code)
	assert.Contains(t, r.stderr, "is NOT_STARTED")
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "outbox"}.Sanitize()).Scan(&n))
	assert.Equal(t, 1, n, "a refused retry writes nothing")

	r = run(t, environ, "interviews", "report", "retry", "--interview", "nope")
	assert.Equal(t, cli.ExitUsage, r.code)
}
