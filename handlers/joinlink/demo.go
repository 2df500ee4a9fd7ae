package joinlink

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// SampleTraffic is the embedded mode's demo of this spec (`make run`):
//
//   - a session scheduled 2 s ahead through svc (the admin's PATCH): its
//     schedule fires, the event reaches the processor, the session is
//     claimed and generated → COMPLETED;
//   - a session whose time passed an hour ago with no event (a missed
//     schedule, risk-02): one fallback sweep generates it → COMPLETED.
//
// It then waits (up to 30 s, or until ctx ends) for both and logs them. The
// processor route and a Dispatcher on svc's schedules must be running.
func SampleTraffic(ctx context.Context, svc *Service, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	now := svc.now()
	scheduled, err := svc.Store.CreateSession(ctx, now)
	if err != nil {
		return fmt.Errorf("join-link sample traffic: %w", err)
	}
	at := now.Add(2 * time.Second)
	if _, err := svc.SetLinkGeneration(ctx, scheduled, &at, 1); err != nil {
		return fmt.Errorf("join-link sample traffic: %w", err)
	}
	missed, err := svc.Store.CreateSession(ctx, now)
	if err != nil {
		return fmt.Errorf("join-link sample traffic: %w", err)
	}
	past := now.Add(-time.Hour)
	if _, err := svc.Store.SetLinkGeneration(ctx, missed, &past, 1, now, now.Add(-StaleAfter)); err != nil {
		return fmt.Errorf("join-link sample traffic: %w", err)
	}
	if _, err := svc.Sweep(ctx); err != nil {
		return fmt.Errorf("join-link sample traffic: %w", err)
	}
	logger.InfoContext(ctx, "join-link sample traffic: 1 session scheduled 2 s ahead, 1 missed session swept",
		slog.Int64("scheduled_session", scheduled), slog.Int64("missed_session", missed))

	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		a, err1 := svc.Store.Session(ctx, scheduled)
		b, err2 := svc.Store.Session(ctx, missed)
		if err1 == nil && err2 == nil && a.Status == Completed && b.Status == Completed {
			logger.InfoContext(ctx, "join-link sample traffic: done", slog.String("scheduled_status", string(a.Status)), slog.String("missed_status", string(b.Status)))
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-deadline.C:
			logger.WarnContext(ctx, "join-link sample traffic: not all sessions COMPLETED within 30 s",
				slog.String("scheduled_status", string(a.Status)), slog.String("missed_status", string(b.Status)))
			return nil
		case <-tick.C:
		}
	}
}
