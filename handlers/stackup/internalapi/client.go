package internalapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client calls Core's internal API: what the AI server's RAG and repository
// analysis use (§10). Per the contract a failed search or AI log is not
// fatal to the caller: RAG falls back to no context, a lost log is ignored.
type Client struct {
	// BaseURL is the API's root, e.g. http://127.0.0.1:8081.
	BaseURL string
	// APIKey is sent as X-Internal-API-Key.
	APIKey string
	// HTTP is the client used; one with a 10 s timeout when nil.
	HTTP *http.Client
}

// APIError is an answer other than the call's success status.
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("stackup internal API: %d %s: %s", e.Status, e.Code, e.Message)
}

// Is makes a 404 match ErrNotFound, a 403 ErrForeignDocument and a 410
// ErrDeletedDocument, as the API's own errors do.
func (e *APIError) Is(target error) bool {
	switch e.Status {
	case http.StatusNotFound:
		return target == ErrNotFound
	case http.StatusForbidden:
		return target == ErrForeignDocument
	case http.StatusGone:
		return target == ErrDeletedDocument
	}
	return false
}

var defaultHTTP = &http.Client{Timeout: 10 * time.Second}

// do sends body (JSON, when not nil) and decodes a want-status answer into
// out (when not nil).
func (c *Client) do(ctx context.Context, method, path string, body any, want int, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("stackup internal API %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, rd)
	if err != nil {
		return fmt.Errorf("stackup internal API %s %s: %w", method, path, err)
	}
	req.Header.Set(KeyHeader, c.APIKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = defaultHTTP
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("stackup internal API %s %s: %w", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != want {
		var e errorJSON
		_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&e)
		return &APIError{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message}
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("stackup internal API %s %s: decode the answer: %w", method, path, err)
	}
	return nil
}

// GitHubToken borrows the user's GitHub token; an error matching
// ErrNotFound when the user has none (or it expired).
func (c *Client) GitHubToken(ctx context.Context, userID int64) (GitHubToken, error) {
	var t tokenJSON
	if err := c.do(ctx, http.MethodGet, "/api/internal/users/"+strconv.FormatInt(userID, 10)+"/github-token", nil, http.StatusOK, &t); err != nil {
		return GitHubToken{}, err
	}
	return GitHubToken(t), nil
}

// SetGitHubToken stores the user's token until expiresAt (Core's side).
func (c *Client) SetGitHubToken(ctx context.Context, userID int64, token string, expiresAt time.Time) error {
	return c.do(ctx, http.MethodPut, "/api/internal/users/"+strconv.FormatInt(userID, 10)+"/github-token",
		setTokenJSON{Token: token, ExpiresAt: &expiresAt}, http.StatusNoContent, nil)
}

// PutEmbeddings replaces the document's chunks and returns the chunk count
// Core reports.
func (c *Client) PutEmbeddings(ctx context.Context, userID, documentID int64, chunks []Chunk) (int, error) {
	wire := make([]chunkJSON, len(chunks))
	for i, ch := range chunks {
		wire[i] = chunkJSON(ch)
	}
	var out embeddingsResultJSON
	if err := c.do(ctx, http.MethodPut, "/api/internal/documents/"+strconv.FormatInt(documentID, 10)+"/embeddings",
		embeddingsJSON{UserID: userID, Chunks: &wire}, http.StatusOK, &out); err != nil {
		return 0, err
	}
	return out.ChunkCount, nil
}

// DeleteDocument soft-deletes the user's document.
func (c *Client) DeleteDocument(ctx context.Context, userID, documentID int64) error {
	return c.do(ctx, http.MethodDelete, "/api/internal/documents/"+strconv.FormatInt(documentID, 10)+"?userId="+
		url.QueryEscape(strconv.FormatInt(userID, 10)), nil, http.StatusNoContent, nil)
}

// Search searches the user's documents. A caller without a user id must not
// call it (§10.1: the AI skips the search and uses no context).
func (c *Client) Search(ctx context.Context, req SearchRequest) ([]Hit, error) {
	if req.UserID <= 0 {
		return nil, errors.New("stackup internal API search: no user id (skip the search, §10.1)")
	}
	var out searchResultJSON
	if err := c.do(ctx, http.MethodPost, "/api/internal/embeddings/search", searchJSON(req), http.StatusOK, &out); err != nil {
		return nil, err
	}
	hits := make([]Hit, len(out.Results))
	for i, r := range out.Results {
		hits[i] = Hit(r)
	}
	return hits, nil
}

// LogAICall records one LLM call. The contract calls it fire-and-forget:
// callers log or ignore the error, never fail their work on it.
func (c *Client) LogAICall(ctx context.Context, l AILog) error {
	success := l.Success
	return c.do(ctx, http.MethodPost, "/api/internal/ai-logs", aiLogJSON{UserID: l.UserID, Model: l.Model, RequestType: l.RequestType,
		TraceID: l.TraceID, PromptTokens: l.PromptTokens, CompletionTokens: l.CompletionTokens, LatencyMs: l.LatencyMs, Success: &success},
		http.StatusAccepted, nil)
}
