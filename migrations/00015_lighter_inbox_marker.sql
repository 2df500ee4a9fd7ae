-- A lighter inbox marker. The B-tree on processed_at (00001) served only the
-- janitor, which runs every few minutes, yet every marker insert paid for it
-- on the effect's hot path. Markers are appended in time order, so a BRIN
-- index (one small summary per 128 heap pages, nothing to maintain for the
-- pages written since the last summary) finds the old ones as well: the
-- janitor's DELETE rechecks processed_at on the pages it returns, so the TTL
-- contract is unchanged. See docs/decisions/0035-lighter-inbox-marker.md.
--
-- Both directions keep every marker; the index build locks out writes to
-- processed_messages while it runs (one scan of the table).

-- +goose Up
DROP INDEX processed_messages_processed_at_idx;
CREATE INDEX processed_messages_processed_at_brin ON processed_messages USING brin (processed_at);

-- +goose Down
DROP INDEX processed_messages_processed_at_brin;
CREATE INDEX processed_messages_processed_at_idx ON processed_messages (processed_at);
