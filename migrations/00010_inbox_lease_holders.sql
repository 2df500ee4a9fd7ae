-- Inbox lease holders: the PostgreSQL session (backend pid and start time) of
-- the process holding a lease. A lease whose holder's session is gone (the
-- process died: kill -9, a crash) is taken over at once instead of one TTL
-- later, so a redelivery after a crash runs without waiting. NULL for leases
-- taken before this migration: those expire by their TTL. See app/inbox.

-- +goose Up
ALTER TABLE inbox_leases ADD COLUMN holder_pid integer NULL, ADD COLUMN holder_started timestamptz NULL;

-- +goose Down
ALTER TABLE inbox_leases DROP COLUMN holder_pid, DROP COLUMN holder_started;
