package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/llm"
)

const secret = "sk-test-SECRET-never-logged"

func env(key string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		if name == key {
			return secret, true
		}
		return "", false
	}
}

// fake is a local OpenAI-compatible server answering with handle.
func fake(t *testing.T, handle http.HandlerFunc) *llm.Client {
	t.Helper()
	srv := httptest.NewServer(handle)
	t.Cleanup(srv.Close)
	c, err := llm.New(llm.Config{BaseURL: srv.URL + "/v1/", LookupEnv: env("OPENAI_API_KEY"), Timeout: 2 * time.Second})
	require.NoError(t, err)
	return c
}

func request() llm.Request {
	return llm.Request{
		Messages:      []llm.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}},
		Schema:        llm.Schema{Name: "answer", JSON: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`), Strict: true},
		PromptVersion: "p-7",
	}
}

func completion(content string) string {
	b, _ := json.Marshal(content)
	return `{"id":"chatcmpl-1","model":"gpt-4.1-mini-2025-04-14","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":` + string(b) + `}}],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}`
}

type answer struct {
	Text string `json:"text"`
}

func (a *answer) Validate() error {
	if a.Text == "" {
		return errors.New("text is empty")
	}
	return nil
}

func TestCompleteJSON(t *testing.T) {
	t.Parallel()
	var got map[string]any
	c := fake(t, func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "/v1/chat/completions", r.URL.Path)
		assert.Equal(t, http.MethodPost, r.Method)
		assert.Equal(t, "Bearer "+secret, r.Header.Get("Authorization"))
		assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
		body, _ := io.ReadAll(r.Body)
		require.NoError(t, json.Unmarshal(body, &got))
		_, _ = io.WriteString(w, completion(`{"text":"hello"}`))
	})
	var out answer
	resp, err := c.CompleteJSON(context.Background(), request(), &out)
	require.NoError(t, err)
	assert.Equal(t, "hello", out.Text)
	assert.Equal(t, llm.Usage{PromptTokens: 11, CompletionTokens: 7, TotalTokens: 18}, resp.Usage)
	assert.Equal(t, "p-7", resp.PromptVersion)
	assert.Equal(t, "gpt-4.1-mini-2025-04-14", resp.Model)
	assert.Equal(t, "chatcmpl-1", resp.ID)
	assert.Equal(t, "stop", resp.FinishReason)

	assert.Equal(t, llm.DefaultModel, got["model"], "gpt-4.1-mini by default")
	rf := got["response_format"].(map[string]any)
	assert.Equal(t, "json_schema", rf["type"])
	js := rf["json_schema"].(map[string]any)
	assert.Equal(t, "answer", js["name"])
	assert.Equal(t, true, js["strict"])
	assert.Equal(t, "object", js["schema"].(map[string]any)["type"])
	assert.Len(t, got["messages"], 2)
}

func TestErrors(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		status     int
		header     map[string]string
		body       string
		class      failure.Class
		retryAfter time.Duration
		contains   string
	}{
		"429 with Retry-After seconds": {429, map[string]string{"Retry-After": "7"}, `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`, failure.Transient, 7 * time.Second, "rate_limit_exceeded"},
		"429 with retry-after-ms":      {429, map[string]string{"retry-after-ms": "1500"}, `{}`, failure.Transient, 1500 * time.Millisecond, "HTTP 429"},
		"503":                          {503, nil, `upstream overloaded`, failure.Transient, 0, "HTTP 503"},
		"500 with absurd Retry-After":  {500, map[string]string{"Retry-After": "99999"}, `{}`, failure.Transient, 15 * time.Minute, "HTTP 500"},
		"408":                          {408, nil, ``, failure.Transient, 0, "HTTP 408"},
		"400":                          {400, nil, `{"error":{"message":"Invalid schema for response_format","type":"invalid_request_error","code":null}}`, failure.Permanent, 0, "Invalid schema"},
		"401":                          {401, nil, `{"error":{"message":"Incorrect API key provided: sk-te***ged","type":"invalid_request_error","code":"invalid_api_key"}}`, failure.Permanent, 0, "invalid_api_key"},
		"404 unknown model":            {404, nil, `{"error":{"message":"The model does not exist","code":"model_not_found"}}`, failure.Permanent, 0, "model_not_found"},
		"200 not a JSON object":        {200, nil, completion(`here you go: {"text":"x"}`), failure.Permanent, 0, "not a JSON object"},
		"200 schema-invalid":           {200, nil, completion(`{"txt":"x"}`), failure.Permanent, 0, "unknown field"},
		"200 fails Validate":           {200, nil, completion(`{"text":""}`), failure.Permanent, 0, "text is empty"},
		"200 truncated":                {200, nil, `{"choices":[{"finish_reason":"length","message":{"content":"{\"text\":\"x"}}]}`, failure.Permanent, 0, "token limit"},
		"200 refusal":                  {200, nil, `{"choices":[{"finish_reason":"stop","message":{"content":null,"refusal":"I can't help"}}]}`, failure.Permanent, 0, "refused"},
		"200 no choices":               {200, nil, `{"choices":[]}`, failure.Permanent, 0, "no choices"},
		"200 garbage":                  {200, nil, `<html>proxy</html>`, failure.Transient, 0, "decode response"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cl := fake(t, func(w http.ResponseWriter, _ *http.Request) {
				for k, v := range c.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(c.status)
				_, _ = io.WriteString(w, c.body)
			})
			var out answer
			resp, err := cl.CompleteJSON(context.Background(), request(), &out)
			require.Error(t, err)
			assert.Equal(t, c.class, failure.Of(err), "%v", err)
			assert.Equal(t, c.retryAfter, failure.RetryAfter(err))
			assert.Contains(t, err.Error(), c.contains)
			assert.NotContains(t, err.Error(), secret)
			if c.status/100 == 2 && c.class == failure.Permanent && c.contains != "no choices" {
				assert.ErrorIs(t, err, llm.ErrInvalidOutput)
			}
			if c.status == 429 {
				var apiErr *llm.APIError
				require.ErrorAs(t, err, &apiErr)
				assert.Equal(t, 429, apiErr.StatusCode)
			}
			_ = resp
		})
	}
}

func TestRetryAfterHTTPDate(t *testing.T) {
	t.Parallel()
	cl := fake(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", time.Now().Add(90*time.Second).UTC().Format(http.TimeFormat))
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	_, err := cl.Complete(context.Background(), request())
	require.Error(t, err)
	d := failure.RetryAfter(err)
	assert.Greater(t, d, 80*time.Second)
	assert.LessOrEqual(t, d, 91*time.Second)
}

func TestTimeoutIsTransient(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(time.Second):
		}
	}))
	t.Cleanup(srv.Close)
	c, err := llm.New(llm.Config{BaseURL: srv.URL, LookupEnv: env("OPENAI_API_KEY"), Timeout: 200 * time.Millisecond})
	require.NoError(t, err)
	start := time.Now()
	_, err = c.Complete(context.Background(), request())
	require.Error(t, err)
	assert.Less(t, time.Since(start), 3*time.Second)
	assert.Equal(t, failure.Transient, failure.Of(err))
	assert.NotContains(t, err.Error(), secret)
}

func TestConnectionRefusedIsTransient(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c, err := llm.New(llm.Config{BaseURL: url, LookupEnv: env("OPENAI_API_KEY")})
	require.NoError(t, err)
	_, err = c.Complete(context.Background(), request())
	require.Error(t, err)
	assert.Equal(t, failure.Transient, failure.Of(err))
}

func TestNew(t *testing.T) {
	t.Parallel()
	_, err := llm.New(llm.Config{LookupEnv: env("OTHER")})
	assert.ErrorContains(t, err, "OPENAI_API_KEY is empty")
	c, err := llm.New(llm.Config{LookupEnv: env("OTHER"), AllowNoKey: true})
	require.NoError(t, err)
	assert.Equal(t, llm.DefaultModel, c.Model())
	c, err = llm.New(llm.Config{APIKeyEnv: "MY_KEY", LookupEnv: env("MY_KEY"), Model: "m"})
	require.NoError(t, err)
	assert.NotContains(t, c.String(), secret)
	assert.NotContains(t, fmt.Sprintf("%v %+v", c, c), secret)
	_, err = llm.New(llm.Config{BaseURL: "ftp://x", LookupEnv: env("OPENAI_API_KEY")})
	assert.ErrorContains(t, err, "base url")
	_, err = c.Complete(context.Background(), llm.Request{Schema: request().Schema})
	assert.Equal(t, failure.Permanent, failure.Of(err))
	_, err = c.Complete(context.Background(), llm.Request{Messages: request().Messages})
	assert.Equal(t, failure.Permanent, failure.Of(err))
}

func TestNoKeyNoAuthorizationHeader(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.Empty(t, r.Header.Get("Authorization"))
		_, _ = io.WriteString(w, completion(`{"text":"local"}`))
	}))
	t.Cleanup(srv.Close)
	c, err := llm.New(llm.Config{BaseURL: srv.URL, LookupEnv: env("OTHER"), AllowNoKey: true, Model: "local-model"})
	require.NoError(t, err)
	var out answer
	_, err = c.CompleteJSON(context.Background(), request(), &out)
	require.NoError(t, err)
	assert.Equal(t, "local", out.Text)
}

func TestResponseTooLarge(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, completion(`{"text":"`+strings.Repeat("x", 2000)+`"}`))
	}))
	t.Cleanup(srv.Close)
	c, err := llm.New(llm.Config{BaseURL: srv.URL, LookupEnv: env("OPENAI_API_KEY"), MaxResponseBytes: 1000})
	require.NoError(t, err)
	_, err = c.Complete(context.Background(), request())
	assert.Equal(t, failure.Permanent, failure.Of(err))
}
