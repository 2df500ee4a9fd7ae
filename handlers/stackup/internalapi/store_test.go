package internalapi_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/handlers/stackup/internalapi"
)

// stores are the two Store implementations; both run every suite.
var stores = map[string]func(t *testing.T) internalapi.Store{
	"memory": func(*testing.T) internalapi.Store { return internalapi.NewMemory() },
	"postgres": func(t *testing.T) internalapi.Store {
		pool, schema := dbtest.Schema(t)
		s, err := internalapi.NewPostgres(pool, schema)
		require.NoError(t, err)
		return s
	},
}

// TestStores runs one suite against both stores: the memory twin must
// behave like Postgres.
func TestStores(t *testing.T) {
	t.Parallel()
	for name, newStore := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, c := range storeSuite {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.run(t, newStore(t))
				})
			}
		})
	}
}

func chunk(i int, text string, e ...float32) internalapi.Chunk {
	return internalapi.Chunk{Index: i, Text: text, Embedding: e}
}

// ids returns the (document, chunk) pairs of hits, in order.
func ids(hits []internalapi.Hit) [][2]int64 {
	out := [][2]int64{}
	for _, h := range hits {
		out = append(out, [2]int64{h.DocumentID, int64(h.ChunkIndex)})
	}
	return out
}

var storeSuite = []struct {
	name string
	run  func(t *testing.T, s internalapi.Store)
}{
	{"cosine order, best first", func(t *testing.T, s internalapi.Store) {
		ctx := context.Background()
		require.NoError(t, s.ReplaceChunks(ctx, 7, 1, []internalapi.Chunk{
			chunk(0, "opposite", -1, 0, 0), chunk(1, "same", 2, 0, 0), chunk(2, "orthogonal", 0, 3, 0), chunk(3, "diagonal", 1, 1, 0),
		}))
		hits, err := s.NearestChunks(ctx, internalapi.Scope{UserID: 7}, []float32{1, 0, 0}, 10)
		require.NoError(t, err)
		assert.Equal(t, [][2]int64{{1, 1}, {1, 3}, {1, 2}, {1, 0}}, ids(hits))
		want := []float64{1, 0.7071067811865475, 0, -1}
		for i, h := range hits {
			assert.InDelta(t, want[i], h.Score, 1e-6, "cosine of %s", h.Text)
		}
		assert.Equal(t, "same", hits[0].Text)
		hits, err = s.NearestChunks(ctx, internalapi.Scope{UserID: 7}, []float32{1, 0, 0}, 2)
		require.NoError(t, err)
		assert.Equal(t, [][2]int64{{1, 1}, {1, 3}}, ids(hits), "limit")
	}},
	{"full-text match, most occurrences first", func(t *testing.T, s internalapi.Store) {
		ctx := context.Background()
		require.NoError(t, s.ReplaceChunks(ctx, 7, 1, []internalapi.Chunk{
			chunk(0, "Kafka consumer groups", 1, 0, 0), chunk(1, "Postgres tuning", 1, 0, 0),
			chunk(2, "kafka, Kafka and more KAFKA", 1, 0, 0), chunk(3, "결제 시스템 kafka 운영", 1, 0, 0),
		}))
		hits, err := s.MatchingChunks(ctx, internalapi.Scope{UserID: 7}, "kafka", 10)
		require.NoError(t, err)
		require.Len(t, hits, 3, "the Postgres chunk does not match")
		assert.Equal(t, [2]int64{1, 2}, ids(hits)[0], "three occurrences rank first")
		hits, err = s.MatchingChunks(ctx, internalapi.Scope{UserID: 7}, "결제 Postgres", 10)
		require.NoError(t, err)
		assert.ElementsMatch(t, [][2]int64{{1, 1}, {1, 3}}, ids(hits), "any of the terms matches")
		hits, err = s.MatchingChunks(ctx, internalapi.Scope{UserID: 7}, "  !! ", 10)
		require.NoError(t, err)
		assert.Empty(t, hits, "no terms, no matches")
	}},
	{"a search never leaves the caller's documents (§10.1)", func(t *testing.T, s internalapi.Store) {
		ctx := context.Background()
		// User 8's document is the best match for everything.
		require.NoError(t, s.ReplaceChunks(ctx, 8, 3, []internalapi.Chunk{chunk(0, "kafka kafka kafka secret resume", 1, 0, 0)}))
		require.NoError(t, s.ReplaceChunks(ctx, 7, 1, []internalapi.Chunk{chunk(0, "kafka one", 0, 1, 0)}))
		require.NoError(t, s.ReplaceChunks(ctx, 7, 2, []internalapi.Chunk{chunk(0, "kafka two", 1, 1, 0)}))
		q := []float32{1, 0, 0}
		for _, c := range []struct {
			name  string
			scope internalapi.Scope
			want  [][2]int64
		}{
			{"all the caller's documents", internalapi.Scope{UserID: 7}, [][2]int64{{2, 0}, {1, 0}}},
			{"an empty list is all of them", internalapi.Scope{UserID: 7, DocumentIDs: []int64{}}, [][2]int64{{2, 0}, {1, 0}}},
			{"the intersection with the caller's", internalapi.Scope{UserID: 7, DocumentIDs: []int64{1, 3}}, [][2]int64{{1, 0}}},
			{"an empty intersection finds nothing", internalapi.Scope{UserID: 7, DocumentIDs: []int64{3, 99}}, [][2]int64{}},
			{"a user who owns nothing finds nothing", internalapi.Scope{UserID: 9}, [][2]int64{}},
			{"nor with another's ids", internalapi.Scope{UserID: 9, DocumentIDs: []int64{1, 2, 3}}, [][2]int64{}},
		} {
			vec, err := s.NearestChunks(ctx, c.scope, q, 10)
			require.NoError(t, err)
			assert.Equal(t, c.want, ids(vec), "vector: %s", c.name)
			txt, err := s.MatchingChunks(ctx, c.scope, "kafka", 10)
			require.NoError(t, err)
			assert.ElementsMatch(t, c.want, ids(txt), "text: %s", c.name)
		}
	}},
	{"re-upload replaces the document's chunks; the first uploader owns it", func(t *testing.T, s internalapi.Store) {
		ctx := context.Background()
		three := []internalapi.Chunk{chunk(0, "a", 1, 0, 0), chunk(1, "b", 1, 0, 0), chunk(2, "c", 1, 0, 0)}
		require.NoError(t, s.ReplaceChunks(ctx, 7, 1, three))
		require.NoError(t, s.ReplaceChunks(ctx, 7, 1, three), "the same upload again")
		hits, err := s.NearestChunks(ctx, internalapi.Scope{UserID: 7}, []float32{1, 0, 0}, 10)
		require.NoError(t, err)
		assert.Len(t, hits, 3, "no duplicates")
		require.NoError(t, s.ReplaceChunks(ctx, 7, 1, []internalapi.Chunk{chunk(5, "new", 0, 1, 0)}))
		hits, err = s.NearestChunks(ctx, internalapi.Scope{UserID: 7}, []float32{1, 0, 0}, 10)
		require.NoError(t, err)
		assert.Equal(t, [][2]int64{{1, 5}}, ids(hits), "only the new chunks")
		assert.ErrorIs(t, s.ReplaceChunks(ctx, 8, 1, three), internalapi.ErrForeignDocument)
		hits, _ = s.NearestChunks(ctx, internalapi.Scope{UserID: 7}, []float32{1, 0, 0}, 10)
		assert.Equal(t, [][2]int64{{1, 5}}, ids(hits), "another user's upload changed nothing")
		require.NoError(t, s.ReplaceChunks(ctx, 7, 1, nil))
		hits, _ = s.NearestChunks(ctx, internalapi.Scope{UserID: 7}, []float32{1, 0, 0}, 10)
		assert.Empty(t, hits, "an empty upload removes every chunk")
	}},
	{"soft-deleted documents are never searched", func(t *testing.T, s internalapi.Store) {
		ctx := context.Background()
		require.NoError(t, s.ReplaceChunks(ctx, 7, 1, []internalapi.Chunk{chunk(0, "kafka", 1, 0, 0)}))
		require.NoError(t, s.ReplaceChunks(ctx, 7, 2, []internalapi.Chunk{chunk(0, "kafka", 0, 1, 0)}))
		assert.ErrorIs(t, s.DeleteDocument(ctx, 8, 1), internalapi.ErrForeignDocument)
		assert.ErrorIs(t, s.DeleteDocument(ctx, 7, 99), internalapi.ErrNotFound)
		require.NoError(t, s.DeleteDocument(ctx, 7, 1))
		require.NoError(t, s.DeleteDocument(ctx, 7, 1), "again")
		for _, scope := range []internalapi.Scope{{UserID: 7}, {UserID: 7, DocumentIDs: []int64{1, 2}}} {
			vec, err := s.NearestChunks(ctx, scope, []float32{1, 0, 0}, 10)
			require.NoError(t, err)
			assert.Equal(t, [][2]int64{{2, 0}}, ids(vec))
			txt, err := s.MatchingChunks(ctx, scope, "kafka", 10)
			require.NoError(t, err)
			assert.Equal(t, [][2]int64{{2, 0}}, ids(txt))
		}
		vec, err := s.NearestChunks(ctx, internalapi.Scope{UserID: 7, DocumentIDs: []int64{1}}, []float32{1, 0, 0}, 10)
		require.NoError(t, err)
		assert.Empty(t, vec, "only the deleted one asked for: nothing")
		assert.ErrorIs(t, s.ReplaceChunks(ctx, 7, 1, []internalapi.Chunk{chunk(0, "x", 1, 0, 0)}), internalapi.ErrDeletedDocument)
	}},
	{"github tokens", func(t *testing.T, s internalapi.Store) {
		ctx := context.Background()
		_, err := s.GitHubToken(ctx, 7)
		require.ErrorIs(t, err, internalapi.ErrNotFound)
		at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
		require.NoError(t, s.PutGitHubToken(ctx, 7, internalapi.SealedToken{Ciphertext: []byte{1, 2, 3}, ExpiresAt: at}))
		require.NoError(t, s.PutGitHubToken(ctx, 7, internalapi.SealedToken{Ciphertext: []byte{4, 5}, ExpiresAt: at.Add(time.Hour)}))
		got, err := s.GitHubToken(ctx, 7)
		require.NoError(t, err)
		assert.Equal(t, []byte{4, 5}, got.Ciphertext, "replaced")
		assert.True(t, at.Add(time.Hour).Equal(got.ExpiresAt))
		_, err = s.GitHubToken(ctx, 8)
		assert.ErrorIs(t, err, internalapi.ErrNotFound)
	}},
	{"ai logs", func(t *testing.T, s internalapi.Store) {
		user := int64(7)
		require.NoError(t, s.AddAILog(context.Background(), internalapi.AILog{UserID: &user, Model: "gpt-4.1-mini", PromptTokens: 10, CompletionTokens: 5, LatencyMs: 1200, Success: true}))
		require.NoError(t, s.AddAILog(context.Background(), internalapi.AILog{Model: "m"}))
	}},
}
