-- The StackUp contract's internal API (the StackUp RabbitMQ messaging
-- contract, §10 and §10.1): the documents whose chunks and embeddings the AI
-- server uploads, with their owner and soft-delete mark; the chunks; users'
-- GitHub tokens, encrypted; and the AI server's per-call LLM logs. See
-- handlers/stackup/internalapi and decision 0024.

-- +goose Up
CREATE TABLE stackup_embedded_documents (
    -- The document id the AI server uploads under (analyzedDocumentId, §5.1).
    id          bigint      PRIMARY KEY,
    -- The user whose upload created the row: the owner for good. A search is
    -- always limited to its caller's rows (§10.1).
    user_id     bigint      NOT NULL,
    -- Set by a soft delete: the document's chunks are never searched again.
    deleted_at  timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX stackup_embedded_documents_user_idx ON stackup_embedded_documents (user_id) WHERE deleted_at IS NULL;

CREATE TABLE stackup_document_embeddings (
    document_id  bigint      NOT NULL REFERENCES stackup_embedded_documents (id),
    chunk_index  integer     NOT NULL CHECK (chunk_index >= 0),
    text         text        NOT NULL,
    -- No pgvector here: the embedding is a real[] of stackup.embedding_dimension
    -- values and its Euclidean norm, cosine computed in the query (decision 0024).
    embedding    real[]      NOT NULL,
    norm         double precision NOT NULL CHECK (norm > 0),
    -- The full-text side of the hybrid search ('simple': no stemming, no stop
    -- words, which suits Korean and English text alike).
    tsv          tsvector    GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED,
    PRIMARY KEY (document_id, chunk_index)
);

CREATE INDEX stackup_document_embeddings_tsv_idx ON stackup_document_embeddings USING gin (tsv);

CREATE TABLE stackup_github_tokens (
    user_id     bigint      PRIMARY KEY,
    -- AES-256-GCM: version byte, nonce, ciphertext and tag; the user id is the
    -- additional data, so a row copied to another user does not decrypt.
    ciphertext  bytea       NOT NULL,
    expires_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE stackup_ai_request_logs (
    id                 bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id            bigint,
    model              text        NOT NULL,
    request_type       text,
    trace_id           text,
    prompt_tokens      integer     NOT NULL,
    completion_tokens  integer     NOT NULL,
    latency_ms         bigint      NOT NULL,
    success            boolean     NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX stackup_ai_request_logs_created_idx ON stackup_ai_request_logs (created_at);

-- +goose Down
DROP TABLE stackup_ai_request_logs;
DROP TABLE stackup_github_tokens;
DROP TABLE stackup_document_embeddings;
DROP TABLE stackup_embedded_documents;
