// Package outbox is the transactional outbox (disputes LLD §1): a message is
// written in the same transaction as the business row it announces (Write),
// so the two commit or roll back together — no lost events, no phantom
// events — and a Relay publishes it afterwards to whichever Watermill
// publisher is configured.
//
// # Table
//
// Rows live in <schema>.outbox (migrations/00002_outbox.sql; schema
// "eventpipe" by default). A row is unpublished until published_at is set.
//
// # Failures
//
// A failed publish is retried with exponential backoff (RelayConfig.MinBackoff
// doubling up to MaxBackoff, 1s to 1m by default), for as long as it takes
// when the failure is transient: the broker down, closed, reconnecting or
// slow, a timeout, any unclassified error. An outage never loses or parks a
// row. Only a permanent refusal — the broker refusing the message itself: a
// payload over broker.MaxPayloadBytes, a routing key no queue is bound for
// (*routing.UnroutableError), an error marked failure.Permanent — parks a row
// (parked_at), at once by default (RelayConfig.MaxAttempts tries). A parked
// row is no longer tried; it is logged at ERROR with its id, queue, ordering
// key and reason, and counted by eventpipe_outbox_parked. Table.Requeue
// (`eventpipe outbox requeue`) brings parked rows back once their refusal has
// been dealt with.
//
// # Wake-up
//
// A statement-level trigger sends NOTIFY on channel "<schema>_outbox"
// ("eventpipe_outbox" by default) when rows are inserted; PostgreSQL delivers
// it at commit. Relays LISTEN on a dedicated connection (reconnecting with
// backoff) and also poll every RelayConfig.PollInterval, so a lost
// notification only delays a message.
//
// # Delivery
//
// At least once. Each claim runs in one transaction: SELECT … FOR UPDATE SKIP
// LOCKED (so several relays share the work without publishing a row twice
// at the same time), one Publish per topic, then the confirmed rows are
// marked published and COMMIT. A crash between Publish and COMMIT publishes
// those messages again later — so consumers deduplicate on the message UUID
// (package inbox); the outbox never promises exactly-once on its own.
//
// # Order
//
// Best effort by id (insertion order) by default; consumers should not
// depend on it (disputes LLD). For topics listed in
// RelayConfig.StrictOrderTopics, rows carrying an ordering key (metadata key
// OrderingKeyMetadata) are published strictly in id order per (topic, key):
// a row is not claimed while an older unpublished row of the same key exists.
// The cost: at most one row per key per claim (a hot key moves at one message
// per relay round trip, other keys are unaffected); a failing row holds its
// key's later rows back through its retries, and a parked row holds them
// until an operator requeues or deletes it (the gauge eventpipe_outbox_held
// counts those rows, and the parked row's ERROR line says holds_key=true);
// and Write takes a transaction-
// scoped advisory lock per (topic, key) so that ids follow commit order —
// writers of one key serialize until they commit.
package outbox
