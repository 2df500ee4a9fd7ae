-- Inbox leases: a claim on a message's work that runs outside the marker's
-- transaction (an AI worker's model call). The marker (processed_messages) is
-- written only after the work, with its answer; while the work runs, the lease
-- keeps a second delivery of the same message from running it too. A lease
-- that is not renewed expires, so a worker killed mid-work never blocks the
-- message for longer than one lease. See app/inbox.

-- +goose Up
CREATE TABLE inbox_leases (
    consumer   text        NOT NULL,
    message_id text        NOT NULL,
    holder     text        NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (consumer, message_id)
);

-- +goose Down
DROP TABLE inbox_leases;
