package internalapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/handlers/stackup/internalapi"
)

const testKey = "internal-test-key-0123456789"

var testSealKey = bytes.Repeat([]byte{7}, internalapi.KeyLen)

// apiServer is the API over HTTP on a store of its own.
type apiServer struct {
	URL    string
	Client *internalapi.Client
	// now is the API's clock, as Unix seconds.
	now atomic.Int64
}

func newAPIServer(t *testing.T, store internalapi.Store, sealer *internalapi.Sealer) *apiServer {
	t.Helper()
	s := &apiServer{}
	s.now.Store(time.Date(2026, 4, 27, 15, 0, 0, 0, time.UTC).Unix())
	api, err := internalapi.New(internalapi.Config{Store: store, Sealer: sealer, Dimension: 3,
		Now: func() time.Time { return time.Unix(s.now.Load(), 0) }})
	require.NoError(t, err)
	h, err := internalapi.Handler(api, testKey, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	s.Client = &internalapi.Client{BaseURL: srv.URL, APIKey: testKey}
	return s
}

func testSealer(t *testing.T) *internalapi.Sealer {
	t.Helper()
	s, err := internalapi.NewSealer(testSealKey)
	require.NoError(t, err)
	return s
}

// call sends a raw request with the test key (key "" sends none) and
// returns the status and body.
func call(t *testing.T, method, url, key string, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, url, body)
	require.NoError(t, err)
	if key != "" {
		req.Header.Set(internalapi.KeyHeader, key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// TestHandlerOnEachStore runs the HTTP suite on both stores.
func TestHandlerOnEachStore(t *testing.T) {
	t.Parallel()
	for name, newStore := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, c := range handlerSuite {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.run(t, newAPIServer(t, newStore(t), testSealer(t)))
				})
			}
		})
	}
}

