// Package chaos is a counting fault-injection harness: it proves from the
// outside that eventpipe loses nothing, applies nothing twice and keeps a
// booking session's order while its processes are killed and its broker
// connections are cut and stalled.
//
// Everything runs in the package's tests. `make chaos` runs TestChaos with
// EVENTPIPE_CHAOS=1; CHAOS_QUICK=1 runs the quick pass (under 10 minutes
// for the four brokers). Without EVENTPIPE_CHAOS, TestChaos skips and only
// the unit tests of the fault proxy and the table run.
//
// For each broker (RabbitMQ, RabbitMQ with quorum queues, the SQS emulator,
// the Postgres broker) three flows run side by side, each against `eventpipe
// serve` processes started with exec from a freshly built binary, each on a
// schema and (RabbitMQ) a virtual host of its own, with its broker and
// database connections going through a Proxy the harness controls:
//
//   - disputes outbox: the harness commits disputes and flagged transactions
//     with the disputes store (business row and outbox row in one
//     transaction); a serve process with the outbox relay and a second one
//     without it consume domain-events; each event's effect is one row
//     (dispute_reminders, review_queue).
//   - booking FIFO: a foreign client (raw amqp091-go, the AWS SDK, the
//     Postgres broker's publisher) publishes sessions × events in order to
//     booking-session-events.fifo; one serve process applies them
//     (booking_session_events, in applied order).
//   - stackup AI callbacks: the same foreign clients send StackUp
//     generate.questions / generate.followup requests; two serve processes
//     run the AI worker on a local OpenAI-compatible model server
//     (testenv.ChatServer, 50–800 ms an answer) and the outbox relay
//     publishes their callbacks, which the harness consumes and counts by
//     correlation id (a second callback message for one request is a
//     duplicated effect; a second delivery of the same one is not).
//
// Faults, at random gaps while the traffic flows: SIGKILL of a consumer and
// of the relay's process (restarted after a pause), SIGTERM (restarted once
// it exits), every broker connection reset (new ones refused for a moment),
// every broker connection stalled, every database connection reset, a
// window of model answers slower than the lease and the visibility timeout
// (stackup), SIGTERM of both AI workers during such an answer, longer than
// serve's shutdown timeout (stackup); beside them, already-confirmed messages re-sent with their ids
// (duplicates); CHAOS_FAULTS picks a subset; with
// CHAOS_BROKER_RESTART=1 also RabbitMQ's stop_app/start_app and a
// PostgreSQL crash (immediate shutdown) and restart. Then the harness waits for the flows to settle and
// counts, in PostgreSQL and the dead-letter queues: sent, effects, lost,
// duplicated effects (a BEFORE INSERT trigger records every committed
// application of an effect), dead letters expected and other, events out of
// order, faults by kind and the longest time from a fault to the next
// effect. The test fails on a lost or duplicated effect or an event out of
// order. RELIABILITY.md has the contract, the faults and the last measured
// table.
package chaos
