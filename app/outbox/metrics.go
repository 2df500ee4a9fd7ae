package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the relay's Prometheus collectors.
type metrics struct {
	backlog   prometheus.Gauge
	lag       prometheus.Gauge
	parkedNow prometheus.Gauge
	held      prometheus.Gauge
	published *prometheus.CounterVec
	failed    *prometheus.CounterVec
	parked    *prometheus.CounterVec
}

// newMetrics registers the relay's collectors with reg, reusing those
// already registered by another relay on the same registry; nil reg means no
// metrics.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &metrics{
		backlog: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "eventpipe_outbox_backlog",
			Help: "Outbox rows waiting to be published (not parked).",
		}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "eventpipe_outbox_lag_seconds",
			Help: "Age of the oldest outbox row waiting to be published (0 when none).",
		}),
		parkedNow: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "eventpipe_outbox_parked",
			Help: "Outbox rows parked because the broker refused them permanently (e.g. payload too large); alarm when above 0.",
		}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "eventpipe_outbox_held",
			Help: "Outbox rows held back by a parked row of their ordering key (strict order); they go out once it is requeued.",
		}),
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eventpipe_outbox_published_total",
			Help: "Outbox messages published and marked, per queue.",
		}, []string{"queue"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eventpipe_outbox_failed_total",
			Help: "Failed outbox publish attempts, per queue.",
		}, []string{"queue"}),
		parked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eventpipe_outbox_parked_total",
			Help: "Outbox messages parked because the broker refused them permanently, per queue.",
		}, []string{"queue"}),
	}
	var err error
	m.backlog = register(reg, m.backlog, &err)
	m.lag = register(reg, m.lag, &err)
	m.parkedNow = register(reg, m.parkedNow, &err)
	m.held = register(reg, m.held, &err)
	m.published = register(reg, m.published, &err)
	m.failed = register(reg, m.failed, &err)
	m.parked = register(reg, m.parked, &err)
	if err != nil {
		return nil, fmt.Errorf("outbox relay: metrics: %w", err)
	}
	return m, nil
}

// register registers c, or returns the identical collector already
// registered, so several relays can share one registry.
func register[C prometheus.Collector](reg prometheus.Registerer, c C, errp *error) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		*errp = errors.Join(*errp, err)
	}
	return c
}

// gaugeEvery keeps a busy relay from counting the backlog after every batch.
const gaugeEvery = time.Second

// refreshGauges measures the backlog, its age, the parked rows and the rows
// they hold back. The count runs on the partial indexes, so it stays cheap
// while the backlog is small — which is when it matters that it is exact; the
// held rows are looked up from the parked ones (few, normally none) by the
// ordering-key index.
func (r *Relay) refreshGauges(ctx context.Context) {
	if r.metrics == nil {
		return
	}
	r.gaugesMu.Lock()
	defer r.gaugesMu.Unlock()
	if time.Since(r.gaugesDone) < gaugeEvery {
		return
	}
	var backlog, parked, held int64
	var lag float64
	err := r.pool.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE parked_at IS NULL),
			coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE parked_at IS NULL)), 0)::float8,
			count(*) FILTER (WHERE parked_at IS NOT NULL),
			(SELECT count(*)
			 FROM (SELECT topic, ordering_key, min(id) AS first FROM `+r.table+`
			       WHERE published_at IS NULL AND parked_at IS NOT NULL AND ordering_key IS NOT NULL
			         AND ($1 OR topic = ANY($2::text[]))
			       GROUP BY topic, ordering_key) p
			 JOIN `+r.table+` o ON o.ordering_key = p.ordering_key AND o.topic = p.topic AND o.id > p.first
			 WHERE o.published_at IS NULL AND o.parked_at IS NULL)
		FROM `+r.table+` WHERE published_at IS NULL`, r.strictAll, r.strictTopics).Scan(&backlog, &lag, &parked, &held)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("outbox metrics query failed", "error", err)
		}
		return
	}
	r.gaugesDone = time.Now()
	r.metrics.backlog.Set(float64(backlog))
	r.metrics.lag.Set(max(lag, 0))
	r.metrics.parkedNow.Set(float64(parked))
	r.metrics.held.Set(float64(held))
}