var handlerSuite = []struct {
	name string
	run  func(t *testing.T, s *apiServer)
}{
	{"401 without the key, with a wrong one, on any path", func(t *testing.T, s *apiServer) {
		for _, c := range []struct{ method, path, key string }{
			{"GET", "/api/internal/users/1/github-token", ""},
			{"GET", "/api/internal/users/1/github-token", "wrong"},
			{"GET", "/api/internal/users/1/github-token", testKey + "x"},
			{"POST", "/api/internal/embeddings/search", ""},
			{"PUT", "/api/internal/documents/1/embeddings", "nope"},
			{"POST", "/api/internal/ai-logs", ""},
			{"GET", "/no/such/path", ""},
		} {
			status, body := call(t, c.method, s.URL+c.path, c.key, strings.NewReader(`{}`))
			assert.Equal(t, http.StatusUnauthorized, status, "%s %s key %q", c.method, c.path, c.key)
			assert.JSONEq(t, `{"error":{"code":"UNAUTHORIZED","message":"missing or wrong X-Internal-API-Key"}}`, body)
		}
		_, err := (&internalapi.Client{BaseURL: s.URL, APIKey: "wrong"}).Search(context.Background(),
			internalapi.SearchRequest{UserID: 1, QueryEmbedding: []float32{1, 0, 0}})
		var apiErr *internalapi.APIError
		require.ErrorAs(t, err, &apiErr)
		assert.Equal(t, http.StatusUnauthorized, apiErr.Status)
	}},
	{"400 on bad input", func(t *testing.T, s *apiServer) {
		for _, c := range []struct{ name, method, path, body, want string }{
			{"malformed JSON", "POST", "/api/internal/embeddings/search", `{"userId":1,`, "malformed JSON"},
			{"not an object", "POST", "/api/internal/embeddings/search", `[1]`, "malformed JSON"},
			{"two values", "POST", "/api/internal/embeddings/search", `{"userId":1,"queryEmbedding":[1,0,0]} {}`, "more than one JSON value"},
			{"a string for a number", "POST", "/api/internal/embeddings/search", `{"userId":"1","queryEmbedding":[1,0,0]}`, "malformed JSON"},
			{"search without userId", "POST", "/api/internal/embeddings/search", `{"queryEmbedding":[1,0,0],"topK":3}`, "userId is required"},
			{"search with the wrong dimension", "POST", "/api/internal/embeddings/search", `{"userId":1,"queryEmbedding":[1,0]}`, "queryEmbedding has 2 dimensions, want 3"},
			{"search without an embedding", "POST", "/api/internal/embeddings/search", `{"userId":1,"queryText":"kafka"}`, "queryEmbedding has 0 dimensions, want 3"},
			{"a zero query", "POST", "/api/internal/embeddings/search", `{"userId":1,"queryEmbedding":[0,0,0]}`, "all zeros"},
			{"topK too large", "POST", "/api/internal/embeddings/search", `{"userId":1,"queryEmbedding":[1,0,0],"topK":101}`, "topK must be 1..100"},
			{"negative topK", "POST", "/api/internal/embeddings/search", `{"userId":1,"queryEmbedding":[1,0,0],"topK":-1}`, "topK must be 1..100"},
			{"upload with the wrong dimension", "PUT", "/api/internal/documents/5/embeddings", `{"userId":1,"chunks":[{"index":0,"text":"a","embedding":[1,0,0]},{"index":1,"text":"b","embedding":[1,0,0,0]}]}`, "chunks[1].embedding has 4 dimensions, want 3"},
			{"upload without chunks", "PUT", "/api/internal/documents/5/embeddings", `{"userId":1}`, "chunks is required"},
			{"upload without userId", "PUT", "/api/internal/documents/5/embeddings", `{"chunks":[]}`, "userId must be a positive number"},
			{"a chunk index twice", "PUT", "/api/internal/documents/5/embeddings", `{"userId":1,"chunks":[{"index":0,"text":"a","embedding":[1,0,0]},{"index":0,"text":"b","embedding":[1,0,0]}]}`, "appears twice"},
			{"a document id that is no number", "PUT", "/api/internal/documents/abc/embeddings", `{"userId":1,"chunks":[]}`, "documentId must be a positive number"},
			{"a user id that is no number", "GET", "/api/internal/users/-3/github-token", ``, "userId must be a positive number"},
			{"delete without userId", "DELETE", "/api/internal/documents/5", ``, "userId query parameter is required"},
			{"an AI log without model", "POST", "/api/internal/ai-logs", `{"promptTokens":1}`, "model is required"},
			{"a token without expiry", "PUT", "/api/internal/users/1/github-token", `{"token":"ghp_x"}`, "expiresAt is required"},
		} {
			status, body := call(t, c.method, s.URL+c.path, testKey, strings.NewReader(c.body))
			assert.Equal(t, http.StatusBadRequest, status, c.name)
			assert.Contains(t, body, c.want, c.name)
			assert.Contains(t, body, `"code":"BAD_REQUEST"`, c.name)
		}
		// Nothing was stored by the refused upload.
		hits, err := s.Client.Search(context.Background(), internalapi.SearchRequest{UserID: 1, QueryEmbedding: []float32{1, 0, 0}})
		require.NoError(t, err)
		assert.Empty(t, hits)
	}},
	{"413 over 8 MiB", func(t *testing.T, s *apiServer) {
		var b strings.Builder
		b.WriteString(`{"userId":1,"chunks":[{"index":0,"embedding":[1,0,0],"text":"`)
		b.WriteString(strings.Repeat("a", internalapi.MaxBodyBytes))
		b.WriteString(`"}]}`)
		status, body := call(t, "PUT", s.URL+"/api/internal/documents/5/embeddings", testKey, strings.NewReader(b.String()))
		assert.Equal(t, http.StatusRequestEntityTooLarge, status)
		assert.Contains(t, body, `"code":"TOO_LARGE"`)
		// Just under the limit is fine.
		small := `{"userId":1,"chunks":[{"index":0,"embedding":[1,0,0],"text":"` + strings.Repeat("a", internalapi.MaxBodyBytes-200) + `"}]}`
		status, body = call(t, "PUT", s.URL+"/api/internal/documents/5/embeddings", testKey, strings.NewReader(small))
		assert.Equal(t, http.StatusOK, status, body)
	}},
	{"upload, re-upload, search: cosine top-K within the caller's documents", func(t *testing.T, s *apiServer) {
		ctx := context.Background()
		up := []internalapi.Chunk{chunk(0, "opposite", -1, 0, 0), chunk(1, "same", 1, 0, 0), chunk(2, "diagonal", 1, 1, 0)}
		for range 2 {
			status, body := call(t, "PUT", s.URL+"/api/internal/documents/10/embeddings", testKey, strings.NewReader(
				`{"userId":7,"chunks":[{"index":0,"text":"opposite","embedding":[-1,0,0]},{"index":1,"text":"same","embedding":[1,0,0]},{"index":2,"text":"diagonal","embedding":[1,1,0]}],"unknown":"ignored"}`))
			require.Equal(t, http.StatusOK, status, body)
			assert.JSONEq(t, `{"documentId":10,"chunkCount":3}`, body)
		}
		n, err := s.Client.PutEmbeddings(ctx, 7, 10, up)
		require.NoError(t, err)
		assert.Equal(t, 3, n, "the client's re-upload")
		_, err = s.Client.PutEmbeddings(ctx, 8, 11, []internalapi.Chunk{chunk(0, "someone else's", 1, 0, 0)})
		require.NoError(t, err)

		status, body := call(t, "POST", s.URL+"/api/internal/embeddings/search", testKey,
			strings.NewReader(`{"userId":7,"queryEmbedding":[1,0,0],"topK":2}`))
		require.Equal(t, http.StatusOK, status, body)
		assert.JSONEq(t, `{"results":[{"documentId":10,"chunkIndex":1,"text":"same","score":1},{"documentId":10,"chunkIndex":2,"text":"diagonal","score":0.7071067811865475}]}`, body)

		status, body = call(t, "POST", s.URL+"/api/internal/embeddings/search", testKey,
			strings.NewReader(`{"userId":7,"documentIds":[11],"queryEmbedding":[1,0,0]}`))
		require.Equal(t, http.StatusOK, status, body)
		assert.JSONEq(t, `{"results":[]}`, body, "an empty intersection: empty results, never null, never everything")
		status, body = call(t, "POST", s.URL+"/api/internal/embeddings/search", testKey,
			strings.NewReader(`{"userId":99,"queryEmbedding":[1,0,0],"queryText":"same"}`))
		require.Equal(t, http.StatusOK, status, body)
		assert.JSONEq(t, `{"results":[]}`, body, "a user who owns nothing")
	}},
	{"hybrid search fuses cosine and full-text ranks (RRF)", func(t *testing.T, s *apiServer) {
		ctx := context.Background()
		_, err := s.Client.PutEmbeddings(ctx, 7, 1, []internalapi.Chunk{
			chunk(0, "postgres tuning", 1, 0, 0),       // cosine 1st, no text match
			chunk(1, "redis caching", 1, 1, 0),         // cosine 2nd, no text match
			chunk(2, "kafka kafka streams", 0, 1, 0),   // cosine 3rd, text 1st
			chunk(3, "kafka consumer lag", -1, 0.5, 0), // cosine 4th, text 2nd
		})
		require.NoError(t, err)
		q := internalapi.SearchRequest{UserID: 7, QueryEmbedding: []float32{1, 0, 0}, TopK: 4}
		vector, err := s.Client.Search(ctx, q)
		require.NoError(t, err)
		assert.Equal(t, [][2]int64{{1, 0}, {1, 1}, {1, 2}, {1, 3}}, ids(vector), "cosine alone")
		q.QueryText = "Kafka"
		hybrid, err := s.Client.Search(ctx, q)
		require.NoError(t, err)
		// 1/(60+3)+1/(60+1) > 1/(60+4)+1/(60+2) > 1/(60+1) > 1/(60+2)
		assert.Equal(t, [][2]int64{{1, 2}, {1, 3}, {1, 0}, {1, 1}}, ids(hybrid), "fused")
		assert.InDelta(t, 1.0/63+1.0/61, hybrid[0].Score, 1e-12)
		assert.Equal(t, "kafka kafka streams", hybrid[0].Text)
		q.TopK = 1
		top, err := s.Client.Search(ctx, q)
		require.NoError(t, err)
		assert.Equal(t, [][2]int64{{1, 2}}, ids(top))
	}},
	{"ownership: another user's upload is 403, a deleted document's 410 and never searched", func(t *testing.T, s *apiServer) {
		ctx := context.Background()
		_, err := s.Client.PutEmbeddings(ctx, 7, 1, []internalapi.Chunk{chunk(0, "mine", 1, 0, 0)})
		require.NoError(t, err)
		_, err = s.Client.PutEmbeddings(ctx, 8, 1, []internalapi.Chunk{chunk(0, "theirs", 1, 0, 0)})
		require.ErrorIs(t, err, internalapi.ErrForeignDocument)
		status, _ := call(t, "DELETE", s.URL+"/api/internal/documents/1?userId=8", testKey, nil)
		assert.Equal(t, http.StatusForbidden, status)
		status, _ = call(t, "DELETE", s.URL+"/api/internal/documents/404?userId=7", testKey, nil)
		assert.Equal(t, http.StatusNotFound, status)
		status, body := call(t, "DELETE", s.URL+"/api/internal/documents/1?userId=7", testKey, nil)
		assert.Equal(t, http.StatusNoContent, status, body)
		require.NoError(t, s.Client.DeleteDocument(ctx, 7, 1), "again")
		hits, err := s.Client.Search(ctx, internalapi.SearchRequest{UserID: 7, QueryEmbedding: []float32{1, 0, 0}, QueryText: "mine"})
		require.NoError(t, err)
		assert.Empty(t, hits)
		_, err = s.Client.PutEmbeddings(ctx, 7, 1, []internalapi.Chunk{chunk(0, "back", 1, 0, 0)})
		require.ErrorIs(t, err, internalapi.ErrDeletedDocument)
	}},
	{"github token: 404 without one, lent until it expires", func(t *testing.T, s *apiServer) {
		ctx := context.Background()
		status, body := call(t, "GET", s.URL+"/api/internal/users/7/github-token", testKey, nil)
		assert.Equal(t, http.StatusNotFound, status)
		assert.Contains(t, body, `"code":"NOT_FOUND"`)
		_, err := s.Client.GitHubToken(ctx, 7)
		require.ErrorIs(t, err, internalapi.ErrNotFound)

		now := time.Unix(s.now.Load(), 0).UTC()
		require.NoError(t, s.Client.SetGitHubToken(ctx, 7, "ghp_secret123", now.Add(time.Hour)))
		status, body = call(t, "GET", s.URL+"/api/internal/users/7/github-token", testKey, nil)
		require.Equal(t, http.StatusOK, status, body)
		var got map[string]any
		require.NoError(t, json.Unmarshal([]byte(body), &got))
		assert.Equal(t, map[string]any{"userId": float64(7), "token": "ghp_secret123", "expiresAt": now.Add(time.Hour).Format(time.RFC3339)}, got)
		tok, err := s.Client.GitHubToken(ctx, 7)
		require.NoError(t, err)
		assert.Equal(t, "ghp_secret123", tok.Token)
		_, err = s.Client.GitHubToken(ctx, 8)
		require.ErrorIs(t, err, internalapi.ErrNotFound, "another user's")

		s.now.Add(3600)
		_, err = s.Client.GitHubToken(ctx, 7)
		require.ErrorIs(t, err, internalapi.ErrNotFound, "expired")
		status, _ = call(t, "PUT", s.URL+"/api/internal/users/7/github-token", testKey,
			strings.NewReader(`{"token":"ghp_x","expiresAt":"2020-01-01T00:00:00Z"}`))
		assert.Equal(t, http.StatusBadRequest, status, "an expiry in the past")
		status, _ = call(t, "PUT", s.URL+"/api/internal/users/7/github-token", testKey,
			strings.NewReader(`{"token":"ghp x","expiresAt":"2099-01-01T00:00:00Z"}`))
		assert.Equal(t, http.StatusBadRequest, status, "a token with a space")
	}},
	{"ai logs: 202", func(t *testing.T, s *apiServer) {
		status, body := call(t, "POST", s.URL+"/api/internal/ai-logs", testKey,
			strings.NewReader(`{"userId":7,"model":"gpt-4.1-mini","requestType":"generate.questions","traceId":"t-1","promptTokens":812,"completionTokens":240,"latencyMs":2300}`))
		assert.Equal(t, http.StatusAccepted, status, body)
		user := int64(7)
		require.NoError(t, s.Client.LogAICall(context.Background(), internalapi.AILog{UserID: &user, Model: "m", LatencyMs: 5, Success: false}))
	}},
}

