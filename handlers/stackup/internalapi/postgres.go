package internalapi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventpipe/eventpipe/app/dbtx"
	"github.com/eventpipe/eventpipe/migrations"
)

// Postgres is the Store on PostgreSQL (migrations/00012_stackup_internal_api.sql).
// Embeddings are real[] columns with their norm; cosine similarity is
// computed in the query over the caller's chunks only (no pgvector, decision
// 0024), full-text rank by ts_rank over a generated 'simple' tsvector.
type Postgres struct {
	pool   *pgxpool.Pool
	schema string
}

var _ Store = (*Postgres)(nil)

// NewPostgres returns the store on schema (migrations.DefaultSchema when
// empty), which must be migrated.
func NewPostgres(pool *pgxpool.Pool, schema string) (*Postgres, error) {
	schema = migrations.SchemaOrDefault(schema)
	if err := migrations.ValidateSchema(schema); err != nil {
		return nil, fmt.Errorf("stackup internal API store: %w", err)
	}
	return &Postgres{pool: pool, schema: schema}, nil
}

func (p *Postgres) t(name string) string { return pgx.Identifier{p.schema, name}.Sanitize() }

// ReplaceChunks implements EmbeddingStore: the owner check, the old chunks'
// removal and the new chunks commit together, so a concurrent search sees the
// old chunks or the new ones, never a mix.
func (p *Postgres) ReplaceChunks(ctx context.Context, userID, documentID int64, chunks []Chunk) error {
	err := dbtx.InTx(ctx, p.pool, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO `+p.t("stackup_embedded_documents")+` (id, user_id) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`,
			documentID, userID); err != nil {
			return err
		}
		var owner int64
		var deletedAt *time.Time
		if err := tx.QueryRow(ctx, `SELECT user_id, deleted_at FROM `+p.t("stackup_embedded_documents")+` WHERE id = $1 FOR UPDATE`,
			documentID).Scan(&owner, &deletedAt); err != nil {
			return err
		}
		switch {
		case owner != userID:
			return ErrForeignDocument
		case deletedAt != nil:
			return ErrDeletedDocument
		}
		if _, err := tx.Exec(ctx, `DELETE FROM `+p.t("stackup_document_embeddings")+` WHERE document_id = $1`, documentID); err != nil {
			return err
		}
		rows := make([][]any, len(chunks))
		for i, c := range chunks {
			rows[i] = []any{documentID, c.Index, c.Text, c.Embedding, norm(c.Embedding)}
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{p.schema, "stackup_document_embeddings"},
			[]string{"document_id", "chunk_index", "text", "embedding", "norm"}, pgx.CopyFromRows(rows)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE `+p.t("stackup_embedded_documents")+` SET updated_at = now() WHERE id = $1`, documentID)
		return err
	})
	if err != nil {
		return fmt.Errorf("replace chunks of document %d: %w", documentID, err)
	}
	return nil
}

// DeleteDocument implements EmbeddingStore.
func (p *Postgres) DeleteDocument(ctx context.Context, userID, documentID int64) error {
	var owner int64
	err := dbtx.Q(ctx, p.pool).QueryRow(ctx, `UPDATE `+p.t("stackup_embedded_documents")+`
		SET deleted_at = coalesce(deleted_at, now()), updated_at = now()
		WHERE id = $1 AND user_id = $2 RETURNING user_id`, documentID, userID).Scan(&owner)
	if errors.Is(err, pgx.ErrNoRows) {
		err = dbtx.Q(ctx, p.pool).QueryRow(ctx, `SELECT user_id FROM `+p.t("stackup_embedded_documents")+` WHERE id = $1`, documentID).Scan(&owner)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			err = ErrNotFound
		case err == nil:
			err = ErrForeignDocument
		}
	}
	if err != nil {
		return fmt.Errorf("delete document %d: %w", documentID, err)
	}
	return nil
}

// scopeJoin is the §10.1 condition every search query carries (the spec's
// ACTIVE_DOC_JOIN): the caller's documents, not deleted, narrowed to the
// given ids when $3 is true. $2 is the user, $3 whether to narrow, $4 the ids.
func (p *Postgres) scopeJoin() string {
	return ` FROM ` + p.t("stackup_document_embeddings") + ` e
		JOIN ` + p.t("stackup_embedded_documents") + ` d ON d.id = e.document_id
		WHERE d.user_id = $2 AND d.deleted_at IS NULL AND (NOT $3 OR d.id = ANY($4::bigint[]))`
}

