package booking

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"time"

	"github.com/oklog/ulid/v2"
)

// SampleTraffic is the embedded mode's demo of this spec (`make run`): one
// booking session as the Scheduler widget would produce it, through p —
//
//   - step-completed over HTTP, then the same logical event again over
//     Socket.IO (same derived id: one effect);
//   - question-answered over Socket.IO;
//   - booking-completed over HTTP.
//
// It then waits (up to 30 s, or until ctx ends) for the session's three
// effects in store and logs them. The processor must be running on store.
func SampleTraffic(ctx context.Context, p Producer, store Store, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	session := "bks_" + ulid.MustNew(ulid.Timestamp(now), rand.Reader).String()
	step := Event{BookingSessionID: session, Type: TypeStepCompleted, OccurredAt: now, StepID: "pick-slot",
		Data: []byte(`{"slot":"2026-12-01T10:00:00Z","durationMinutes":30}`)}
	answer := Event{BookingSessionID: session, Type: TypeQuestionAnswered, OccurredAt: now.Add(time.Second), StepID: "intake",
		Data: []byte(`{"questionId":"q-reason","answer":"First visit"}`)}
	done := Event{BookingSessionID: session, Type: TypeBookingCompleted, OccurredAt: now.Add(2 * time.Second)}
	for _, s := range []struct {
		transport string
		ev        Event
	}{{TransportHTTP, step}, {TransportSocketIO, step}, {TransportSocketIO, answer}, {TransportHTTP, done}} {
		if _, err := p.Enqueue(ctx, s.transport, s.ev); err != nil {
			return fmt.Errorf("booking sample traffic: %w", err)
		}
	}
	logger.InfoContext(ctx, "booking sample traffic: 4 events enqueued (one sent on both transports)", slog.String("booking_session_id", session))

	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		s, ok, err := store.Session(ctx, session)
		if err == nil && ok && s.Events >= 3 {
			logger.InfoContext(ctx, "booking sample traffic: done", slog.String("booking_session_id", session),
				slog.String("status", s.Status), slog.Int64("events", s.Events))
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-deadline.C:
			logger.WarnContext(ctx, "booking sample traffic: not all effects within 30 s")
			return nil
		case <-tick.C:
		}
	}
}
