// Package disputes runs the domain-events flow of the disputes outbox
// domain-events spec ("LLD — Async messaging") on any broker:
// producers that write a business row and its event to the transactional
// outbox in one transaction (§1), the §2 event envelope, and the
// events-worker consumer on domain-events whose effects happen exactly once
// (the inbox, keyed by the envelope's event_id).
//
// # Wire format
//
// The body is the §2 envelope (Envelope): event_id, event_type,
// event_version, aggregate_type, aggregate_id, occurred_at (RFC 3339, UTC,
// milliseconds), trace_id and payload. Encoding is strict (our publishers
// refuse unknown or missing fields); decoding is lenient (unknown fields are
// ignored and never kept). The Watermill message UUID is the event id, and
// the event_id metadata (an SQS message attribute, an AMQP header) is a copy
// of it for routing and FIFO deduplication; the body's event_id is the
// dedupe key (eventpipe's rule: the body wins, the attribute is a copy).
//
// # Failures (§4)
//
// A malformed envelope, an unknown event_type or an unsupported
// event_version is a permanent error; the route's policy is fail-until-max:
// it is logged with its event id, fails, and reaches domain-events-dlq after
// maxReceiveCount (5) attempts. Any other error is transient (retried with
// backoff, then the DLQ). A duplicate delivery is acknowledged without effect.
//
// # Effects
//
//   - DisputeRaised: the TAT due time (the payload's tat_due_at, else
//     occurred_at + Handlers.DefaultTAT) and a reminder ReminderLead before
//     it, in dispute_reminders; a failed_but_debited UPI dispute is marked
//     eligible for auto-reversal on that row and gets a pending Reversal in
//     the same transaction.
//   - TransactionFlagged: a review_queue entry, on the AML queue when the risk
//     score is at least Handlers.AMLThreshold.
//   - DocumentIngested: the kb_statistics row recomputed from kb_documents.
//
// # The API and the follow-ups (decision 0022)
//
// API serves the producers over HTTP (disputes.api_addr): POST /v1/disputes
// with a required Idempotency-Key and POST /v1/transactions/{txn_id}/flag,
// each writing its business row, its outbox row and the key's row
// (Store.Idempotent) in one transaction, so a repeated request is answered
// with the first response and writes nothing.
//
// ReminderSweep fires due reminders, each once across replicas (the log line
// "dispute reminder due" and eventpipe_disputes_reminders_fired_total).
// ReversalWorker completes pending reversals outside the inbox's
// transaction through a Reverser (HTTPReverser in production, with an
// idempotency key derived from the dispute id), recording each outcome
// durably; a redelivery or a crash between the call and the record never
// reverses twice.
//
// # Document ingestion
//
// The ingest-worker (on ingest-queue, when Handlers.Objects is set) decodes
// S3 event notifications exactly as S3 sends them to SQS (DecodeS3Notification):
// several Records per message, keys URL-encoded ('+' for a space, %XX).
// ObjectCreated:* records of the configured bucket (Handlers.Bucket,
// disputes.s3_bucket) are ingested; S3's s3:TestEvent, records of other
// events and records of other buckets are dropped with a log line; a body
// that is not an S3 notification is permanent. Each document is read from
// Objects, refused without a header block (permanent), and recorded with
// its DocumentIngested event in one transaction (the outbox on Postgres),
// once per (bucket, key, sequencer). Permanent failures — also a missing
// object, a denied read, an object too large — fail until maxReceiveCount 3,
// then ingest-dlq (§4).
//
// Objects is S3 in production: the composition root hands in app/s3store
// through Adapters (NewModule), used whenever disputes.s3_bucket is set.
// MemoryObjects serves sample traffic and tests only. With neither the
// ingest-worker is off, with a warning.
package disputes
