package jsonhttp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/jsonhttp"
)

// Post sends the JSON body with its headers and classifies the answer: 2xx
// returns it, a retryable status is transient with the peer's Retry-After,
// any other status is permanent, a refused connection is transient.
func TestPost(t *testing.T) {
	t.Parallel()
	var got struct {
		body             map[string]any
		auth, key, ctype string
	}
	status, retryAfter := http.StatusCreated, ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.auth, got.key, got.ctype = r.Header.Get("Authorization"), r.Header.Get("Idempotency-Key"), r.Header.Get("Content-Type")
		_ = json.NewDecoder(r.Body).Decode(&got.body)
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"id":"r-1"}`))
	}))
	t.Cleanup(srv.Close)
	call := jsonhttp.Call{URL: srv.URL, Token: "t0k", Header: http.Header{"Idempotency-Key": {"k-1"}},
		Body: map[string]any{"a": 1}, MaxResponse: 1 << 10, What: "test call"}
	ctx := context.Background()

	ans, err := jsonhttp.Post(ctx, call)
	require.NoError(t, err)
	assert.JSONEq(t, `{"id":"r-1"}`, string(ans.Body))
	assert.Equal(t, "Bearer t0k", got.auth)
	assert.Equal(t, "k-1", got.key)
	assert.Equal(t, "application/json", got.ctype)
	assert.Equal(t, map[string]any{"a": float64(1)}, got.body)

	status, retryAfter = http.StatusServiceUnavailable, "7"
	_, err = jsonhttp.Post(ctx, call)
	require.Error(t, err)
	assert.Equal(t, failure.Transient, failure.Of(err))
	assert.Equal(t, 7*time.Second, failure.RetryAfter(err))
	assert.Contains(t, err.Error(), "test call: 503")

	status, retryAfter = http.StatusBadRequest, ""
	_, err = jsonhttp.Post(ctx, call)
	assert.Equal(t, failure.Permanent, failure.Of(err), err)

	status = http.StatusConflict
	_, err = jsonhttp.Post(ctx, call)
	assert.Equal(t, failure.Permanent, failure.Of(err), "409 is not retryable by default")
	call.Retryable = func(code int) bool { return code == http.StatusConflict }
	_, err = jsonhttp.Post(ctx, call)
	assert.Equal(t, failure.Transient, failure.Of(err), "a call's own rule")

	srv.Close()
	_, err = jsonhttp.Post(ctx, call)
	assert.Equal(t, failure.Transient, failure.Of(err), "connection refused")
}
