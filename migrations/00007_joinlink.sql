-- The join-link scheduled-generation spec ("JOIN_LINK_GENERATION TRD"). See handlers/joinlink.
--
-- hdb_program_session: the spec adds link_generation_at and
-- link_generation_status to the existing program-session table (§Data model);
-- eventpipe has no program-session module, so this creates a stand-in with
-- only the columns the module reads and writes (id, updated_at, updated_by,
-- deleted_at are the existing table's). Every write to link_generation_* is a
-- direct, WHERE-guarded UPDATE (dec-08).
--
-- join_link_schedules: the in-process stand-in for EventBridge Scheduler's
-- one-time schedules (there is none here): one row per deterministic
-- schedule name "join-link-<id>", due at fire_at, published to the event
-- queue and deleted by the dispatcher in one transaction.

-- +goose Up
CREATE TABLE hdb_program_session (
    id                     bigserial   PRIMARY KEY,
    link_generation_at     timestamptz NULL,
    link_generation_status varchar(20) NOT NULL DEFAULT 'NOT_SCHEDULED'
        CHECK (link_generation_status IN ('NOT_SCHEDULED', 'SCHEDULED', 'IN_PROGRESS', 'COMPLETED', 'FAILED')),
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now(),
    updated_by             bigint      NULL,
    deleted_at             timestamptz NULL
);

-- §Persistence Constraints' recommended partial index (OQ-JLG-101): serves
-- the sweep's candidate query.
CREATE INDEX ix_psession_link_gen_due ON hdb_program_session (link_generation_at)
    WHERE deleted_at IS NULL AND link_generation_status <> 'COMPLETED';

CREATE TABLE join_link_schedules (
    name               text        PRIMARY KEY CHECK (name LIKE 'join-link-%'),
    program_session_id bigint      NOT NULL,
    fire_at            timestamptz NOT NULL,
    -- The encoded JOIN_LINK_GENERATION message.
    body               bytea       NOT NULL,
    updated_at         timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX join_link_schedules_due_idx ON join_link_schedules (fire_at);

-- +goose Down
DROP TABLE join_link_schedules;
DROP TABLE hdb_program_session;