// Without an encryption key the token endpoints answer 503, the rest work.
func TestTokensOffWithoutKey(t *testing.T) {
	t.Parallel()
	s := newAPIServer(t, internalapi.NewMemory(), nil)
	status, body := call(t, "GET", s.URL+"/api/internal/users/7/github-token", testKey, nil)
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Contains(t, body, "TOKENS_OFF")
	status, _ = call(t, "PUT", s.URL+"/api/internal/users/7/github-token", testKey, strings.NewReader(`{"token":"t","expiresAt":"2099-01-01T00:00:00Z"}`))
	assert.Equal(t, http.StatusServiceUnavailable, status)
	_, err := s.Client.Search(context.Background(), internalapi.SearchRequest{UserID: 7, QueryEmbedding: []float32{1, 0, 0}})
	assert.NoError(t, err)
}

func TestHandlerRefusesAShortKey(t *testing.T) {
	t.Parallel()
	api, err := internalapi.New(internalapi.Config{Store: internalapi.NewMemory(), Dimension: 3})
	require.NoError(t, err)
	_, err = internalapi.Handler(api, "short", nil)
	require.ErrorContains(t, err, "want at least 16")
}

// The token is encrypted at rest: the row holds no plaintext, and a
// ciphertext copied to another user's row does not open.
func TestTokenEncryptedAtRest(t *testing.T) {
	t.Parallel()
	pool, schema := dbtest.Schema(t)
	store, err := internalapi.NewPostgres(pool, schema)
	require.NoError(t, err)
	s := newAPIServer(t, store, testSealer(t))
	ctx := context.Background()
	const plain = "gho_VerySecretTokenValue42"
	require.NoError(t, s.Client.SetGitHubToken(ctx, 7, plain, time.Unix(s.now.Load(), 0).Add(time.Hour)))

	var ciphertext []byte
	var whole string
	require.NoError(t, pool.QueryRow(ctx, `SELECT ciphertext, t::text FROM `+pgx.Identifier{schema, "stackup_github_tokens"}.Sanitize()+` t WHERE user_id = 7`).
		Scan(&ciphertext, &whole))
	assert.NotContains(t, string(ciphertext), plain)
	assert.NotContains(t, whole, plain)
	assert.NotContains(t, whole, "VerySecret")
	assert.Greater(t, len(ciphertext), len(plain), "nonce and tag")

	copyRow(t, pool, schema)
	status, body := call(t, "GET", s.URL+"/api/internal/users/8/github-token", testKey, nil)
	assert.Equal(t, http.StatusInternalServerError, status, "user 8's row holds user 7's ciphertext: it must not open")
	assert.NotContains(t, body, plain)

	other, err := internalapi.NewSealer(bytes.Repeat([]byte{8}, internalapi.KeyLen))
	require.NoError(t, err)
	s2 := newAPIServer(t, store, other)
	status, body = call(t, "GET", s2.URL+"/api/internal/users/7/github-token", testKey, nil)
	assert.Equal(t, http.StatusInternalServerError, status, "another key does not open it")
	assert.NotContains(t, body, plain)
}

