-- The inbox: one row per (consumer, message id) whose effect has been
-- committed. Inserted in the same transaction as the effect (INSERT … ON
-- CONFLICT DO NOTHING), so a redelivered message finds its marker and is
-- acknowledged without a second effect. See app/inbox.

-- +goose Up
CREATE TABLE processed_messages (
    consumer     text        NOT NULL,
    message_id   text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
);

-- The janitor deletes markers older than the TTL (default 24 h).
CREATE INDEX processed_messages_processed_at_idx ON processed_messages (processed_at);

-- +goose Down
DROP TABLE processed_messages;
