// Package llm is a small client for OpenAI-compatible chat completions
// (POST {base}/chat/completions) with structured output: the caller gives a
// JSON schema (response_format json_schema, strict) and gets back the model's
// JSON object, the token usage and the prompt version it asked with.
//
// It is plain net/http on purpose: one endpoint, a few fields, and the error
// classification below are all we need, and the same code then talks to
// OpenAI, Azure-style gateways, vLLM or a local fake in tests. The official
// SDK would add a large dependency and its own retry loop, which would fight
// the message pipeline's attempt cap.
//
// # Errors
//
// Every error is classified with package failure, so a message handler can
// return it unchanged:
//
//   - transient: HTTP 408, 409, 429 and 5xx, network errors and timeouts. A
//     Retry-After (or retry-after-ms) header becomes failure.AsTransient's
//     retry-after, so the broker does not come back before the server allows.
//   - permanent: any other 4xx (a bad key, a bad request, an unknown model),
//     and output that is not the JSON the schema asks for (truncated, refused,
//     filtered, not decodable into the caller's type, or failing its Validate).
//
// The client never retries by itself: retries belong to the message pipeline,
// where the attempt count and the dead-letter queue live.
//
// The API key is sent in the Authorization header and appears in no error,
// log line or String output.
package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/eventpipe/eventpipe/app/failure"
)

// Defaults.
const (
	DefaultBaseURL   = "https://api.openai.com/v1"
	DefaultModel     = "gpt-4.1-mini"
	DefaultAPIKeyEnv = "OPENAI_API_KEY"
	// DefaultTimeout bounds one request. A long structured report takes tens
	// of seconds; the report queue's visibility (1800 s) leaves ample room.
	DefaultTimeout = 120 * time.Second
	// DefaultMaxResponseBytes bounds what is read of a response body.
	DefaultMaxResponseBytes = 4 << 20
)

// Config configures a Client. Zero values take the defaults.
type Config struct {
	// BaseURL is the API's base, up to and excluding /chat/completions.
	// Default DefaultBaseURL.
	BaseURL string
	// Model is the model asked when a Request names none. Default
	// DefaultModel (gpt-4.1-mini).
	Model string
	// APIKeyEnv names the environment variable holding the API key. Default
	// DefaultAPIKeyEnv (OPENAI_API_KEY). The key itself is never configured
	// in a file.
	APIKeyEnv string
	// LookupEnv reads the environment; default os.LookupEnv (tests inject).
	LookupEnv func(string) (string, bool)
	// AllowNoKey accepts a missing key (local gateways and fakes that need
	// none); otherwise New fails when the variable is empty.
	AllowNoKey bool
	// Timeout bounds one request, response body included. Default
	// DefaultTimeout.
	Timeout time.Duration
	// HTTPClient sends the requests. Default a client with no overall
	// timeout (Timeout applies per request through its context).
	HTTPClient *http.Client
	// MaxResponseBytes bounds what is read of a response. Default 4 MiB.
	MaxResponseBytes int64
}

func (c *Config) setDefaults() {
	if c.BaseURL == "" {
		c.BaseURL = DefaultBaseURL
	}
	c.BaseURL = strings.TrimRight(c.BaseURL, "/")
	if c.Model == "" {
		c.Model = DefaultModel
	}
	if c.APIKeyEnv == "" {
		c.APIKeyEnv = DefaultAPIKeyEnv
	}
	if c.LookupEnv == nil {
		c.LookupEnv = os.LookupEnv
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{}
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = DefaultMaxResponseBytes
	}
}

// Validate reports every problem with a defaulted config.
func (c Config) Validate() error {
	var errs []error
	if !strings.HasPrefix(c.BaseURL, "http://") && !strings.HasPrefix(c.BaseURL, "https://") {
		errs = append(errs, fmt.Errorf("base url %q: want http:// or https://", c.BaseURL))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout must not be negative, got %s", c.Timeout))
	}
	if c.MaxResponseBytes < 0 {
		errs = append(errs, fmt.Errorf("max response bytes must not be negative, got %d", c.MaxResponseBytes))
	}
	return errors.Join(errs...)
}

// Client calls chat completions. It is safe for concurrent use.
type Client struct {
	cfg Config
	key string
}

// New returns a client; it reads the API key from cfg.APIKeyEnv once.
func New(cfg Config) (*Client, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("llm: %w", err)
	}
	key, _ := cfg.LookupEnv(cfg.APIKeyEnv)
	key = strings.TrimSpace(key)
	if key == "" && !cfg.AllowNoKey {
		return nil, fmt.Errorf("llm: no API key: environment variable %s is empty", cfg.APIKeyEnv)
	}
	return &Client{cfg: cfg, key: key}, nil
}

// Model is the model asked when a request names none.
func (c *Client) Model() string { return c.cfg.Model }

// String describes the client without its key.
func (c *Client) String() string {
	return fmt.Sprintf("llm.Client{base=%s model=%s key=%s}", c.cfg.BaseURL, c.cfg.Model, c.cfg.APIKeyEnv)
}

