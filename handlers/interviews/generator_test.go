package interviews_test

import (
	"context"
	"encoding/json"
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
	"github.com/eventpipe/eventpipe/handlers/interviews"
)

func llmClient(t *testing.T, handle http.HandlerFunc) *llm.Client {
	t.Helper()
	srv := httptest.NewServer(handle)
	t.Cleanup(srv.Close)
	c, err := llm.New(llm.Config{BaseURL: srv.URL + "/v1", LookupEnv: func(string) (string, bool) { return "sk-test", true }, Timeout: 2 * time.Second})
	require.NoError(t, err)
	return c
}

func chat(content string) string {
	b, _ := json.Marshal(content)
	return `{"id":"c1","model":"gpt-4.1-mini","choices":[{"finish_reason":"stop","message":{"content":` + string(b) + `}}],"usage":{"prompt_tokens":900,"completion_tokens":300,"total_tokens":1200}}`
}

const modelAnswer = `{"overallScore":78,"recommendation":"hire","summary":"Clear on ledgers and retries.",
 "skillAssessments":[{"skill":"system design","score":4,"evidence":"append-only ledger"}],
 "questionAnalysis":[{"question":"Design a ledger","score":4,"strengths":"transactions","concerns":"none"}]}`

func TestLLMGenerator(t *testing.T) {
	t.Parallel()
	var sent struct {
		Model    string        `json:"model"`
		Messages []llm.Message `json:"messages"`
	}
	c := llmClient(t, func(w http.ResponseWriter, r *http.Request) {
		require.NoError(t, json.NewDecoder(r.Body).Decode(&sent))
		_, _ = io.WriteString(w, chat(modelAnswer))
	})
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	g := interviews.LLMGenerator{Client: c, Now: func() time.Time { return at }}
	got, err := g.Generate(context.Background(), interviews.Interview{ID: ivID, DurationSeconds: 600, Transcript: substantive})
	require.NoError(t, err)
	assert.Equal(t, 78, got.OverallScore)
	assert.Equal(t, interviews.RecommendHire, got.Recommendation)
	assert.Len(t, got.SkillAssessments, 1)
	assert.Len(t, got.QuestionAnalysis, 1)
	assert.Equal(t, interviews.Generation{Model: "gpt-4.1-mini", PromptVersion: interviews.PromptVersion,
		PromptTokens: 900, CompletionTokens: 300, TotalTokens: 1200, GeneratedAt: at}, got.Generation)
	assert.Equal(t, "gpt-4.1-mini", sent.Model)
	require.Len(t, sent.Messages, 2)
	assert.Contains(t, sent.Messages[1].Content, substantive[0].Answer)
	assert.Contains(t, sent.Messages[1].Content, "600 seconds")
}

func TestLLMGeneratorRejectsBadOutput(t *testing.T) {
	t.Parallel()
	for name, answer := range map[string]string{
		"score out of range":     strings.Replace(modelAnswer, "78", "780", 1),
		"unknown recommendation": strings.Replace(modelAnswer, `"hire"`, `"maybe"`, 1),
		"skill score 0":          strings.Replace(modelAnswer, `"score":4,"evidence"`, `"score":0,"evidence"`, 1),
		"extra field":            strings.Replace(modelAnswer, "{", `{"salary":1,`, 1),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := llmClient(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, chat(answer)) })
			_, err := interviews.LLMGenerator{Client: c}.Generate(context.Background(), interviews.Interview{ID: ivID, Transcript: substantive})
			require.Error(t, err)
			assert.ErrorIs(t, err, llm.ErrInvalidOutput)
			assert.Equal(t, failure.Permanent, failure.Of(err))
		})
	}
}
