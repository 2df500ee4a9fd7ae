package internalapi

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
)

// Memory is the Store of the embedded mode (no database): Postgres's twin,
// passing the same test suite. Its full-text rank counts the query terms'
// occurrences where Postgres uses ts_rank; both only order the text side of
// a hybrid search.
type Memory struct {
	mu     sync.Mutex
	docs   map[int64]*memoryDoc
	tokens map[int64]SealedToken
	logs   []AILog
}

type memoryDoc struct {
	userID  int64
	deleted bool
	chunks  []Chunk
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty store.
func NewMemory() *Memory {
	return &Memory{docs: map[int64]*memoryDoc{}, tokens: map[int64]SealedToken{}}
}

// ReplaceChunks implements EmbeddingStore.
func (m *Memory) ReplaceChunks(_ context.Context, userID, documentID int64, chunks []Chunk) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.docs[documentID]
	switch {
	case d == nil:
		d = &memoryDoc{userID: userID}
		m.docs[documentID] = d
	case d.userID != userID:
		return fmt.Errorf("document %d: %w", documentID, ErrForeignDocument)
	case d.deleted:
		return fmt.Errorf("document %d: %w", documentID, ErrDeletedDocument)
	}
	d.chunks = make([]Chunk, len(chunks))
	for i, c := range chunks {
		c.Embedding = slices.Clone(c.Embedding)
		d.chunks[i] = c
	}
	return nil
}

// DeleteDocument implements EmbeddingStore.
func (m *Memory) DeleteDocument(_ context.Context, userID, documentID int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.docs[documentID]
	switch {
	case d == nil:
		return fmt.Errorf("document %d: %w", documentID, ErrNotFound)
	case d.userID != userID:
		return fmt.Errorf("document %d: %w", documentID, ErrForeignDocument)
	}
	d.deleted = true
	return nil
}

// inScope calls f with every chunk the scope may read.
func (m *Memory) inScope(scope Scope, f func(documentID int64, c Chunk)) {
	for id, d := range m.docs {
		if d.userID != scope.UserID || d.deleted || len(scope.DocumentIDs) > 0 && !slices.Contains(scope.DocumentIDs, id) {
			continue
		}
		for _, c := range d.chunks {
			f(id, c)
		}
	}
}

// NearestChunks implements EmbeddingStore.
func (m *Memory) NearestChunks(_ context.Context, scope Scope, query []float32, limit int) ([]Hit, error) {
	qn := norm(query)
	if qn == 0 {
		return nil, fmt.Errorf("nearest chunks: the query embedding has length 0")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var hits []Hit
	m.inScope(scope, func(id int64, c Chunk) {
		if len(c.Embedding) != len(query) {
			return // Postgres's unnest would pad; a stored dimension never differs
		}
		var dot float64
		for i, x := range c.Embedding {
			dot += float64(x) * float64(query[i])
		}
		hits = append(hits, Hit{DocumentID: id, ChunkIndex: c.Index, Text: c.Text, Score: dot / (norm(c.Embedding) * qn)})
	})
	return best(hits, limit), nil
}

// MatchingChunks implements EmbeddingStore.
func (m *Memory) MatchingChunks(_ context.Context, scope Scope, text string, limit int) ([]Hit, error) {
	want := map[string]bool{}
	for _, t := range terms(text) {
		want[t] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var hits []Hit
	m.inScope(scope, func(id int64, c Chunk) {
		n := 0
		for _, t := range terms(c.Text) {
			if want[t] {
				n++
			}
		}
		if n > 0 {
			hits = append(hits, Hit{DocumentID: id, ChunkIndex: c.Index, Text: c.Text, Score: float64(n)})
		}
	})
	return best(hits, limit), nil
}

// best sorts hits best first (ties by document id, then chunk index) and
// keeps limit of them.
func best(hits []Hit, limit int) []Hit {
	slices.SortFunc(hits, func(a, b Hit) int {
		return cmp.Or(cmp.Compare(b.Score, a.Score), cmp.Compare(a.DocumentID, b.DocumentID), cmp.Compare(a.ChunkIndex, b.ChunkIndex))
	})
	if len(hits) > max(limit, 0) {
		hits = hits[:max(limit, 0)]
	}
	return hits
}

// PutGitHubToken implements TokenStore.
func (m *Memory) PutGitHubToken(_ context.Context, userID int64, t SealedToken) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t.Ciphertext = slices.Clone(t.Ciphertext)
	m.tokens[userID] = t
	return nil
}

// GitHubToken implements TokenStore.
func (m *Memory) GitHubToken(_ context.Context, userID int64) (SealedToken, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tokens[userID]
	if !ok {
		return SealedToken{}, fmt.Errorf("github token of user %d: %w", userID, ErrNotFound)
	}
	t.Ciphertext = slices.Clone(t.Ciphertext)
	return t, nil
}

// AddAILog implements AILogStore.
func (m *Memory) AddAILog(_ context.Context, l AILog) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.logs = append(m.logs, l)
	return nil
}

// AILogs returns the logs added so far, oldest first.
func (m *Memory) AILogs() []AILog {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.logs)
}
