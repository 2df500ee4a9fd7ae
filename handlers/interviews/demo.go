package interviews

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"
)

// NewObjectID returns a fresh ObjectId-shaped id: 4 bytes of Unix time and 8
// random bytes, in lower-case hex.
func NewObjectID() string {
	var b [12]byte
	binary.BigEndian.PutUint32(b[:4], uint32(time.Now().Unix())) //nolint:gosec // ObjectIds carry 32-bit seconds until 2106
	_, _ = rand.Read(b[4:])
	return hex.EncodeToString(b[:])
}

// SampleTraffic is the embedded mode's demo of this spec (`make run`): it
// seeds store with an organisation, two credit lots and four interviews, and
// publishes what the API would:
//
//   - a 10-minute interview completed → 10 credits settled, the rest of its
//     15 released, a report written by the generator;
//   - a 45-second interview completed → 0 credits, an insufficient-evidence
//     report without the model;
//   - an interview failed → its whole reservation released;
//   - the first completion once more → "already settled", no second report.
//
// It then waits (up to 30 s, or until ctx ends) for the settlements and
// reports, and logs the organisation's balances and ledger. The routes must
// be running on the same store. It returns the organisation's id.
func SampleTraffic(ctx context.Context, store Store, producer Producer, logger *slog.Logger) (string, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	org := Organization{ID: NewObjectID(), Name: "Sample Org"}
	if err := store.CreateOrganization(ctx, org); err != nil {
		return "", fmt.Errorf("sample traffic: %w", err)
	}
	soon := time.Now().Add(30 * 24 * time.Hour)
	for _, lot := range []CreditLot{
		{ID: NewObjectID(), OrganizationID: org.ID, Remaining: 20, ExpiresAt: &soon},
		{ID: NewObjectID(), OrganizationID: org.ID, Remaining: 100},
	} {
		if err := store.AddCreditLot(ctx, lot); err != nil {
			return "", fmt.Errorf("sample traffic: %w", err)
		}
	}
	answers := []QA{
		{Question: "Tell me about a system you designed.", Answer: "I designed a payment ledger on Postgres with idempotent settlement and an outbox for events."},
		{Question: "How do you handle retries?", Answer: "Exponential backoff with jitter, a cap on attempts, and a dead-letter queue someone actually watches."},
		{Question: "What would you improve?", Answer: "Better load tests before launch, and alarms on queue age rather than depth."},
	}
	long := NewInterview{ID: NewObjectID(), OrganizationID: org.ID, DurationSeconds: 630, Transcript: answers, CreditsReserved: 15}
	short := NewInterview{ID: NewObjectID(), OrganizationID: org.ID, DurationSeconds: 45, Transcript: answers[:1], CreditsReserved: 15}
	failed := NewInterview{ID: NewObjectID(), OrganizationID: org.ID, Status: "FAILED", CreditsReserved: 15}
	for _, in := range []NewInterview{long, short, failed} {
		if err := store.CreateInterview(ctx, in); err != nil {
			return "", fmt.Errorf("sample traffic: %w", err)
		}
	}
	logger.InfoContext(ctx, "interviews sample traffic: seeded", slog.String("organization_id", org.ID),
		slog.Int("credits", 120), slog.Int("reserved", 45))

	ctx = WithRequestID(ctx, "sample-"+NewObjectID())
	now := time.Now()
	publishes := []func() error{
		func() error {
			_, err := producer.PublishInterviewCompleted(ctx, InterviewCompleted{InterviewID: long.ID, OrganizationID: org.ID, CompletedAt: now, DurationSeconds: 630})
			return err
		},
		func() error {
			_, err := producer.PublishInterviewCompleted(ctx, InterviewCompleted{InterviewID: short.ID, OrganizationID: org.ID, CompletedAt: now, DurationSeconds: 45})
			return err
		},
		func() error {
			_, err := producer.PublishInterviewFailed(ctx, InterviewFailed{InterviewID: failed.ID, OrganizationID: org.ID, FailureReason: "candidate disconnected"})
			return err
		},
		func() error { // a redelivery, as a retrying API would cause
			_, err := producer.PublishInterviewCompleted(ctx, InterviewCompleted{InterviewID: long.ID, OrganizationID: org.ID, CompletedAt: now, DurationSeconds: 630})
			return err
		},
	}
	for _, p := range publishes {
		if err := p(); err != nil {
			return "", fmt.Errorf("sample traffic: %w", err)
		}
	}

	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		ready := true
		for _, id := range []string{long.ID, short.ID} {
			if r, ok, err := store.LoadReport(ctx, id); err != nil || !ok || r.Status != ReportCompleted {
				ready = false
			}
		}
		if iv, err := store.Interview(ctx, failed.ID); err != nil || iv.SettledAt == nil {
			ready = false
		}
		if ready {
			break
		}
		select {
		case <-ctx.Done():
			return org.ID, nil
		case <-deadline.C:
			logger.WarnContext(ctx, "interviews sample traffic: not all reports within 30 s", slog.String("organization_id", org.ID))
			return org.ID, nil
		case <-tick.C:
		}
	}
	o, err := store.Organization(ctx, org.ID)
	if err != nil {
		return "", fmt.Errorf("sample traffic: %w", err)
	}
	entries, err := store.LedgerEntries(ctx, org.ID)
	if err != nil {
		return "", fmt.Errorf("sample traffic: %w", err)
	}
	for _, e := range entries {
		logger.InfoContext(ctx, "interviews sample traffic: ledger", slog.String("kind", e.Kind),
			slog.Int64("credits", e.Credits), slog.String("interview_id", e.ReferenceID), slog.String("lot_id", e.LotID))
	}
	longReport, _, _ := store.LoadReport(ctx, long.ID)
	shortReport, _, _ := store.LoadReport(ctx, short.ID)
	logger.InfoContext(ctx, "interviews sample traffic: done",
		slog.String("organization_id", org.ID),
		slog.Int64("available_credits", o.AvailableCredits),
		slog.Int64("reserved_credits", o.ReservedCredits),
		slog.String("long_interview_report", longReport.Content.Recommendation),
		slog.String("short_interview_report", shortReport.Content.Recommendation))
	return org.ID, nil
}
