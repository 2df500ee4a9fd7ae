-- The disputes spec's HTTP API and the events-worker's follow-ups (see
-- handlers/disputes and docs/decisions/0022):
--
-- idempotency_keys: one row per Idempotency-Key the API accepted, written in
-- the same transaction as the business row and its outbox row, so a repeated
-- request is answered with the first response and writes nothing; a request
-- waiting on the same key blocks on the primary key until the first commits.
--
-- dispute_reversals: the auto-reversal of an eligible failed_but_debited UPI
-- dispute, inserted pending with its TAT timer (the DisputeRaised effect, in
-- the inbox's transaction) and completed by the reversal worker outside it.
-- next_attempt_at is both the backoff and the claim's lease: a claimed row is
-- not due again until its call has had time to finish, so a worker that dies
-- mid-call leaves it to the next claim, which sends the same idempotency key.

-- +goose Up
CREATE TABLE idempotency_keys (
    key          text        PRIMARY KEY CHECK (length(key) BETWEEN 1 AND 255),
    -- SHA-256 (hex) of the operation and its normalised request: the same
    -- key with another request is refused (422).
    request_hash text        NOT NULL,
    -- The first response, replayed byte for byte. Written in the
    -- transaction that inserted the row, so never seen unset.
    status       integer     NOT NULL DEFAULT 0,
    response     bytea       NOT NULL DEFAULT ''::bytea,
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE dispute_reversals (
    dispute_id      text        PRIMARY KEY,
    txn_id          text        NOT NULL,
    status          text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'reversed', 'failed')),
    -- Calls started (claims); also the claim's fencing token: an outcome is
    -- recorded only by the claim that holds the latest attempt.
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text        NOT NULL DEFAULT '',
    -- The payment system's reversal id.
    reference       text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    completed_at    timestamptz
);

CREATE INDEX dispute_reversals_due_idx ON dispute_reversals (next_attempt_at) WHERE status = 'pending';

-- Timers recorded eligible before this migration wait for their reversal too.
INSERT INTO dispute_reversals (dispute_id, txn_id)
SELECT dispute_id, txn_id FROM dispute_reminders WHERE auto_reverse
ON CONFLICT DO NOTHING;

-- +goose Down
DROP TABLE dispute_reversals;
DROP TABLE idempotency_keys;
