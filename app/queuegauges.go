package app

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/topology"
)

// queueStatsMaxAge is how old the counts a scrape or a console page shows
// may be: the brokers are asked at most this often, whatever the number of
// scrapers and browsers.
const queueStatsMaxAge = 5 * time.Second

// queueCounts keeps the latest counts of the enabled specs' queues, asked of
// the broker (broker.QueueStatter: a passive declare and the management API
// on RabbitMQ, GetQueueAttributes on SQS, one count per table on
// PostgreSQL) at most every queueStatsMaxAge, never by receiving messages.
type queueCounts struct {
	statter broker.QueueStatter // nil: the broker cannot count
	top     topology.Topology
	system  string // OpenTelemetry messaging.system of the broker
	// missingIsEmpty: the broker makes a queue when it is first used (the
	// PostgreSQL broker's tables), so one not there yet holds nothing.
	missingIsEmpty bool
	logger         *slog.Logger

	mu    sync.Mutex
	at    time.Time
	stats map[string]queueCount
}

// queueCount is one queue's counts, or why there are none.
type queueCount struct {
	broker.QueueStats
	Err error
}

// messagingSystem is OpenTelemetry's messaging.system value of a broker
// kind.
func messagingSystem(kind string) string {
	switch kind {
	case "sqs":
		return "aws_sqs"
	case "postgres":
		return "postgresql"
	}
	return kind
}

func newQueueCounts(b broker.PubSub, top topology.Topology, kind string, logger *slog.Logger) *queueCounts {
	statter, _ := b.(broker.QueueStatter)
	return &queueCounts{statter: statter, top: top, system: messagingSystem(kind), logger: logger, missingIsEmpty: kind == "postgres"}
}

// get returns every queue's counts, asking the broker when the last ones are
// older than queueStatsMaxAge.
func (q *queueCounts) get(ctx context.Context) map[string]queueCount {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.statter == nil || time.Since(q.at) < queueStatsMaxAge && q.stats != nil {
		return q.stats
	}
	ctx, cancel := context.WithTimeout(ctx, 4*time.Second)
	defer cancel()
	stats := map[string]queueCount{}
	for _, queue := range q.top.AllQueues() {
		s, err := q.statter.QueueStats(ctx, queue.Name)
		if q.missingIsEmpty && errors.Is(err, broker.ErrQueueNotFound) {
			s, err = broker.QueueStats{Queue: queue.Name, InFlightKnown: true}, nil
		}
		if err != nil {
			q.logger.Debug("queue not counted", slog.String("queue", queue.Name), slog.Any("error", err))
		}
		stats[queue.Name] = queueCount{QueueStats: s, Err: err}
	}
	q.stats, q.at = stats, time.Now()
	return stats
}

// Describe implements prometheus.Collector.
func (q *queueCounts) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range queueDescs {
		ch <- d
	}
}

// The queue gauges. Names follow Prometheus' conventions (base units, the
// unit as suffix) and label with OpenTelemetry's messaging attributes
// (messaging.destination.name → messaging_destination_name,
// messaging.system), as its Prometheus mapping spells them.
var (
	labels      = []string{"messaging_system", "messaging_destination_name"}
	queueDepth  = prometheus.NewDesc("eventpipe_queue_messages", "Messages stored in the queue and not delivered: ready, plus delayed (SQS, PostgreSQL).", labels, nil)
	queueFlight = prometheus.NewDesc("eventpipe_queue_in_flight_messages", "Messages delivered to a consumer and not yet settled.", labels, nil)
	queueOldest = prometheus.NewDesc("eventpipe_queue_oldest_message_age_seconds", "Age of the queue's oldest message (PostgreSQL only; 0 where the broker does not say).", labels, nil)
	queueDLQ    = prometheus.NewDesc("eventpipe_queue_dead_letter_messages", "Messages in the queue's dead-letter queue (ready, delayed and in flight).", append(labels, "dead_letter_queue"), nil)
	queueUp     = prometheus.NewDesc("eventpipe_queue_stats_up", "1 when the broker counted the queue at the last ask, else 0.", labels, nil)
	queueDescs  = []*prometheus.Desc{queueDepth, queueFlight, queueOldest, queueDLQ, queueUp}
)

// Collect implements prometheus.Collector.
func (q *queueCounts) Collect(ch chan<- prometheus.Metric) {
	if q.statter == nil {
		return
	}
	stats := q.get(context.Background())
	for _, queue := range q.top.AllQueues() {
		s := stats[queue.Name]
		up := 1.0
		if s.Err != nil {
			up = 0
		}
		ch <- prometheus.MustNewConstMetric(queueUp, prometheus.GaugeValue, up, q.system, queue.Name)
		if s.Err != nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(queueDepth, prometheus.GaugeValue, float64(s.Ready+s.Delayed), q.system, queue.Name)
		if s.InFlightKnown {
			ch <- prometheus.MustNewConstMetric(queueFlight, prometheus.GaugeValue, float64(s.InFlight), q.system, queue.Name)
		}
		ch <- prometheus.MustNewConstMetric(queueOldest, prometheus.GaugeValue, s.OldestAge.Seconds(), q.system, queue.Name)
		if d := queue.DeadLetter; d != nil {
			if ds, ok := stats[d.Queue]; ok && ds.Err == nil {
				ch <- prometheus.MustNewConstMetric(queueDLQ, prometheus.GaugeValue, float64(ds.Total()), q.system, queue.Name, d.Queue)
			}
		}
	}
}