func scopeArgs(s Scope) []any {
	ids := s.DocumentIDs
	if ids == nil {
		ids = []int64{}
	}
	return []any{s.UserID, len(s.DocumentIDs) > 0, ids}
}

// NearestChunks implements EmbeddingStore. The dot product runs over the
// two arrays side by side (unnest), in float8 as the memory twin computes it.
func (p *Postgres) NearestChunks(ctx context.Context, scope Scope, query []float32, limit int) ([]Hit, error) {
	qn := norm(query)
	if qn == 0 {
		return nil, fmt.Errorf("nearest chunks: the query embedding has length 0")
	}
	args := append([]any{query}, scopeArgs(scope)...)
	args = append(args, qn, limit)
	return p.hits(ctx, "nearest chunks", `SELECT e.document_id, e.chunk_index, e.text,
		(SELECT sum(a::float8 * b::float8) FROM unnest(e.embedding, $1::real[]) AS v(a, b)) / (e.norm * $5) AS score`+
		p.scopeJoin()+` AND cardinality(e.embedding) = cardinality($1::real[])
		ORDER BY score DESC, e.document_id, e.chunk_index LIMIT $6`, args...)
}

// MatchingChunks implements EmbeddingStore. The query matches any of the
// text's terms (plainto_tsquery's AND turned into OR), ranked by ts_rank.
func (p *Postgres) MatchingChunks(ctx context.Context, scope Scope, text string, limit int) ([]Hit, error) {
	args := append([]any{text}, scopeArgs(scope)...)
	args = append(args, limit)
	return p.hits(ctx, "matching chunks", `WITH q AS (SELECT replace(plainto_tsquery('simple', $1)::text, ' & ', ' | ')::tsquery AS q)
		SELECT e.document_id, e.chunk_index, e.text, ts_rank(e.tsv, (SELECT q FROM q))::float8 AS score`+
		p.scopeJoin()+` AND e.tsv @@ (SELECT q FROM q)
		ORDER BY score DESC, e.document_id, e.chunk_index LIMIT $5`, args...)
}

func (p *Postgres) hits(ctx context.Context, what, sql string, args ...any) ([]Hit, error) {
	rows, err := dbtx.Q(ctx, p.pool).Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	hits, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Hit, error) {
		var h Hit
		err := r.Scan(&h.DocumentID, &h.ChunkIndex, &h.Text, &h.Score)
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return hits, nil
}

// PutGitHubToken implements TokenStore.
func (p *Postgres) PutGitHubToken(ctx context.Context, userID int64, t SealedToken) error {
	_, err := dbtx.Q(ctx, p.pool).Exec(ctx, `INSERT INTO `+p.t("stackup_github_tokens")+` (user_id, ciphertext, expires_at) VALUES ($1, $2, $3)
		ON CONFLICT (user_id) DO UPDATE SET ciphertext = EXCLUDED.ciphertext, expires_at = EXCLUDED.expires_at, updated_at = now()`,
		userID, t.Ciphertext, t.ExpiresAt)
	if err != nil {
		return fmt.Errorf("put github token of user %d: %w", userID, err)
	}
	return nil
}

// GitHubToken implements TokenStore.
func (p *Postgres) GitHubToken(ctx context.Context, userID int64) (SealedToken, error) {
	var t SealedToken
	err := dbtx.Q(ctx, p.pool).QueryRow(ctx, `SELECT ciphertext, expires_at FROM `+p.t("stackup_github_tokens")+` WHERE user_id = $1`,
		userID).Scan(&t.Ciphertext, &t.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return SealedToken{}, fmt.Errorf("github token of user %d: %w", userID, err)
	}
	return t, nil
}

// AddAILog implements AILogStore.
func (p *Postgres) AddAILog(ctx context.Context, l AILog) error {
	_, err := dbtx.Q(ctx, p.pool).Exec(ctx, `INSERT INTO `+p.t("stackup_ai_request_logs")+`
		(user_id, model, request_type, trace_id, prompt_tokens, completion_tokens, latency_ms, success)
		VALUES ($1, $2, nullif($3, ''), nullif($4, ''), $5, $6, $7, $8)`,
		l.UserID, l.Model, l.RequestType, l.TraceID, l.PromptTokens, l.CompletionTokens, l.LatencyMs, l.Success)
	if err != nil {
		return fmt.Errorf("add ai log: %w", err)
	}
	return nil
}
