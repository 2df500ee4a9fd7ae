package disputes

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Reversal outcomes of eventpipe_disputes_reversals_total.
const (
	outcomeReversed = "reversed"
	outcomeFailed   = "failed"
	outcomeRetried  = "retried"
)

// Metrics are the follow-ups' counters and the pending-reversals gauge.
type Metrics struct {
	remindersFired prometheus.Counter
	reversals      *prometheus.CounterVec
}

// NewMetrics registers on reg:
//
//	eventpipe_disputes_reminders_fired_total                                  reminders the sweep fired
//	eventpipe_disputes_reversals_total{outcome="reversed|failed|retried"}     reversal calls by outcome
//	eventpipe_disputes_reversals_pending                                      pending reversals, counted in store at each scrape (-1: unreadable)
//
// A pending count that only grows means no reversal worker runs (no
// disputes.reversal_url) or the payment system keeps refusing: alert on it.
func NewMetrics(reg prometheus.Registerer, store Store) (*Metrics, error) {
	m := &Metrics{
		remindersFired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eventpipe_disputes_reminders_fired_total",
			Help: "Dispute TAT reminders fired by the reminder sweep (each once, whatever the number of replicas).",
		}),
		reversals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eventpipe_disputes_reversals_total",
			Help: "Auto-reversal calls by outcome: reversed, failed (permanent, or out of attempts), retried (transient, due again later).",
		}, []string{"outcome"}),
	}
	pending := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "eventpipe_disputes_reversals_pending",
		Help: "Auto-reversals of eligible failed_but_debited UPI disputes not done yet; -1 when the store cannot be read.",
	}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		n, err := store.PendingReversals(ctx)
		if err != nil {
			return -1
		}
		return float64(n)
	})
	for _, c := range []prometheus.Collector{m.remindersFired, m.reversals, pending} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, o := range []string{outcomeReversed, outcomeFailed, outcomeRetried} {
		m.reversals.WithLabelValues(o)
	}
	return m, nil
}

func (m *Metrics) reminderFired() {
	if m != nil {
		m.remindersFired.Inc()
	}
}

func (m *Metrics) reversal(outcome string) {
	if m != nil {
		m.reversals.WithLabelValues(outcome).Inc()
	}
}