func copyRow(t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	tbl := pgx.Identifier{schema, "stackup_github_tokens"}.Sanitize()
	_, err := pool.Exec(context.Background(), `INSERT INTO `+tbl+` (user_id, ciphertext, expires_at) SELECT 8, ciphertext, expires_at FROM `+tbl+` WHERE user_id = 7`)
	require.NoError(t, err)
}

// AI logs land as rows.
func TestAILogRows(t *testing.T) {
	t.Parallel()
	pool, schema := dbtest.Schema(t)
	store, err := internalapi.NewPostgres(pool, schema)
	require.NoError(t, err)
	s := newAPIServer(t, store, nil)
	status, body := call(t, "POST", s.URL+"/api/internal/ai-logs", testKey,
		strings.NewReader(`{"userId":7,"model":"gpt-4.1-mini","requestType":"generate.questions","traceId":"t-1","promptTokens":812,"completionTokens":240,"latencyMs":2300}`))
	require.Equal(t, http.StatusAccepted, status, body)
	var (
		user                      *int64
		model, requestType, trace string
		prompt, completion        int
		latency                   int64
		success                   bool
	)
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT user_id, model, request_type, trace_id, prompt_tokens, completion_tokens, latency_ms, success FROM `+
		pgx.Identifier{schema, "stackup_ai_request_logs"}.Sanitize()).Scan(&user, &model, &requestType, &trace, &prompt, &completion, &latency, &success))
	require.NotNil(t, user)
	assert.Equal(t, int64(7), *user)
	assert.Equal(t, []any{"gpt-4.1-mini", "generate.questions", "t-1", 812, 240, int64(2300), true},
		[]any{model, requestType, trace, prompt, completion, latency, success})
}
