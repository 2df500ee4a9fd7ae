-- The interviews SQS report-queues spec: organisations
-- with credit balances, credit lots, the credit ledger, interviews with their
-- settlement, and interview reports. See handlers/interviews.
--
-- Ids are the spec's ObjectId strings (24 lower-case hex digits). Credits are
-- whole numbers: billedCredits = floor(durationSeconds / 60).

-- +goose Up
CREATE TABLE organizations (
    id                text        PRIMARY KEY CHECK (id ~ '^[0-9a-f]{24}$'),
    name              text        NOT NULL DEFAULT '',
    -- Credits the organisation may still reserve.
    available_credits bigint      NOT NULL DEFAULT 0 CHECK (available_credits >= 0),
    -- Credits held by interviews that are not settled yet.
    reserved_credits  bigint      NOT NULL DEFAULT 0 CHECK (reserved_credits >= 0),
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE credit_lots (
    id              text        PRIMARY KEY CHECK (id ~ '^[0-9a-f]{24}$'),
    organization_id text        NOT NULL REFERENCES organizations (id),
    -- Credits not consumed yet, reserved ones included.
    remaining       bigint      NOT NULL CHECK (remaining >= 0),
    -- The part of remaining held by unsettled interviews.
    reserved        bigint      NOT NULL DEFAULT 0 CHECK (reserved >= 0 AND reserved <= remaining),
    -- ACTIVE, DEPLETED (remaining reached 0) or EXPIRED (past expires_at at
    -- a settlement; its unused credits were forfeited).
    status          text        NOT NULL DEFAULT 'ACTIVE' CHECK (status IN ('ACTIVE', 'DEPLETED', 'EXPIRED')),
    expires_at      timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX credit_lots_organization_idx ON credit_lots (organization_id, status);

CREATE TABLE interviews (
    id                   text        PRIMARY KEY CHECK (id ~ '^[0-9a-f]{24}$'),
    organization_id      text        NOT NULL REFERENCES organizations (id),
    -- Set synchronously by the API before it enqueues (COMPLETED, FAILED, …);
    -- the settlement consumer does not change it.
    status               text        NOT NULL DEFAULT 'SCHEDULED',
    duration_seconds     integer     NOT NULL DEFAULT 0 CHECK (duration_seconds >= 0),
    -- The questions and answers the report is generated from (a JSON array of
    -- {"question","answer"}).
    transcript           jsonb       NOT NULL DEFAULT '[]',
    credits_reserved     bigint      NOT NULL DEFAULT 0 CHECK (credits_reserved >= 0),
    credits_consumed     bigint      CHECK (credits_consumed >= 0),
    -- The settlement claim: a settlement runs only while settled_at IS NULL.
    settled_at           timestamptz,
    retention_expires_at timestamptz,
    deleted_at           timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX interviews_organization_idx ON interviews (organization_id);

-- Which lots hold an interview's reservation, so that a settlement consumes
-- and releases exactly those credits.
CREATE TABLE interview_credit_holds (
    interview_id text   NOT NULL REFERENCES interviews (id),
    lot_id       text   NOT NULL REFERENCES credit_lots (id),
    credits      bigint NOT NULL CHECK (credits > 0),
    PRIMARY KEY (interview_id, lot_id)
);

CREATE TABLE credit_ledger_entries (
    id              bigserial   PRIMARY KEY,
    organization_id text        NOT NULL REFERENCES organizations (id),
    lot_id          text        NOT NULL REFERENCES credit_lots (id),
    -- SETTLE (credits consumed), RELEASE (unused reservation returned to
    -- available) or FORFEIT (unused reservation of an expired lot).
    kind            text        NOT NULL CHECK (kind IN ('SETTLE', 'RELEASE', 'FORFEIT')),
    credits         bigint      NOT NULL CHECK (credits > 0),
    reference_kind  text        NOT NULL CHECK (reference_kind IN ('INTERVIEW')),
    reference_id    text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    -- Belt and braces behind the settled_at claim: one entry of a kind per
    -- lot and reference, ever.
    UNIQUE (reference_kind, reference_id, lot_id, kind)
);

CREATE INDEX credit_ledger_entries_organization_idx ON credit_ledger_entries (organization_id, id);

CREATE TABLE interview_reports (
    interview_id          text        PRIMARY KEY REFERENCES interviews (id),
    organization_id       text        NOT NULL REFERENCES organizations (id),
    status                text        NOT NULL DEFAULT 'NOT_STARTED'
                                      CHECK (status IN ('NOT_STARTED', 'PROCESSING', 'COMPLETED', 'FAILED')),
    attempt_count         integer     NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
    overall_score         integer,
    recommendation        text,
    summary               text,
    insufficient_evidence boolean     NOT NULL DEFAULT false,
    skill_assessments     jsonb       NOT NULL DEFAULT '[]',
    question_analysis     jsonb       NOT NULL DEFAULT '[]',
    -- model, promptVersion, token usage.
    generation            jsonb       NOT NULL DEFAULT '{}',
    last_error            text,
    retention_expires_at  timestamptz,
    claimed_at            timestamptz,
    completed_at          timestamptz,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE interview_reports;
DROP TABLE credit_ledger_entries;
DROP TABLE interview_credit_holds;
DROP TABLE interviews;
DROP TABLE credit_lots;
DROP TABLE organizations;
