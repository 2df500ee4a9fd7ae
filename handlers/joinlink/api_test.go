package joinlink_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/auth"
	"github.com/eventpipe/eventpipe/app/spec"
	"github.com/eventpipe/eventpipe/config"
	"github.com/eventpipe/eventpipe/handlers/joinlink"
)

var apiSecret = []byte("joinlink-api-test-secret-of-32-bytes")

// token mints an HS256 JWT for sub with roles, valid for ttl from iat.
func token(t *testing.T, sub string, iat time.Time, ttl time.Duration, roles ...string) string {
	t.Helper()
	tok, err := auth.MintHS256(apiSecret, auth.Claims{Subject: sub, Roles: roles, IssuedAt: iat, TTL: ttl})
	require.NoError(t, err)
	return "Bearer " + tok
}

func TestAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := joinlink.NewMemory()
	schedules := joinlink.NewMemorySchedules()
	svc := &joinlink.Service{Store: store, Generator: joinlink.NewMemoryGenerator(),
		Scheduler: &joinlink.Scheduler{Enabled: true, Schedules: schedules}}
	verifier, err := auth.New(auth.Config{Secret: apiSecret})
	require.NoError(t, err)
	api := &joinlink.API{Service: svc, Auth: verifier}
	id, err := store.CreateSession(ctx, time.Now())
	require.NoError(t, err)
	path := "/program-session/" + strconv.FormatInt(id, 10) + "/link-generation"
	future := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	now := time.Now()

	type errBody struct {
		Success bool            `json:"success"`
		Data    json.RawMessage `json:"data"`
		Error   struct{ Code, Message string }
	}
	do := func(method, path, body string, hdr map[string]string) (int, errBody, string) {
		req := httptest.NewRequestWithContext(ctx, method, path, strings.NewReader(body))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		var e errBody
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e), rec.Body.String())
		return rec.Code, e, rec.Body.String()
	}
	admin := map[string]string{"Authorization": token(t, "7", now, time.Hour, "admin")}
	body := `{"linkGenerationAt":"` + future.Format(time.RFC3339Nano) + `"}`
	otherSecret, err := auth.MintHS256([]byte("not-the-api-secret-but-32-bytes-long"), auth.Claims{Subject: "7", Roles: []string{"admin"}, IssuedAt: now, TTL: time.Hour})
	require.NoError(t, err)

	for name, c := range map[string]struct {
		hdr     map[string]string
		code    int
		message string
	}{
		"no token":                      {map[string]string{}, 401, "authentication required: send an Authorization: Bearer JWT"},
		"not bearer":                    {map[string]string{"Authorization": "Basic YWRtaW46YWRtaW4="}, 401, "authentication required: send an Authorization: Bearer JWT"},
		"wrong key":                     {map[string]string{"Authorization": "Bearer " + otherSecret}, 401, "invalid token: token signature is invalid"},
		"not a JWT":                     {map[string]string{"Authorization": "Bearer s3cret"}, 401, "invalid token: token is malformed"},
		"expired":                       {map[string]string{"Authorization": token(t, "7", now.Add(-2*time.Hour), time.Hour, "admin")}, 401, "invalid token: token is expired"},
		"no sub":                        {map[string]string{"Authorization": "Bearer " + tokenWithoutSub(t)}, 401, "invalid token: token has no sub"},
		"non-admin":                     {map[string]string{"Authorization": token(t, "7", now, time.Hour, "learner")}, 403, "admin role required"},
		"no roles":                      {map[string]string{"Authorization": token(t, "7", now, time.Hour)}, 403, "admin role required"},
		"sub no id":                     {map[string]string{"Authorization": token(t, "ada@example.com", now, time.Hour, "admin")}, 403, "the token's sub must be the acting user's id, a positive integer"},
		"sub zero":                      {map[string]string{"Authorization": token(t, "0", now, time.Hour, "admin")}, 403, "the token's sub must be the acting user's id, a positive integer"},
		"headers only (the old scheme)": {map[string]string{"X-User-Id": "7", "X-Active-Role": "admin"}, 401, "authentication required: send an Authorization: Bearer JWT"},
		"forged role header":            {map[string]string{"Authorization": token(t, "7", now, time.Hour, "learner"), "X-User-Id": "7", "X-Active-Role": "admin"}, 403, "admin role required"},
	} {
		code, e, raw := do(http.MethodPatch, path, body, c.hdr)
		assert.Equal(t, c.code, code, name)
		assert.False(t, e.Success, name)
		assert.Equal(t, "null", string(e.Data), name)
		assert.Equal(t, map[int]string{401: joinlink.CodeUnauthorized, 403: joinlink.CodeForbidden}[c.code], e.Error.Code, name)
		assert.Equal(t, c.message, e.Error.Message, name)
		assert.NotContains(t, raw, "goroutine", name)
	}
	sess, err := store.Session(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, joinlink.NotScheduled, sess.Status, "no refused request wrote")
	code, _, _ := do(http.MethodPatch, "/program-session/999/link-generation", body, map[string]string{})
	assert.Equal(t, 401, code, "401 before 404")
	code, _, _ = do(http.MethodPatch, "/program-session/999/link-generation", body, map[string]string{"Authorization": token(t, "7", now, time.Hour, "learner")})
	assert.Equal(t, 403, code, "403 before 404")

	for name, b := range map[string]string{
		"not JSON":   `{`,
		"missing":    `{}`,
		"number":     `{"linkGenerationAt":5}`,
		"not a time": `{"linkGenerationAt":"tomorrow"}`,
		"past":       `{"linkGenerationAt":"2020-01-01T00:00:00Z"}`,
		"not UTC":    `{"linkGenerationAt":"` + future.In(time.FixedZone("IST", 19800)).Format(time.RFC3339) + `"}`,
		"array body": `[]`,
	} {
		code, e, _ := do(http.MethodPatch, path, b, admin)
		assert.Equal(t, 400, code, name)
		assert.Equal(t, joinlink.CodeBadRequest, e.Error.Code, name)
	}
	code, e, _ := do(http.MethodPatch, "/program-session/999/link-generation", body, admin)
	assert.Equal(t, 404, code)
	assert.Equal(t, joinlink.CodeNotFound, e.Error.Code)
	code, _, _ = do(http.MethodPatch, "/program-session/abc/link-generation", body, admin)
	assert.Equal(t, 404, code)

	// The acting user is the token's sub; X-User-Id is ignored.
	forged := map[string]string{"Authorization": admin["Authorization"], "X-User-Id": "666", "X-Active-Role": "learner"}
	code, _, raw := do(http.MethodPatch, path, body, forged)
	require.Equal(t, 200, code, raw)
	assert.JSONEq(t, `{"success":true,"error":null,"data":{"id":`+strconv.FormatInt(id, 10)+`,"linkGenerationAt":"`+future.Format("2006-01-02T15:04:05.000Z")+`","linkGenerationStatus":"SCHEDULED"}}`, raw)
	_, ok := schedules.Get(joinlink.ScheduleName(id))
	assert.True(t, ok, "schedule upserted")
	sess, err = store.Session(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, int64(7), sess.UpdatedBy, "actor from the token's sub, not X-User-Id")

	code, _, raw = do(http.MethodPatch, path, `{"linkGenerationAt":null}`, map[string]string{"Authorization": token(t, "8", now, time.Hour, "ops", "admin")})
	require.Equal(t, 200, code, raw)
	assert.JSONEq(t, `{"success":true,"error":null,"data":{"id":`+strconv.FormatInt(id, 10)+`,"linkGenerationAt":null,"linkGenerationStatus":"NOT_SCHEDULED"}}`, raw)
	_, ok = schedules.Get(joinlink.ScheduleName(id))
	assert.False(t, ok, "schedule deleted")
	sess, err = store.Session(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, int64(8), sess.UpdatedBy)

	code, _, _ = do(http.MethodGet, path, "", admin)
	assert.Equal(t, 405, code)
}

