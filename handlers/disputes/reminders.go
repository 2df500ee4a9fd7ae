package disputes

import (
	"context"
	"log/slog"
	"time"
)

// DefaultReminderSweepInterval is how often the reminder sweep looks for due
// reminders (disputes.reminder_sweep_interval): reminders fire a day before
// their TAT, so a minute late is nothing.
const DefaultReminderSweepInterval = time.Minute

// reminderBatch bounds one FireDueReminders; a tick repeats until a batch
// comes back short.
const reminderBatch = 100

// ReminderSweep fires the TAT reminders whose time has come: each due,
// unfired reminder is marked fired (dispute_reminders.reminded_at) and then
// announced — the log line "dispute reminder due" with the dispute, its
// transaction and its TAT due time, and
// eventpipe_disputes_reminders_fired_total. The mark is the store's
// (FireDueReminders), so with any number of replicas sweeping, each reminder
// fires once; a crash between the mark and the log line loses that line (at
// most once: a reminder is a nudge, never a money movement).
type ReminderSweep struct {
	Store Store
	// Interval between sweeps; DefaultReminderSweepInterval when 0.
	Interval time.Duration
	Logger   *slog.Logger
	Metrics  *Metrics
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Tick fires every reminder due now and returns how many it fired.
func (s *ReminderSweep) Tick(ctx context.Context) (int, error) {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	log := s.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fired := 0
	for {
		due, err := s.Store.FireDueReminders(ctx, now(), reminderBatch)
		if err != nil {
			return fired, err
		}
		for _, r := range due {
			s.Metrics.reminderFired()
			log.InfoContext(ctx, "dispute reminder due", slog.String("dispute_id", r.DisputeID), slog.String("txn_id", r.TxnID),
				slog.Time("tat_due_at", r.TATDueAt), slog.Time("remind_at", r.RemindAt), slog.String("event_id", r.EventID))
		}
		fired += len(due)
		if len(due) < reminderBatch {
			return fired, nil
		}
	}
}

// Run sweeps at once and then every Interval until ctx ends.
func (s *ReminderSweep) Run(ctx context.Context) error {
	interval := s.Interval
	if interval <= 0 {
		interval = DefaultReminderSweepInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := s.Tick(ctx); err != nil && ctx.Err() == nil && s.Logger != nil {
			s.Logger.ErrorContext(ctx, "dispute reminder sweep failed", slog.Any("error", err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
