package interviews_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/auth"
	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/handlers/interviews"
)

// The report retry on the admin server: an admin's token re-queues a FAILED
// report (reset and a new report.generate in the outbox, one transaction);
// no token, another role, a path that is no interview and a report that is
// not FAILED are refused without a change.
func TestReportRetryAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := dbtest.Schema(t)
	store, err := interviews.NewPostgres(pool, schema)
	require.NoError(t, err)
	org := interviews.Organization{ID: interviews.NewObjectID(), Name: "Acme"}
	require.NoError(t, store.CreateOrganization(ctx, org))
	id := interviews.NewObjectID()
	require.NoError(t, store.CreateInterview(ctx, interviews.NewInterview{ID: id, OrganizationID: org.ID, Status: "COMPLETED", DurationSeconds: 60}))
	c, err := store.ClaimReport(ctx, org.ID, id, time.Hour)
	require.NoError(t, err)
	require.NoError(t, store.FailReport(ctx, id, c.AttemptCount, "model unavailable"))

	secret := []byte("a-test-secret-of-at-least-32-bytes!!")
	v, err := auth.New(auth.Config{Secret: secret})
	require.NoError(t, err)
	t.Cleanup(v.Close)
	token := func(roles ...string) string {
		tok, err := auth.MintHS256(secret, auth.Claims{Subject: "7", Roles: roles, IssuedAt: time.Now(), TTL: time.Minute})
		require.NoError(t, err)
		return tok
	}
	api := &interviews.ReportRetryAPI{DB: pool, Store: store, Outbox: outbox.TxWriter{Table: outbox.Table{Schema: schema}}, Auth: v, Logger: slog.New(slog.DiscardHandler)}
	call := func(method, path, tok string) (int, map[string]any) {
		req := httptest.NewRequest(method, path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		var body map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), rec.Body.String())
		return rec.Code, body
	}
	outboxRows := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "outbox"}.Sanitize()).Scan(&n))
		return n
	}
	path := interviews.ReportRetryPath + id + "/retry"

	code, _ := call(http.MethodPost, path, "")
	assert.Equal(t, http.StatusUnauthorized, code)
	code, _ = call(http.MethodPost, path, token("learner"))
	assert.Equal(t, http.StatusForbidden, code)
	code, _ = call(http.MethodPost, interviews.ReportRetryPath+"nope/retry", token(auth.AdminRole))
	assert.Equal(t, http.StatusNotFound, code)
	code, _ = call(http.MethodGet, path, token(auth.AdminRole))
	assert.Equal(t, http.StatusMethodNotAllowed, code)
	assert.Zero(t, outboxRows(), "nothing refused wrote anything")

	code, body := call(http.MethodPost, path, token(auth.AdminRole))
	require.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, map[string]any{"interviewId": id, "attempts": float64(1), "lastError": "model unavailable"}, body)
	assert.Equal(t, 1, outboxRows())
	rep, _, err := store.LoadReport(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, interviews.ReportNotStarted, rep.Status)

	code, body = call(http.MethodPost, path, token(auth.AdminRole))
	assert.Equal(t, http.StatusConflict, code)
	assert.Contains(t, body["error"], "NOT_STARTED")
	assert.Equal(t, 1, outboxRows())
}
