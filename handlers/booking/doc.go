// Package booking runs the booking session FIFO pipeline spec ("Booking
// session pipeline") on any broker: one entry path, one queue, one consumer
// for the Scheduler widget's session events.
//
// # Producers (both transports)
//
// The HTTP controller (Producer.HTTPHandler) and the Socket.IO gateway
// (Producer.OnSocketEvent) decode an event strictly, derive its id with
// DeriveEventID ("pre-derivation at the gateway") and enqueue it on
// booking-session-events.fifo through one Producer.Enqueue: the "unified"
// part. The message UUID, the body's eventId and metadata.DeduplicationIDKey
// (SQS MessageDeduplicationId) are the derived id; metadata.GroupIDKey (SQS
// MessageGroupId) is the booking session id (eventpipe's rule; the spec names
// no group), so a session's events are consumed in order. The same logical
// event from both transports derives the same id and collapses at SQS
// (5-minute window); on the other brokers ".fifo" is only a name and the
// consumer's inbox is the gate.
//
// # Gateway
//
// serve runs both producers on one listener when booking.gateway_addr is set
// (Gateway, decision 0019): POST HTTPPath (/booking-session/events) for the
// HTTP controller, and a Socket.IO v4 server (the npm socket.io-client 3/4's
// protocol) on SocketIOPath — namespace SocketNamespace (/booking-session),
// the socket's session in the handshake's auth.bookingSessionId, event
// SocketEvent (session-event) with the event as its one argument, acked with
// {"eventId": …} or {"error": …, "status": …} (the status HTTP would answer:
// 400 invalid, 413 over 1 MiB, 503 not enqueued). The spec names no path,
// namespace or event: these names are eventpipe's. The gateway is an intake
// server: serve's drain closes it first.
//
// # Derived id
//
// DeriveEventID hashes (SHA-256) a canonical projection of the event: the
// booking session id, the event type, the event moment (UTC, milliseconds),
// the step id and the data fields. data is canonical JSON (keys sorted at
// every depth, numbers normalised, insignificant whitespace removed), and
// absent, null and empty ({}) data are the same. The transport is not
// projected. The id is "bse_" + 64 hex digits.
//
// # Consumer
//
// The booking-session-processor reads eventId from the body and forwards it
// unchanged to the inbox (app/inbox), which runs the effect once per id. It
// never synthesises a missing id (no fallback to DeriveEventID or the
// message UUID): a body without eventId is a permanent error. The effect
// (Store.Apply) records the event, in applied order, and updates the
// session's summary row (migrations/00006_booking.sql).
//
// # Failures
//
// Policy: five attempts by broker redelivery (eventpipe's rule, the spec
// being silent: max receives 5 before the DLQ), then
// booking-session-events-dlq.fifo. A permanent error (a body that does not
// decode, a missing eventId) fails until then like any other
// (route.FailUntilMax): the spec knows one path to the DLQ, "a poison
// message — one the processor fails to handle after retries", and the SQS
// redrive policy (maxReceiveCount 5) does the same natively.
//
// # Drain-to-zero gate
//
// Before promoting a release that changes the message-body schema
// (§"DLQ posture"), `eventpipe drain-check --queue
// booking-session-events.fifo --with-dlq` exits 0 only when the queue and its
// DLQ hold no message (ready, in flight or delayed); see broker.CheckDrained.
// A count the broker cannot give (RabbitMQ's in-flight messages without its
// management API) keeps the gate shut.
package booking
