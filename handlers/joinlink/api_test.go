package joinlink_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/handlers/joinlink"
)

func TestAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := joinlink.NewMemory()
	schedules := joinlink.NewMemorySchedules()
	svc := &joinlink.Service{Store: store, Generator: joinlink.NewMemoryGenerator(),
		Scheduler: &joinlink.Scheduler{Enabled: true, Schedules: schedules}}
	api := &joinlink.API{Service: svc, Auth: joinlink.BearerAuth("s3cret")}
	id, err := store.CreateSession(ctx, time.Now())
	require.NoError(t, err)
	path := "/program-session/" + strconv.FormatInt(id, 10) + "/link-generation"
	future := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)

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
	admin := map[string]string{"Authorization": "Bearer s3cret", joinlink.UserIDHeader: "7", joinlink.ActiveRoleHeader: "admin"}
	body := `{"linkGenerationAt":"` + future.Format(time.RFC3339Nano) + `"}`

	for name, c := range map[string]struct {
		hdr  map[string]string
		code int
	}{
		"no token":    {map[string]string{}, 401},
		"wrong token": {map[string]string{"Authorization": "Bearer nope", joinlink.UserIDHeader: "7", joinlink.ActiveRoleHeader: "admin"}, 401},
		"no user":     {map[string]string{"Authorization": "Bearer s3cret", joinlink.ActiveRoleHeader: "admin"}, 401},
		"non-admin":   {map[string]string{"Authorization": "Bearer s3cret", joinlink.UserIDHeader: "7", joinlink.ActiveRoleHeader: "learner"}, 403},
	} {
		code, e, raw := do(http.MethodPatch, path, body, c.hdr)
		assert.Equal(t, c.code, code, name)
		assert.False(t, e.Success, name)
		assert.Equal(t, "null", string(e.Data), name)
		assert.NotEmpty(t, e.Error.Code, name)
		assert.NotContains(t, raw, "goroutine", name)
	}
	code, _, _ := do(http.MethodPatch, "/program-session/999/link-generation", body, map[string]string{})
	assert.Equal(t, 401, code, "401 before 404")

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

	code, _, raw := do(http.MethodPatch, path, body, admin)
	require.Equal(t, 200, code, raw)
	assert.JSONEq(t, `{"success":true,"error":null,"data":{"id":`+strconv.FormatInt(id, 10)+`,"linkGenerationAt":"`+future.Format("2006-01-02T15:04:05.000Z")+`","linkGenerationStatus":"SCHEDULED"}}`, raw)
	_, ok := schedules.Get(joinlink.ScheduleName(id))
	assert.True(t, ok, "schedule upserted")
	sess, err := store.Session(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, int64(7), sess.UpdatedBy, "actor from the principal")

	code, _, raw = do(http.MethodPatch, path, `{"linkGenerationAt":null}`, admin)
	require.Equal(t, 200, code, raw)
	assert.JSONEq(t, `{"success":true,"error":null,"data":{"id":`+strconv.FormatInt(id, 10)+`,"linkGenerationAt":null,"linkGenerationStatus":"NOT_SCHEDULED"}}`, raw)
	_, ok = schedules.Get(joinlink.ScheduleName(id))
	assert.False(t, ok, "schedule deleted")

	code, _, _ = do(http.MethodGet, path, "", admin)
	assert.Equal(t, 405, code)
}
