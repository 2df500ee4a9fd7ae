// Package internalapi is StackUp Core's internal API (the StackUp RabbitMQ
// messaging contract, §10 and §10.1): the REST endpoints the AI server calls
// beside the queues, each authenticated by X-Internal-API-Key.
//
//   - GET /api/internal/users/{userId}/github-token lends the user's GitHub
//     token for an analysis (stored AES-256-GCM encrypted; never in a message,
//     never logged). PUT on the same path is Core's side: it stores one.
//   - PUT /api/internal/documents/{documentId}/embeddings replaces a
//     document's chunks and embeddings; the first uploader owns the document.
//     DELETE /api/internal/documents/{documentId}?userId= soft-deletes it.
//   - POST /api/internal/embeddings/search: cosine top-K, or with queryText a
//     hybrid of cosine and full-text ranks fused by reciprocal rank fusion,
//     always within the caller's active documents (§10.1).
//   - POST /api/internal/ai-logs records one LLM call (fire-and-forget).
//
// API holds the rules, Handler serves them over HTTP, Client calls them (the
// AI worker's side), Store keeps the state (Postgres or Memory). Decision
// 0024 says why embeddings live in a real[] column and how ranks are fused.
package internalapi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
)

// Limits of one request.
const (
	// DefaultTopK is a search's topK when the request gives none.
	DefaultTopK = 5
	// MaxTopK is the largest topK.
	MaxTopK = 100
	// MaxDocumentIDs bounds a search's documentIds.
	MaxDocumentIDs = 1000
	// MaxTokenLen bounds a stored GitHub token.
	MaxTokenLen = 4096
	// RRFK is reciprocal rank fusion's constant: a hit at rank r (1-based)
	// adds 1/(RRFK+r) (Cormack et al.'s 60).
	RRFK = 60
)

// ErrTokensOff is a token operation without an encryption key
// (stackup.token_key_env unset).
var ErrTokensOff = errors.New("github tokens are off: no token encryption key configured")

// InputError is a request the caller must fix (HTTP 400).
type InputError struct{ Msg string }

func (e *InputError) Error() string { return e.Msg }

func badInput(format string, args ...any) error {
	return &InputError{Msg: fmt.Sprintf(format, args...)}
}

// Config configures the API.
type Config struct {
	Store Store
	// Sealer encrypts GitHub tokens; nil turns the token operations off
	// (ErrTokensOff).
	Sealer *Sealer
	// Dimension is every embedding's length (stackup.embedding_dimension).
	Dimension int
	// Now is the clock (token expiry); time.Now when nil.
	Now func() time.Time
}

// API is the internal API's rules, shared by its HTTP handler and commands.
type API struct{ cfg Config }

