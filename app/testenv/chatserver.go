package testenv

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"
)

// ChatRequest is what ChatServer reads of one chat-completions request: the
// messages and the name of the response schema (response_format
// json_schema.name), which says what kind of answer is expected.
type ChatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	ResponseFormat struct {
		JSONSchema struct {
			Name string `json:"name"`
		} `json:"json_schema"`
	} `json:"response_format"`
}

// User is the content of the request's last user message ("" when none).
func (r ChatRequest) User() string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return r.Messages[i].Content
		}
	}
	return ""
}

// ChatAnswer is the model's answer to one request: Content (a JSON object,
// as structured output returns it), or a Refusal, or an HTTP Status other
// than 200 (a 5xx is a transient failure for app/llm).
type ChatAnswer struct {
	Content string
	Refusal string
	Status  int
}

// ChatServer is a local OpenAI-compatible chat-completions server (POST
// /v1/chat/completions) for tests and the chaos harness: it answers after
// Delay, with Answer's answer, and counts the calls. A caller that gives up
// (its timeout, a killed process) ends the wait at once.
type ChatServer struct {
	// URL is the base URL to configure as llm.base_url (…/v1).
	URL string

	srv       *httptest.Server
	calls     atomic.Int64
	cancelled atomic.Int64
	mu        sync.Mutex
	delay     func(ChatRequest) time.Duration
	answer    func(ChatRequest) ChatAnswer
}

// NewChatServer starts a server that waits delay(req) before answering
// answer(req). Close it when done.
func NewChatServer(delay func(ChatRequest) time.Duration, answer func(ChatRequest) ChatAnswer) *ChatServer {
	s := &ChatServer{delay: delay, answer: answer}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL + "/v1"
	return s
}

// SetDelay replaces the delay function (a slow window of a test).
func (s *ChatServer) SetDelay(delay func(ChatRequest) time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = delay
}

// Calls is how many requests arrived; Cancelled how many of them the caller
// abandoned before the answer.
func (s *ChatServer) Calls() (calls, cancelled int64) { return s.calls.Load(), s.cancelled.Load() }

// Close stops the server.
func (s *ChatServer) Close() { s.srv.Close() }

func (s *ChatServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.NotFound(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	var req ChatRequest
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":{"message":"request is not JSON","type":"invalid_request_error"}}`)
		return
	}
	s.calls.Add(1)
	s.mu.Lock()
	delay, answer := s.delay, s.answer
	s.mu.Unlock()
	t := time.NewTimer(delay(req))
	defer t.Stop()
	select {
	case <-r.Context().Done():
		s.cancelled.Add(1)
		return
	case <-t.C:
	}
	a := answer(req)
	if a.Status != 0 && a.Status != http.StatusOK {
		w.WriteHeader(a.Status)
		_, _ = io.WriteString(w, `{"error":{"message":"fake model error","type":"server_error"}}`)
		return
	}
	msg := map[string]any{"role": "assistant", "content": nil}
	if a.Refusal != "" {
		msg["refusal"] = a.Refusal
	} else {
		msg["content"] = a.Content
	}
	model := req.Model
	if model == "" {
		model = "fake-model"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-fake", "object": "chat.completion", "model": model,
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "message": msg}},
		"usage":   map[string]int{"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
	})
}
