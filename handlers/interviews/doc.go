// Package interviews runs the interviews SQS report-queues spec on any
// broker: the interview-completed consumer that settles an interview's
// credits exactly once, and the report-generate consumer that turns a settled
// interview into a report, with its own attempt cap.
//
// # Queues and wire format
//
// Bodies are raw JSON with no envelope; the requestId and eventType
// attributes travel as message metadata (SQS message attributes, AMQP
// headers, Postgres metadata). interview-completed carries a union: a body
// with a "type" key is an interview.failed event, any other object an
// interview completion. A body that is not a JSON object (null included) or
// fails its schema is logged and dropped (eventpipe's rule, where the spec
// is silent on non-objects).
//
// # The producer as an API
//
// The spec's producer is the Fargate API's bot callbacks (completeInterview
// → publishInterviewCompleted, failInterview → publishInterviewFailed).
// BotAPI serves them over HTTP on interviews.api_addr: POST
// /interviews/{interviewId}/bot/complete and /bot/fail publish through the
// Producer with the caller's X-Request-Id (or a generated one) as the
// requestId attribute and answer 202 once the message is published. The API
// only publishes; the consumer settles (decision 0023).
//
// # Exactly-once credits
//
// A settlement is one transaction: the claim (UPDATE … WHERE settled_at IS
// NULL), the ledger entries, the lot and organisation balances and
// retentionExpiresAt. A redelivery finds the claim taken and does nothing, so
// report.generate is asked for only by the delivery that really settled: the
// request goes to the service's outbox writer inside the settlement (the
// FollowUp), so with the Postgres store it is an outbox row in the same
// transaction (nothing to lose, nothing phantom), and with the memory store it
// is published right after the in-memory commit, a publish error logged, not
// returned (the spec's rule).
//
// # Report generation
//
// The report-generate consumer follows the spec's state machine: COMPLETED →
// done; attemptCount ≥ MaxReportAttempts → FAILED and done; otherwise an
// atomic claim (NOT_STARTED / FAILED → PROCESSING, attemptCount + 1), an
// insufficient-evidence report without the model when the interview is too
// short or has too few substantive answers, else the ReportGenerator. A
// generator error marks the report FAILED and is returned as transient, so
// the broker retries and, after three attempts, dead-letters the message.
package interviews