// New returns the API.
func New(cfg Config) (*API, error) {
	if cfg.Store == nil {
		return nil, errors.New("stackup internal API: no store")
	}
	if cfg.Dimension < 1 {
		return nil, fmt.Errorf("stackup internal API: embedding dimension %d, want at least 1", cfg.Dimension)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &API{cfg: cfg}, nil
}

// GitHubToken is a user's token, in the clear: what the AI server borrows.
type GitHubToken struct {
	UserID    int64
	Token     string
	ExpiresAt time.Time
}

// SetGitHubToken stores the user's token encrypted, replacing any other,
// until expiresAt.
func (a *API) SetGitHubToken(ctx context.Context, userID int64, token string, expiresAt time.Time) error {
	if a.cfg.Sealer == nil {
		return ErrTokensOff
	}
	switch {
	case userID <= 0:
		return badInput("userId must be a positive number")
	case token == "":
		return badInput("token is required")
	case len(token) > MaxTokenLen:
		return badInput("token is longer than %d bytes", MaxTokenLen)
	case strings.IndexFunc(token, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return badInput("token must not contain spaces or control characters")
	case !expiresAt.After(a.cfg.Now()):
		return badInput("expiresAt must be in the future")
	}
	sealed, err := a.cfg.Sealer.Seal(userID, token)
	if err != nil {
		return err
	}
	return a.cfg.Store.PutGitHubToken(ctx, userID, SealedToken{Ciphertext: sealed, ExpiresAt: expiresAt.UTC()})
}

// GitHubToken returns the user's token; ErrNotFound when there is none or it
// has expired.
func (a *API) GitHubToken(ctx context.Context, userID int64) (GitHubToken, error) {
	if a.cfg.Sealer == nil {
		return GitHubToken{}, ErrTokensOff
	}
	if userID <= 0 {
		return GitHubToken{}, badInput("userId must be a positive number")
	}
	st, err := a.cfg.Store.GitHubToken(ctx, userID)
	if err != nil {
		return GitHubToken{}, err
	}
	if !st.ExpiresAt.After(a.cfg.Now()) {
		return GitHubToken{}, fmt.Errorf("github token of user %d expired at %s: %w", userID, st.ExpiresAt.Format(time.RFC3339), ErrNotFound)
	}
	token, err := a.cfg.Sealer.Open(userID, st.Ciphertext)
	if err != nil {
		return GitHubToken{}, fmt.Errorf("github token of user %d: %w", userID, err)
	}
	return GitHubToken{UserID: userID, Token: token, ExpiresAt: st.ExpiresAt}, nil
}

// checkEmbedding refuses an embedding of another dimension or of length 0
// (cosine is undefined there).
func (a *API) checkEmbedding(what string, e []float32) error {
	if len(e) != a.cfg.Dimension {
		return badInput("%s has %d dimensions, want %d", what, len(e), a.cfg.Dimension)
	}
	if norm(e) == 0 {
		return badInput("%s is all zeros", what)
	}
	return nil
}

// PutEmbeddings replaces the document's chunks (idempotent: the same upload
// twice leaves the same chunks) and returns how many it holds now. The first
// upload of a document makes userID its owner; ErrForeignDocument for
// another user's, ErrDeletedDocument for a deleted one.
func (a *API) PutEmbeddings(ctx context.Context, userID, documentID int64, chunks []Chunk) (int, error) {
	if userID <= 0 {
		return 0, badInput("userId must be a positive number")
	}
	if documentID <= 0 {
		return 0, badInput("documentId must be a positive number")
	}
	seen := make(map[int]bool, len(chunks))
	for i, c := range chunks {
		if c.Index < 0 {
			return 0, badInput("chunks[%d].index must not be negative", i)
		}
		if seen[c.Index] {
			return 0, badInput("chunks[%d].index %d appears twice", i, c.Index)
		}
		seen[c.Index] = true
		if err := a.checkEmbedding(fmt.Sprintf("chunks[%d].embedding", i), c.Embedding); err != nil {
			return 0, err
		}
	}
	if err := a.cfg.Store.ReplaceChunks(ctx, userID, documentID, chunks); err != nil {
		return 0, err
	}
	return len(chunks), nil
}

// DeleteDocument soft-deletes the user's document: its chunks are never
// searched again and it takes no new ones.
func (a *API) DeleteDocument(ctx context.Context, userID, documentID int64) error {
	if userID <= 0 {
		return badInput("userId must be a positive number")
	}
	if documentID <= 0 {
		return badInput("documentId must be a positive number")
	}
	return a.cfg.Store.DeleteDocument(ctx, userID, documentID)
}

// SearchRequest is a search (§10.1).
type SearchRequest struct {
	// UserID is required: the search never leaves this user's active
	// documents.
	UserID int64
	// DocumentIDs, when not empty, narrows the search to these of the user's
	// documents; ids of other users' documents find nothing.
	DocumentIDs    []int64
	QueryEmbedding []float32
	// QueryText, when not blank, makes the search hybrid.
	QueryText string
	// TopK is how many results at most; DefaultTopK when 0.
	TopK int
}

// Search returns the best chunks: by cosine similarity, or with QueryText by
// the reciprocal rank fusion of the cosine and full-text rankings (each
// taken over a window of candidates, see fusionWindow).
func (a *API) Search(ctx context.Context, req SearchRequest) ([]Hit, error) {
	if req.UserID <= 0 {
		return nil, badInput("userId is required (a positive number)")
	}
	if req.TopK == 0 {
		req.TopK = DefaultTopK
	}
	if req.TopK < 0 || req.TopK > MaxTopK {
		return nil, badInput("topK must be 1..%d", MaxTopK)
	}
	if len(req.DocumentIDs) > MaxDocumentIDs {
		return nil, badInput("documentIds has more than %d ids", MaxDocumentIDs)
	}
	if err := a.checkEmbedding("queryEmbedding", req.QueryEmbedding); err != nil {
		return nil, err
	}
	scope := Scope{UserID: req.UserID, DocumentIDs: req.DocumentIDs}
	if strings.TrimSpace(req.QueryText) == "" {
		return a.cfg.Store.NearestChunks(ctx, scope, req.QueryEmbedding, req.TopK)
	}
	window := fusionWindow(req.TopK)
	vector, err := a.cfg.Store.NearestChunks(ctx, scope, req.QueryEmbedding, window)
	if err != nil {
		return nil, err
	}
	text, err := a.cfg.Store.MatchingChunks(ctx, scope, req.QueryText, window)
	if err != nil {
		return nil, err
	}
	return Fuse(req.TopK, vector, text), nil
}

// fusionWindow is how many candidates each ranking of a hybrid search
// contributes: four times topK, at least 50, so a chunk ranked modestly by
// both can still win.
func fusionWindow(topK int) int { return max(4*topK, 50) }

// Fuse merges rankings (each best first) by reciprocal rank fusion: a chunk
// scores the sum of 1/(RRFK+rank) over the rankings it appears in. It returns
// the topK best, ties by document id then chunk index, each with its fused
// score.
func Fuse(topK int, rankings ...[]Hit) []Hit {
	type key struct {
		doc   int64
		chunk int
	}
	fused := map[key]*Hit{}
	for _, ranking := range rankings {
		for i, h := range ranking {
			k := key{h.DocumentID, h.ChunkIndex}
			f := fused[k]
			if f == nil {
				f = &Hit{DocumentID: h.DocumentID, ChunkIndex: h.ChunkIndex, Text: h.Text}
				fused[k] = f
			}
			f.Score += 1 / float64(RRFK+i+1)
		}
	}
	out := make([]Hit, 0, len(fused))
	for _, h := range fused {
		out = append(out, *h)
	}
	return best(out, topK)
}

// LogAICall records one LLM call.
func (a *API) LogAICall(ctx context.Context, l AILog) error {
	switch {
	case strings.TrimSpace(l.Model) == "":
		return badInput("model is required")
	case l.PromptTokens < 0 || l.CompletionTokens < 0:
		return badInput("token counts must not be negative")
	case l.LatencyMs < 0:
		return badInput("latencyMs must not be negative")
	case l.UserID != nil && *l.UserID <= 0:
		return badInput("userId must be a positive number")
	}
	return a.cfg.Store.AddAILog(ctx, l)
}
