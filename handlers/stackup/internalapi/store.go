package internalapi

import (
	"context"
	"errors"
	"math"
	"strings"
	"time"
	"unicode"
)

// Errors the stores return; the HTTP handler maps them to statuses.
var (
	// ErrNotFound is a document or token that does not exist.
	ErrNotFound = errors.New("not found")
	// ErrForeignDocument is a document another user owns.
	ErrForeignDocument = errors.New("document belongs to another user")
	// ErrDeletedDocument is a soft-deleted document: it takes no new chunks.
	ErrDeletedDocument = errors.New("document is deleted")
)

// Chunk is one piece of a document's text with its embedding.
type Chunk struct {
	Index     int
	Text      string
	Embedding []float32
}

// Scope is what one search may read (§10.1): the user's active (not
// soft-deleted) documents, narrowed to DocumentIDs when it is not empty.
// Every store applies both conditions in the query itself, so no input widens
// a search beyond its caller's documents: an empty intersection finds
// nothing.
type Scope struct {
	UserID int64
	// DocumentIDs, when not empty, keeps only these of the user's documents.
	DocumentIDs []int64
}

// Hit is a chunk a search found, with its score: the cosine similarity for a
// vector search, ts_rank (Postgres) or the query terms' occurrences (memory)
// for a text search, the reciprocal-rank-fusion score for a hybrid one.
type Hit struct {
	DocumentID int64
	ChunkIndex int
	Text       string
	Score      float64
}

// EmbeddingStore keeps documents' chunks and embeddings and searches them.
// Postgres (a real[] column, cosine in SQL) and Memory implement it with one
// test suite; a pgvector store would implement it too (decision 0024).
type EmbeddingStore interface {
	// ReplaceChunks makes chunks the document's only chunks, creating the
	// document owned by userID when it does not exist. ErrForeignDocument
	// when another user owns it, ErrDeletedDocument when it is deleted.
	ReplaceChunks(ctx context.Context, userID, documentID int64, chunks []Chunk) error
	// DeleteDocument soft-deletes the user's document (again: no error).
	// ErrNotFound when it does not exist, ErrForeignDocument when another
	// user owns it.
	DeleteDocument(ctx context.Context, userID, documentID int64) error
	// NearestChunks returns up to limit chunks in scope by cosine similarity
	// to query (non-zero, the stored dimension), best first; ties by
	// document id, then chunk index.
	NearestChunks(ctx context.Context, scope Scope, query []float32, limit int) ([]Hit, error)
	// MatchingChunks returns up to limit chunks in scope that contain at
	// least one of text's terms, best full-text rank first; ties as above.
	MatchingChunks(ctx context.Context, scope Scope, text string, limit int) ([]Hit, error)
}

// SealedToken is a user's GitHub token as stored: encrypted (Sealer).
type SealedToken struct {
	Ciphertext []byte
	ExpiresAt  time.Time
}

// TokenStore keeps users' GitHub tokens, encrypted by the caller.
type TokenStore interface {
	// PutGitHubToken stores (or replaces) the user's token.
	PutGitHubToken(ctx context.Context, userID int64, t SealedToken) error
	// GitHubToken returns the user's token, expired or not; ErrNotFound
	// when there is none.
	GitHubToken(ctx context.Context, userID int64) (SealedToken, error)
}

// AILog is one LLM call of the AI server (§10: ai_request_logs).
type AILog struct {
	UserID           *int64
	Model            string
	RequestType      string
	TraceID          string
	PromptTokens     int
	CompletionTokens int
	LatencyMs        int64
	Success          bool
}

// AILogStore keeps AI logs.
type AILogStore interface {
	AddAILog(ctx context.Context, l AILog) error
}

// Store is all the internal API keeps.
type Store interface {
	EmbeddingStore
	TokenStore
	AILogStore
}

// norm is v's Euclidean length, in float64 as both stores compute it.
func norm(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

// terms splits text into lower-case words the way PostgreSQL's 'simple'
// text-search configuration does, near enough: runs of letters and digits.
func terms(text string) []string {
	return strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
}
