-- The join-link fallback sweep's last scheduled tick (handlers/joinlink). The
-- advisory lock keeps replicas from sweeping at the same moment; this row
-- keeps them from sweeping the same tick one after another: a replica whose
-- timer fires a little later than another's (clock skew, a busy machine)
-- finds the tick taken and skips it. One row: the newest tick swept.

-- +goose Up
CREATE TABLE joinlink_sweep_ticks (
    id         boolean     PRIMARY KEY DEFAULT true CHECK (id),
    last_tick  timestamptz NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE joinlink_sweep_ticks;