// Message is one chat message.
type Message struct {
	// Role is system, user or assistant.
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Schema is the JSON schema the answer must follow (response_format
// json_schema).
type Schema struct {
	// Name identifies the schema to the model: letters, digits, _ and -.
	Name string
	// Description tells the model what the object is for (optional).
	Description string
	// JSON is the schema itself. With Strict, every object needs
	// "additionalProperties": false and every property in "required".
	JSON json.RawMessage
	// Strict asks the server to enforce the schema exactly.
	Strict bool
}

// Request is one chat completion with structured output.
type Request struct {
	// Model overrides the client's model.
	Model    string
	Messages []Message
	Schema   Schema
	// Temperature, when set, is sent as is.
	Temperature *float64
	// MaxCompletionTokens bounds the answer (0 = the server's default).
	MaxCompletionTokens int
	// PromptVersion identifies the prompt (the caller's versioning of its
	// messages and schema); it is returned with the response so it can be
	// stored beside the output.
	PromptVersion string
}

// Usage is the token usage the server reported.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// Response is a structured answer.
type Response struct {
	// ID is the server's completion id.
	ID string
	// Model is the model that answered (as the server names it).
	Model string
	// Content is the JSON object the model returned.
	Content json.RawMessage
	Usage   Usage
	// PromptVersion is Request.PromptVersion.
	PromptVersion string
	// FinishReason is the choice's finish_reason (stop, …).
	FinishReason string
}

// APIError is an error answer of the server.
type APIError struct {
	StatusCode int
	// Type, Code and Message are the server's error object's fields.
	Type    string
	Code    string
	Message string
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %d", e.StatusCode)
	if e.Type != "" {
		fmt.Fprintf(&b, " %s", e.Type)
	}
	if e.Code != "" {
		fmt.Fprintf(&b, " (%s)", e.Code)
	}
	if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	return b.String()
}

// ErrInvalidOutput is wrapped by the permanent error returned when the
// model's answer is not the JSON object the schema asks for.
var ErrInvalidOutput = errors.New("llm: invalid structured output")

type wireRequest struct {
	Model               string         `json:"model"`
	Messages            []Message      `json:"messages"`
	ResponseFormat      responseFormat `json:"response_format"`
	Temperature         *float64       `json:"temperature,omitempty"`
	MaxCompletionTokens int            `json:"max_completion_tokens,omitempty"`
}

type responseFormat struct {
	Type       string     `json:"type"`
	JSONSchema jsonSchema `json:"json_schema"`
}

type jsonSchema struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema"`
	Strict      bool            `json:"strict"`
}

type wireResponse struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		FinishReason string `json:"finish_reason"`
		Message      struct {
			Content *string `json:"content"`
			Refusal *string `json:"refusal"`
		} `json:"message"`
	} `json:"choices"`
	Usage Usage `json:"usage"`
}

type wireError struct {
	Error struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
	} `json:"error"`
}

