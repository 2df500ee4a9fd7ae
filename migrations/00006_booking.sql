-- The booking session FIFO pipeline spec: the state the
-- booking-session-events.fifo consumer keeps, written in the same transaction
-- as its processed_messages row (the inbox, keyed by the event id). See
-- handlers/booking.
--
-- Minimal on purpose: one row per applied event (the effect, in the order it
-- was applied) and one summary row per booking session. Ids are text up to
-- 128 bytes (foreign producers' ids are accepted as they come).

-- +goose Up
CREATE TABLE booking_session_events (
    -- The producer's eventId (deriveEventId): the dedupe key, never synthesised.
    event_id           text        PRIMARY KEY CHECK (length(event_id) BETWEEN 1 AND 128),
    -- Applied order: within a session it is the FIFO queue's (message group) order.
    seq                bigint      GENERATED ALWAYS AS IDENTITY UNIQUE,
    booking_session_id text        NOT NULL CHECK (length(booking_session_id) BETWEEN 1 AND 128),
    event_type         text        NOT NULL,
    step_id            text        NOT NULL DEFAULT '',
    occurred_at        timestamptz NOT NULL,
    data               jsonb       NOT NULL DEFAULT '{}'::jsonb,
    applied_at         timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX booking_session_events_session_idx ON booking_session_events (booking_session_id, seq);

CREATE TABLE booking_sessions (
    id            text        PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 128),
    -- in_progress, completed or abandoned; completed and abandoned are final.
    status        text        NOT NULL CHECK (status IN ('in_progress', 'completed', 'abandoned')),
    events        bigint      NOT NULL,
    last_event_id text        NOT NULL,
    last_step_id  text        NOT NULL DEFAULT '',
    updated_at    timestamptz NOT NULL
);

-- +goose Down
DROP TABLE booking_sessions;
DROP TABLE booking_session_events;
