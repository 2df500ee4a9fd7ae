package disputes

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// SampleTraffic is the embedded mode's demo of this spec (`make run`): what
// core-api and the ingest-worker would do, through store (whose events go
// through the outbox on Postgres, or are published after the in-memory
// commit):
//
//   - a failed_but_debited UPI dispute with the API's tat_due_at → a TAT
//     timer, eligible for auto-reversal;
//   - a card dispute without tat_due_at → the default TAT;
//   - two flagged transactions, risk 35 and 92 → one review entry, one AML;
//   - a document ingested → the KB statistics refreshed. With objects and
//     pub, the document is put in objects and its S3 ObjectCreated
//     notification published to ingest-queue (the ingest-worker records it);
//     without, it is recorded directly.
//
// It then waits (up to 30 s, or until ctx ends) for the effects and logs
// them. The events-worker (and ingest-worker) must be running on the same
// store (and objects).
func SampleTraffic(ctx context.Context, store Store, objects *MemoryObjects, pub message.Publisher, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	now := time.Now().UTC()
	due := now.Add(24 * time.Hour)
	upi := Dispute{ID: NewDisputeID(), TxnID: NewID("txn", now), ReasonCode: ReasonFailedButDebited, Rail: RailUPI, TATDueAt: &due}
	card := Dispute{ID: NewDisputeID(), TxnID: NewID("txn", now), ReasonCode: "credit_not_received", Rail: "CARD"}
	low := Flag{TxnID: NewID("txn", now), RiskScore: 35, Reason: "velocity"}
	high := Flag{TxnID: NewID("txn", now), RiskScore: 92, Reason: "sanctioned counterparty"}
	for _, d := range []Dispute{upi, card} {
		if _, err := store.RaiseDispute(ctx, d); err != nil {
			return fmt.Errorf("disputes sample traffic: %w", err)
		}
	}
	for _, f := range []Flag{low, high} {
		if _, err := store.FlagTransaction(ctx, f); err != nil {
			return fmt.Errorf("disputes sample traffic: %w", err)
		}
	}
	key := "policies/" + NewID("doc", now) + ".md"
	if objects != nil && pub != nil {
		objects.Put(SampleBucket, key, []byte("---\ntitle: Dispute handling policy\nowner: disputes\n---\nRaise, review, resolve within TAT.\n"))
		msg := message.NewMessage(watermill.NewUUID(), S3Notification(SampleBucket, key, now))
		if err := pub.Publish(IngestQueue, msg); err != nil {
			return fmt.Errorf("disputes sample traffic: %w", err)
		}
	} else if _, err := store.RecordDocument(ctx, Document{Bucket: SampleBucket, Key: key}); err != nil {
		return fmt.Errorf("disputes sample traffic: %w", err)
	}
	logger.InfoContext(ctx, "disputes sample traffic: 2 disputes raised, 2 transactions flagged, 1 document ingested")

	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		_, ok1, err1 := store.Reminder(ctx, upi.ID)
		_, ok2, err2 := store.Reminder(ctx, card.ID)
		lowQ, err3 := store.ReviewEntries(ctx, low.TxnID)
		highQ, err4 := store.ReviewEntries(ctx, high.TxnID)
		stats, err5 := store.KBStats(ctx)
		if err1 == nil && err2 == nil && err3 == nil && err4 == nil && err5 == nil &&
			ok1 && ok2 && len(lowQ) == 1 && len(highQ) == 1 && stats.Documents > 0 {
			logger.InfoContext(ctx, "disputes sample traffic: done",
				slog.String("low_risk_queue", lowQ[0].Queue), slog.String("high_risk_queue", highQ[0].Queue),
				slog.Int64("kb_documents", stats.Documents))
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-deadline.C:
			logger.WarnContext(ctx, "disputes sample traffic: not all effects within 30 s")
			return nil
		case <-tick.C:
		}
	}
}
