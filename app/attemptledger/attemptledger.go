// Package attemptledger counts, durably, the crash redeliveries of messages
// on ordered classic RabbitMQ queues: the rabbitmq adapter's AttemptLedger
// (see app/broker/rabbitmq/attempts.go and decision 0016).
//
// A classic queue counts no deliveries; it only flags a delivery whose
// consumer died holding it. On other classic queues the adapter counts such
// a redelivery by republishing a counted copy, but on an ordered (FIFO)
// queue the copy would go behind the later messages of its group. So the
// count lives outside the queue, in PostgreSQL, where it outlives the
// consumer that crashed: Bump before the redelivery is handled, Forget once
// it is settled.
//
// Postgres is the ledger (table attempt_ledger, migration 00009). Memory is
// its in-process twin for tests; it counts only crashes that its own process
// survives (a dropped connection), so production never uses it.
package attemptledger

import (
	"errors"
	"time"
)

// DefaultTTL is how long a row not bumped again is kept. A row outlives its
// message only when Forget failed; it would then count against a later
// delivery of the same id (a redrive from the DLQ). A crash loop bumps its
// row within minutes, so a week never resets a live count.
const DefaultTTL = 7 * 24 * time.Hour

func checkKey(queue, messageID string) error {
	if queue == "" || messageID == "" {
		return errors.New("attempt ledger: queue and message id are required")
	}
	return nil
}