// An API without a verifier refuses everyone.
func TestAPIWithoutVerifier(t *testing.T) {
	t.Parallel()
	api := &joinlink.API{Service: &joinlink.Service{Store: joinlink.NewMemory()}}
	req := httptest.NewRequest(http.MethodPatch, "/program-session/1/link-generation", strings.NewReader(`{"linkGenerationAt":null}`))
	req.Header.Set("Authorization", token(t, "7", time.Now(), time.Hour, "admin"))
	rec := httptest.NewRecorder()
	api.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusUnauthorized, rec.Code)
}

// tokenWithoutSub is an admin token signed with the API's secret that has no
// sub.
func tokenWithoutSub(t *testing.T) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"roles": []string{"admin"}, "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString(apiSecret)
	require.NoError(t, err)
	return tok
}

// The API is on when the service verifies admin JWTs and off otherwise,
// with one log line saying why.
func TestModuleMountsTheAPIWithAVerifier(t *testing.T) {
	t.Parallel()
	build := func(v *auth.Verifier) (spec.Parts, string) {
		cfg := config.Defaults()
		cfg.JoinLink.Enabled, cfg.JoinLink.SampleTraffic = true, true
		var logs bytes.Buffer
		parts, err := joinlink.Module.Build(context.Background(), spec.Deps{
			Config: cfg, Verifier: v, Getenv: func(string) string { return "" },
			Logger: slog.New(slog.NewTextHandler(&logs, nil)), Registerer: prometheus.NewRegistry(),
		})
		require.NoError(t, err)
		return parts, logs.String()
	}
	parts, logs := build(nil)
	assert.Empty(t, parts.Endpoints)
	assert.Equal(t, 1, strings.Count(logs, "join-link admin API off"), logs)
	assert.Contains(t, logs, "$EVENTPIPE_ADMIN_TOKEN_SECRET (admin.token_secret_env) or admin.token_jwks_url")

	v, err := auth.New(auth.Config{Secret: apiSecret})
	require.NoError(t, err)
	parts, logs = build(v)
	require.Len(t, parts.Endpoints, 1)
	assert.Equal(t, "/program-session/", parts.Endpoints[0].Pattern)
	assert.NotContains(t, logs, "admin API off")
}
