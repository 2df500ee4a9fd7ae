-- The disputes outbox domain-events spec: the producers'
-- business rows (disputes, transaction_flags, kb_documents — each written in
-- the same transaction as its outbox row) and the events-worker's effects
-- (dispute_reminders, review_queue, kb_statistics — each written in the same
-- transaction as its processed_messages row). See handlers/disputes.
--
-- Ids are our producers' "<prefix>_" + ULID strings, but foreign producers'
-- ids are accepted as text up to 128 bytes.

-- +goose Up
CREATE TABLE disputes (
    id          text        PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 128),
    txn_id      text        NOT NULL CHECK (length(txn_id) BETWEEN 1 AND 128),
    reason_code text        NOT NULL,
    rail        text        NOT NULL DEFAULT '',
    tat_due_at  timestamptz,
    raised_at   timestamptz NOT NULL,
    -- The DisputeRaised event announcing this row (outbox event_id).
    event_id    text        NOT NULL UNIQUE
);

CREATE INDEX disputes_txn_idx ON disputes (txn_id);

CREATE TABLE transaction_flags (
    -- The TransactionFlagged event announcing this row.
    event_id   text             PRIMARY KEY,
    txn_id     text             NOT NULL CHECK (length(txn_id) BETWEEN 1 AND 128),
    risk_score double precision NOT NULL CHECK (risk_score BETWEEN 0 AND 100),
    reason     text             NOT NULL DEFAULT '',
    flagged_at timestamptz      NOT NULL
);

CREATE TABLE kb_documents (
    id          text        PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 128),
    bucket      text        NOT NULL,
    key         text        NOT NULL,
    ingested_at timestamptz NOT NULL,
    event_id    text        NOT NULL UNIQUE,
    UNIQUE (bucket, key)
);

-- DisputeRaised's effect: the TAT timer and its reminder. One per dispute:
-- a second DisputeRaised for it (a new event id) keeps the first timer.
CREATE TABLE dispute_reminders (
    dispute_id   text        PRIMARY KEY,
    event_id     text        NOT NULL,
    txn_id       text        NOT NULL,
    tat_due_at   timestamptz NOT NULL,
    remind_at    timestamptz NOT NULL,
    auto_reverse boolean     NOT NULL DEFAULT false,
    -- Set by whatever sends the reminder (not built: the spec names no
    -- sender).
    reminded_at  timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX dispute_reminders_due_idx ON dispute_reminders (remind_at) WHERE reminded_at IS NULL;

-- TransactionFlagged's effect: one entry per event.
CREATE TABLE review_queue (
    event_id   text             PRIMARY KEY,
    txn_id     text             NOT NULL,
    risk_score double precision NOT NULL,
    reason     text             NOT NULL DEFAULT '',
    queue      text             NOT NULL CHECK (queue IN ('review', 'aml')),
    flagged_at timestamptz      NOT NULL,
    created_at timestamptz      NOT NULL DEFAULT now()
);

CREATE INDEX review_queue_txn_idx ON review_queue (txn_id);

-- DocumentIngested's effect: one row (id = 1), recomputed from kb_documents.
CREATE TABLE kb_statistics (
    id               smallint    PRIMARY KEY CHECK (id = 1),
    documents        bigint      NOT NULL,
    last_ingested_at timestamptz,
    last_event_id    text        NOT NULL,
    refreshed_at     timestamptz NOT NULL
);

-- +goose Down
DROP TABLE kb_statistics;
DROP TABLE review_queue;
DROP TABLE dispute_reminders;
DROP TABLE kb_documents;
DROP TABLE transaction_flags;
DROP TABLE disputes;
