package realtime

import "github.com/prometheus/client_golang/prometheus"

// metrics are the package's Prometheus series, all eventpipe_realtime_*.
type metrics struct {
	clients    *prometheus.GaugeVec   // kind
	events     *prometheus.CounterVec // kind: events that reached this instance's hub
	sent       *prometheus.CounterVec // kind: events written to a client
	evicted    *prometheus.CounterVec // kind: slow clients disconnected
	duplicates prometheus.Counter
	rejected   *prometheus.CounterVec // reason
	fanoutFail *prometheus.CounterVec // volatile: "true" (warned, dropped) or "false" (retried)
	auth       *prometheus.CounterVec // code: 401, 403
	resumes    *prometheus.CounterVec // result: hit, miss
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		clients: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "eventpipe", Subsystem: "realtime", Name: "clients",
			Help: "SSE clients connected to this instance."}, []string{"kind"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "eventpipe", Subsystem: "realtime", Name: "events_total",
			Help: "Notifications that reached this instance's hub (after fan-out, duplicates excluded)."}, []string{"kind"}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "eventpipe", Subsystem: "realtime", Name: "events_sent_total",
			Help: "Events written to SSE clients (replays included)."}, []string{"kind"}),
		evicted: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "eventpipe", Subsystem: "realtime", Name: "slow_clients_disconnected_total",
			Help: "SSE clients disconnected because their buffer was full; they resume with Last-Event-ID."}, []string{"kind"}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "eventpipe", Subsystem: "realtime", Name: "duplicates_total",
			Help: "Notifications whose messageId was already in the channel's window (a redelivery), not sent again."}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "eventpipe", Subsystem: "realtime", Name: "events_rejected_total",
			Help: "Notifications refused by the relay (dead-lettered by the route): unknown_channel, bad_event_type, bad_id, oversized_data, bad_data."}, []string{"reason"}),
		fanoutFail: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "eventpipe", Subsystem: "realtime", Name: "fanout_failures_total",
			Help: "Failed fan-out publishes; volatile=true ones are dropped with a warning, the others retried."}, []string{"volatile"}),
		auth: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "eventpipe", Subsystem: "realtime", Name: "auth_failures_total",
			Help: "Stream requests refused: 401 (no or invalid token), 403 (someone else's channel)."}, []string{"code"}),
		resumes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "eventpipe", Subsystem: "realtime", Name: "resumes_total",
			Help: "Reconnects with Last-Event-ID: hit (found in the window, missed events replayed) or miss (outside the window)."}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(m.clients, m.events, m.sent, m.evicted, m.duplicates, m.rejected, m.fanoutFail, m.auth, m.resumes)
	}
	return m
}
