package joinlink

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// outcomeFailed is the failed outcome of a sweep or a generation.
const outcomeFailed = "failed"

// Metrics are the spec's counters and the FAILED gauge (OQ-JLG-103: a
// FAILED session waits for the next sweep; alert when the count stays up).
type Metrics struct {
	sweeps         *prometheus.CounterVec
	generations    *prometheus.CounterVec
	scheduleErrors *prometheus.CounterVec
}

// NewMetrics registers on reg:
//
//	eventpipe_joinlink_sweeps_total{outcome="swept|skipped|failed"}
//	eventpipe_joinlink_generations_total{outcome="generated|skipped|failed"}
//	eventpipe_joinlink_schedule_errors_total{op="upsert|delete"}   scheduler calls that failed (best effort: the API call still succeeded)
//	eventpipe_joinlink_failed_sessions   sessions in FAILED, counted in store at each scrape
func NewMetrics(reg prometheus.Registerer, store Store) (*Metrics, error) {
	m := &Metrics{
		sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eventpipe_joinlink_sweeps_total",
			Help: "Join-link fallback sweeps by outcome: swept, skipped (another replica held the sweep lock), failed.",
		}, []string{"outcome"}),
		generations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eventpipe_joinlink_generations_total",
			Help: "Join-link generations by outcome: generated (bulkRegister dispatched), skipped (claim lost), failed.",
		}, []string{"outcome"}),
		scheduleErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eventpipe_joinlink_schedule_errors_total",
			Help: "Join-link schedule upserts and deletes the scheduler refused (logged; the database stays the truth and the sweep the net).",
		}, []string{"op"}),
	}
	failed := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "eventpipe_joinlink_failed_sessions",
		Help: "Program sessions whose join-link generation is FAILED (retried by the next sweep); -1 when the store cannot be read.",
	}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		n, err := store.CountStatus(ctx, Failed)
		if err != nil {
			return -1
		}
		return float64(n)
	})
	for _, c := range []prometheus.Collector{m.sweeps, m.generations, m.scheduleErrors, failed} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, o := range []string{"swept", string(Skipped), outcomeFailed} {
		m.sweeps.WithLabelValues(o)
	}
	for _, o := range []string{string(Generated), string(Skipped), outcomeFailed} {
		m.generations.WithLabelValues(o)
	}
	m.scheduleErrors.WithLabelValues("upsert")
	m.scheduleErrors.WithLabelValues("delete")
	return m, nil
}

func (m *Metrics) scheduleError(op string) {
	if m != nil {
		m.scheduleErrors.WithLabelValues(op).Inc()
	}
}

func (m *Metrics) sweep(outcome string) {
	if m != nil {
		m.sweeps.WithLabelValues(outcome).Inc()
	}
}

func (m *Metrics) generation(outcome Outcome) {
	if m != nil {
		m.generations.WithLabelValues(string(outcome)).Inc()
	}
}
