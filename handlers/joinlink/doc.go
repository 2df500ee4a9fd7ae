// Package joinlink runs the join-link scheduled-generation spec
// ("JOIN_LINK_GENERATION TRD") on any broker: a one-time scheduled
// JOIN_LINK_GENERATION event per program session, a processor that classifies
// failures, one generation entry point guarded by an atomic
// conditional-UPDATE claim, a 4-hourly fallback sweep, and an admin-only HTTP
// API.
//
// # Wire format (§API Contracts 2)
//
//	{"queueType":"EVENT","subType":"JOIN_LINK_GENERATION","timestamp":"…",
//	 "correlationId":"join-link-<id>","data":{"programSessionId":42,"role":"attendee","batchSize":100,"actorUserId":7}}
//
// Encode is strict (fixed types, correlationId = the schedule name, positive
// programSessionId, no unknown fields through Validate); Decode is lenient
// (unknown fields ignored and never kept; only subType and
// data.programSessionId required). The queue is join-link-generation
// (config/topology/joinlink.yaml).
//
// # The claim (dec-05, dec-09, dec-10)
//
// Service.GenerateForSession is the one gate for every trigger (the
// processor, the sweep). Store.Claim is one UPDATE … SET
// link_generation_status = 'IN_PROGRESS', updated_at = now WHERE status IN
// (SCHEDULED, FAILED) OR (status = IN_PROGRESS AND updated_at < now -
// StaleAfter): a lost claim is a no-op (a duplicate event is acked), COMPLETED
// is never reclaimed (inv-03), a run stuck IN_PROGRESS for 30 min is
// reclaimed (risk-01). The claim's updated_at fences the run: Finish (→
// COMPLETED after bulkRegister, → FAILED on its error) only lands while the
// run still holds the claim.
//
// # Failures (§Idempotency and Failure Contracts)
//
// Validation errors (invalid type, missing programSessionId) and a missing
// session are non-retryable: failure.Permanent, dropped (acked with a log
// line and eventpipe_messages_dropped_total). Generation errors are
// retryable (broker redelivery, MaxRetryAttempts = 5 in all) unless the
// Generator marks them permanent; the session is FAILED meanwhile. There is
// no DLQ (dec-07): an event past 5 receives or older than 24 h
// (MaxEventAge, by its timestamp) is acknowledged with a log line and left
// to the sweep, which retries FAILED sessions every 4 h.
//
// # Scheduling (dec-01)
//
// Scheduler is JoinLinkSchedulerService: the ENABLE_JOIN_LINK_SCHEDULER
// guard, the deterministic name "join-link-<id>" (upsert/delete are
// idempotent), best effort. On SQS, Schedules is EventBridge Scheduler
// (package app/eventbridge, handed in through Adapters: one-time at()
// schedules targeting the queue, deleted after they fire). On the other
// brokers it has an in-memory and a Postgres (join_link_schedules)
// implementation, and a Dispatcher publishes due schedules to the queue and
// deletes them.
//
// # Fallback (dec-06, inv-03)
//
// Service.Sweep takes up to FallbackBatchLimit (50) sessions due before
// now - Grace (30 min), SCHEDULED, FAILED or stale IN_PROGRESS, oldest
// first, and runs each through GenerateForSession in turn. RunFallback
// sweeps at start and then on a cron schedule on the wall clock
// (DefaultFallbackSchedule, every 4 h at minute 0, UTC; an @every interval
// is counted from the zero time, so replicas share its ticks), under a
// SweepLock — a PostgreSQL advisory lock, and the newest tick taken
// (joinlink_sweep_ticks) — so that one replica sweeps each tick, even one
// whose timer fires after another's sweep of it ended. Writes
// no user asked for are stamped Service.SystemActorID; Metrics counts
// sweeps and generations and gauges the FAILED sessions (OQ-JLG-103).
//
// # Admin API (§API Contracts 1)
//
// API serves PATCH /program-session/{id}/link-generation for admins only,
// authenticated by a verified JWT (app/auth, decision 0017): 401 without a
// valid bearer token, 403 when its roles lack "admin" or its sub is not a
// positive user id; the sub is updated_by, and no header a client sets
// (X-User-Id, X-Active-Role) counts. Then 404 for a missing session, 400 for
// a time that is not a future ISO-8601 UTC time, all with the error envelope
// {"success":false,"data":null,"error":{"code","message"}}. The module
// mounts it only when the service has a verifier (spec.Deps.Verifier).
//
// # Program sessions
//
// eventpipe has no program-session module: migrations/00007_joinlink.sql
// creates a stand-in hdb_program_session with the spec's columns. Generator
// (bulkRegister) is HTTPGenerator, the online-session subsystem's endpoint;
// MemoryGenerator is the tests' and sample traffic's fake.
package joinlink