// Complete sends req and returns the model's JSON object. See the package
// doc for how errors are classified.
func (c *Client) Complete(ctx context.Context, req Request) (Response, error) {
	if len(req.Messages) == 0 {
		return Response{}, failure.Permanentf("llm: request without messages")
	}
	if req.Schema.Name == "" || len(req.Schema.JSON) == 0 {
		return Response{}, failure.Permanentf("llm: request without a response schema")
	}
	model := req.Model
	if model == "" {
		model = c.cfg.Model
	}
	body, err := json.Marshal(wireRequest{
		Model:    model,
		Messages: req.Messages,
		ResponseFormat: responseFormat{Type: "json_schema", JSONSchema: jsonSchema{
			Name: req.Schema.Name, Description: req.Schema.Description, Schema: req.Schema.JSON, Strict: req.Schema.Strict,
		}},
		Temperature:         req.Temperature,
		MaxCompletionTokens: req.MaxCompletionTokens,
	})
	if err != nil {
		return Response{}, failure.AsPermanent(fmt.Errorf("llm: encode request: %w", err))
	}

	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.BaseURL+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return Response{}, failure.AsPermanent(fmt.Errorf("llm: build request: %w", err))
	}
	httpReq.Header.Set("Content-Type", "application/json")
	httpReq.Header.Set("Accept", "application/json")
	if c.key != "" {
		httpReq.Header.Set("Authorization", "Bearer "+c.key)
	}

	resp, err := c.cfg.HTTPClient.Do(httpReq)
	if err != nil {
		// Network errors and timeouts: worth another try. The URL in a
		// *url.Error carries no key (it is in a header).
		return Response{}, failure.AsTransient(fmt.Errorf("llm: %s model %s: %w", c.cfg.BaseURL, model, err), 0)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, c.cfg.MaxResponseBytes+1))
	if err != nil {
		return Response{}, failure.AsTransient(fmt.Errorf("llm: model %s: read response: %w", model, err), 0)
	}
	if int64(len(raw)) > c.cfg.MaxResponseBytes {
		return Response{}, failure.Permanentf("llm: model %s: response larger than %d bytes", model, c.cfg.MaxResponseBytes)
	}
	if resp.StatusCode/100 != 2 {
		return Response{}, classifyStatus(resp, raw, model)
	}

	var wr wireResponse
	if err := json.Unmarshal(raw, &wr); err != nil {
		// A 2xx that is not JSON is a broken proxy more often than a
		// broken model: transient.
		return Response{}, failure.AsTransient(fmt.Errorf("llm: model %s: decode response: %w", model, err), 0)
	}
	out := Response{ID: wr.ID, Model: wr.Model, Usage: wr.Usage, PromptVersion: req.PromptVersion}
	if out.Model == "" {
		out.Model = model
	}
	if len(wr.Choices) == 0 {
		return out, failure.AsPermanent(fmt.Errorf("%w: model %s: no choices", ErrInvalidOutput, model))
	}
	ch := wr.Choices[0]
	out.FinishReason = ch.FinishReason
	switch {
	case ch.Message.Refusal != nil && *ch.Message.Refusal != "":
		return out, failure.AsPermanent(fmt.Errorf("%w: model %s refused: %s", ErrInvalidOutput, model, *ch.Message.Refusal))
	case ch.FinishReason == "length":
		return out, failure.AsPermanent(fmt.Errorf("%w: model %s: answer cut at the token limit", ErrInvalidOutput, model))
	case ch.FinishReason == "content_filter":
		return out, failure.AsPermanent(fmt.Errorf("%w: model %s: answer withheld by the content filter", ErrInvalidOutput, model))
	case ch.Message.Content == nil:
		return out, failure.AsPermanent(fmt.Errorf("%w: model %s: empty answer", ErrInvalidOutput, model))
	}
	content := bytes.TrimSpace([]byte(*ch.Message.Content))
	if len(content) == 0 || content[0] != '{' || !json.Valid(content) {
		return out, failure.AsPermanent(fmt.Errorf("%w: model %s: answer is not a JSON object", ErrInvalidOutput, model))
	}
	out.Content = json.RawMessage(content)
	return out, nil
}

// Validator is implemented by output types that check themselves after
// decoding (ranges, enums, lengths the schema cannot express).
type Validator interface{ Validate() error }

// CompleteJSON is Complete followed by a strict decode of the answer into out
// (unknown fields rejected) and out's Validate when it has one. An answer
// that fails either is a permanent error wrapping ErrInvalidOutput; the
// response (usage included) is returned in every case.
func (c *Client) CompleteJSON(ctx context.Context, req Request, out any) (Response, error) {
	resp, err := c.Complete(ctx, req)
	if err != nil {
		return resp, err
	}
	dec := json.NewDecoder(bytes.NewReader(resp.Content))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		return resp, failure.AsPermanent(fmt.Errorf("%w: model %s: %w", ErrInvalidOutput, resp.Model, err))
	}
	if v, ok := out.(Validator); ok {
		if err := v.Validate(); err != nil {
			return resp, failure.AsPermanent(fmt.Errorf("%w: model %s: %w", ErrInvalidOutput, resp.Model, err))
		}
	}
	return resp, nil
}

func classifyStatus(resp *http.Response, raw []byte, model string) error {
	apiErr := &APIError{StatusCode: resp.StatusCode}
	var we wireError
	if json.Unmarshal(raw, &we) == nil {
		apiErr.Type = we.Error.Type
		apiErr.Message = truncate(we.Error.Message, 500)
		if len(we.Error.Code) > 0 && string(we.Error.Code) != "null" {
			var s string
			if json.Unmarshal(we.Error.Code, &s) == nil {
				apiErr.Code = s
			} else {
				apiErr.Code = string(we.Error.Code)
			}
		}
	}
	err := fmt.Errorf("llm: model %s: %w", model, apiErr)
	switch code := resp.StatusCode; {
	case code == http.StatusTooManyRequests, code == http.StatusRequestTimeout, code == http.StatusConflict, code >= 500:
		return failure.AsTransient(err, retryAfter(resp.Header, time.Now()))
	default:
		return failure.AsPermanent(err)
	}
}

// maxRetryAfter caps what a server may ask for: past it the broker's own
// backoff and visibility decide.
const maxRetryAfter = 15 * time.Minute

// retryAfter reads retry-after-ms (OpenAI's) or Retry-After (seconds or an
// HTTP date); 0 when absent or unreadable.
func retryAfter(h http.Header, now time.Time) time.Duration {
	var d time.Duration
	if ms, err := strconv.ParseFloat(h.Get("Retry-After-Ms"), 64); err == nil && ms > 0 {
		d = time.Duration(ms * float64(time.Millisecond))
	} else if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 {
			d = time.Duration(s * float64(time.Second))
		} else if t, err := http.ParseTime(v); err == nil {
			d = t.Sub(now)
		}
	}
	if d < 0 {
		return 0
	}
	return min(d, maxRetryAfter)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
