-- The transactional outbox: a message written in the same transaction as the
-- business row that it announces, published afterwards by the relay
-- (app/outbox). See docs in app/outbox/doc.go.

-- +goose Up
CREATE TABLE outbox (
    id              bigserial   PRIMARY KEY,
    -- The Watermill message UUID; consumers deduplicate on it.
    event_id        text        NOT NULL UNIQUE,
    topic           text        NOT NULL,
    payload         bytea       NOT NULL,
    metadata        jsonb       NOT NULL DEFAULT '{}',
    -- Rows sharing a key are published in id order when the relay runs
    -- their topic in strict order.
    ordering_key    text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    published_at    timestamptz,
    attempts        integer     NOT NULL DEFAULT 0,
    last_error      text,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    -- Set after the relay's MaxAttempts failures: the row is no longer tried
    -- (and so never blocks the rows behind it) until an operator clears it.
    parked_at       timestamptz
);

-- The relay's claim scans only unpublished, unparked rows in id order.
CREATE INDEX outbox_unpublished_idx ON outbox (id)
    WHERE published_at IS NULL AND parked_at IS NULL;

-- Strict per-key order asks "is there an older unpublished row of this key?".
CREATE INDEX outbox_ordering_key_idx ON outbox (ordering_key, id)
    WHERE published_at IS NULL AND ordering_key IS NOT NULL;

-- Retention deletes published rows by age.
CREATE INDEX outbox_published_at_idx ON outbox (published_at)
    WHERE published_at IS NOT NULL;

-- One notification per inserting statement wakes the relays at once instead
-- of at their next poll. The channel is "<schema>_outbox" (eventpipe_outbox
-- for the default schema) so that relays of different schemas do not wake
-- each other. Postgres delivers it only when the transaction commits.
-- +goose StatementBegin
CREATE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '_outbox', '');
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();

-- +goose Down
DROP TABLE outbox;
DROP FUNCTION outbox_notify();
