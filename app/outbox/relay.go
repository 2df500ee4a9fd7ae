package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/migrations"
)

// Relay defaults.
const (
	DefaultBatchSize      = 50
	DefaultPollInterval   = 10 * time.Second
	DefaultMaxAttempts    = 1
	DefaultMinBackoff     = time.Second
	DefaultMaxBackoff     = time.Minute
	DefaultPublishTimeout = 30 * time.Second
)

// AllTopics in RelayConfig.StrictOrderTopics applies strict order to every
// topic.
const AllTopics = "*"

// RelayConfig configures a Relay. Zero values take the defaults.
type RelayConfig struct {
	// Schema holding the outbox table. Default migrations.DefaultSchema.
	Schema string
	// BatchSize is how many rows one claim takes. Default 50.
	BatchSize int
	// PollInterval is how often the relay looks for rows without being
	// notified; it also bounds how late a retry after backoff can start.
	// Default 10s.
	PollInterval time.Duration
	// MaxAttempts is how many times a row is tried, failures of any class
	// counted, before a permanent refusal parks it — the broker refusing
	// the message itself, e.g. a payload over the limit (package doc,
	// Failures). A transient failure — the broker down, closed or slow —
	// never parks a row, whatever the count: the row is retried until the
	// broker is back. Default 1: a permanent refusal parks the row at once.
	MaxAttempts int
	// MinBackoff is the delay after a row's first failure; it doubles with
	// each further failure (±20 % jitter) up to MaxBackoff. Default 1s.
	MinBackoff time.Duration
	// MaxBackoff caps the delay between two attempts, so that a row is
	// tried at least this often (±20 %) through an outage of any length.
	// Default 1m.
	MaxBackoff time.Duration
	// PublishTimeout bounds one Publish call, and so how long a claim's
	// transaction (and its row locks) stays open. Default 30s.
	PublishTimeout time.Duration
	// StrictOrderTopics are the topics whose rows with an ordering key are
	// published strictly in order per key (see the package doc for the
	// cost); AllTopics ("*") means every topic. Default none.
	StrictOrderTopics []string
	// Registerer receives the relay's metrics; nil registers none. Relays
	// sharing a Registerer share the metrics.
	Registerer prometheus.Registerer
}

func (c *RelayConfig) setDefaults() {
	c.Schema = migrations.SchemaOrDefault(c.Schema)
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = DefaultMinBackoff
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
}

// Validate reports every problem with the configuration at once.
func (c RelayConfig) Validate() error {
	var errs []error
	if err := migrations.ValidateSchema(migrations.SchemaOrDefault(c.Schema)); err != nil {
		errs = append(errs, err)
	}
	if c.BatchSize < 0 {
		errs = append(errs, fmt.Errorf("batch size %d: must be positive", c.BatchSize))
	}
	if c.PollInterval < 0 {
		errs = append(errs, fmt.Errorf("poll interval %s: must be positive", c.PollInterval))
	}
	if c.MaxAttempts < 0 {
		errs = append(errs, fmt.Errorf("max attempts %d: must be positive", c.MaxAttempts))
	}
	if c.MinBackoff < 0 || c.MaxBackoff < 0 || (c.MaxBackoff > 0 && c.MinBackoff > c.MaxBackoff) {
		errs = append(errs, fmt.Errorf("backoff %s..%s: want 0 <= min <= max", c.MinBackoff, c.MaxBackoff))
	}
	if c.PublishTimeout < 0 {
		errs = append(errs, fmt.Errorf("publish timeout %s: must be positive", c.PublishTimeout))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("outbox relay config: %w", err)
	}
	return nil
}

// Relay publishes the outbox's rows. Any number of relays may run on one
// table at once, in one process or many.
type Relay struct {
	pool    *pgxpool.Pool
	pub     message.Publisher
	cfg     RelayConfig
	log     *slog.Logger
	table   string
	metrics *metrics

	strictAll    bool
	strictTopics []string

	// afterPublish, when set (tests), runs after Publish and before the
	// rows are marked; an error aborts the claim's transaction, as a crash
	// there would.
	afterPublish func(ctx context.Context) error

	gaugesMu   sync.Mutex
	gaugesDone time.Time
}

// NewRelay returns a relay from pool's outbox to publisher. logger nil means
// slog.Default().
func NewRelay(pool *pgxpool.Pool, publisher message.Publisher, cfg RelayConfig, logger *slog.Logger) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if pool == nil || publisher == nil {
		return nil, errors.New("outbox relay: pool and publisher are required")
	}
	if logger == nil {
		logger = slog.Default()
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	r := &Relay{
		pool:    pool,
		pub:     publisher,
		cfg:     cfg,
		log:     logger.With("component", "outbox-relay", "schema", cfg.Schema),
		table:   pgx.Identifier{cfg.Schema, "outbox"}.Sanitize(),
		metrics: m,
	}
	for _, t := range cfg.StrictOrderTopics {
		if t == AllTopics {
			r.strictAll = true
		} else {
			r.strictTopics = append(r.strictTopics, t)
		}
	}
	if r.strictTopics == nil {
		r.strictTopics = []string{}
	}
	return r, nil
}

// Run relays until ctx ends, then returns nil. It claims batch after batch
// while full batches publish cleanly, then waits for a notification or the
// poll interval. Errors (database or broker down) are logged and retried at
// the next wake-up; they never end Run.
func (r *Relay) Run(ctx context.Context) error {
	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { r.listen(ctx, wake) })

	tick := time.NewTicker(r.cfg.PollInterval)
	defer tick.Stop()
	for {
		for {
			res, err := r.RelayOnce(ctx)
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				r.log.Error("outbox relay failed", "error", err)
				break
			}
			// Drain only while the broker accepts everything: after a
			// failure, wait instead of walking the whole backlog into
			// backoff.
			if res.Claimed < r.cfg.BatchSize || res.Failed > 0 {
				break
			}
		}
		r.refreshGauges(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-tick.C:
		}
	}
}

// BatchResult counts what one claim did.
type BatchResult struct {
	// Claimed rows were locked and offered to the publisher.
	Claimed int
	// Published rows were confirmed and marked.
	Published int
	// Failed rows were not confirmed; Parked of them were refused
	// permanently (after MaxAttempts tries) and are no longer tried.
	Failed, Parked int
}

// claimed is one outbox row taken by a claim.
type claimed struct {
	id       int64
	eventID  string
	topic    string
	key      string // ordering key; empty for none
	payload  []byte
	metadata []byte
	attempts int
}

// RelayOnce claims one batch, publishes it and records the outcome, all in
// one transaction. Run calls it in a loop; tests and tools may call it
// directly.
func (r *Relay) RelayOnce(ctx context.Context) (BatchResult, error) {
	var res BatchResult
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("outbox relay: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	rows, err := r.claim(ctx, tx)
	if err != nil {
		return res, err
	}
	if len(rows) == 0 {
		return res, nil
	}
	res.Claimed = len(rows)

	failed := map[int64]error{}
	var published []int64
	for _, group := range groupByTopic(rows) {
		ok, bad := r.publish(ctx, group)
		published = append(published, ok...)
		for id, e := range bad {
			failed[id] = e
		}
	}
	if r.afterPublish != nil {
		if err := r.afterPublish(ctx); err != nil {
			return res, fmt.Errorf("outbox relay: after publish: %w", err)
		}
	}

	parked, err := r.record(ctx, tx, rows, published, failed)
	if err != nil {
		return res, err
	}
	if err := tx.Commit(ctx); err != nil {
		// The messages went out but stay unpublished here: they will be
		// sent again, and consumers deduplicate.
		return res, fmt.Errorf("outbox relay: commit after publishing %d messages: %w", len(published), err)
	}
	res.Published, res.Failed, res.Parked = len(published), len(failed), len(parked)
	for _, c := range parked {
		r.logFailure(c, failed[c.id], true, 0)
	}
	r.count(rows, published, failed, parked)
	return res, nil
}

func (r *Relay) claim(ctx context.Context, tx pgx.Tx) ([]claimed, error) {
	q := `SELECT o.id, o.event_id, o.topic, coalesce(o.ordering_key, ''), o.payload, o.metadata, o.attempts
		FROM ` + r.table + ` o
		WHERE o.published_at IS NULL AND o.parked_at IS NULL AND o.next_attempt_at <= now()
		  AND (o.ordering_key IS NULL
		       OR NOT ($2 OR o.topic = ANY($3::text[]))
		       OR NOT EXISTS (
		           SELECT 1 FROM ` + r.table + ` p
		           WHERE p.topic = o.topic AND p.ordering_key = o.ordering_key
		             AND p.published_at IS NULL AND p.id < o.id))
		ORDER BY o.id
		LIMIT $1
		FOR UPDATE OF o SKIP LOCKED`
	rs, err := tx.Query(ctx, q, r.cfg.BatchSize, r.strictAll, r.strictTopics)
	if err != nil {
		return nil, fmt.Errorf("outbox relay: claim: %w", err)
	}
	out, err := pgx.CollectRows(rs, func(row pgx.CollectableRow) (claimed, error) {
		var c claimed
		err := row.Scan(&c.id, &c.eventID, &c.topic, &c.key, &c.payload, &c.metadata, &c.attempts)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("outbox relay: claim: %w", err)
	}
	return out, nil
}

// groupByTopic keeps each topic's rows in id order, topics in order of their
// first row.
func groupByTopic(rows []claimed) [][]claimed {
	idx := map[string]int{}
	var groups [][]claimed
	for _, c := range rows {
		i, ok := idx[c.topic]
		if !ok {
			i = len(groups)
			idx[c.topic] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], c)
	}
	return groups
}

// publish sends one topic's rows with a single Publish call and returns the
// confirmed ids and the failed ones with their error. Only a
// broker.PartialPublishError confirms part of a call.
//
// A call refused permanently with several rows unconfirmed is sent again one
// row at a time: a refusal is one message's fault (adapters check every
// message before sending any), and its neighbours must not be parked with it.
// This costs a call per row, and only on a permanent refusal; a row resent
// that had reached some queue (a *routing.RouteError) is a duplicate there,
// which consumers deduplicate.
func (r *Relay) publish(ctx context.Context, group []claimed) (ok []int64, failed map[int64]error) {
	failed = map[int64]error{}
	topic := group[0].topic
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	defer cancel()

	msgs := make([]*message.Message, 0, len(group))
	sent := make([]claimed, 0, len(group))
	for _, c := range group {
		m, err := c.message(pctx)
		if err != nil {
			failed[c.id] = err
			continue
		}
		msgs = append(msgs, m)
		sent = append(sent, c)
	}
	if len(msgs) == 0 {
		return nil, failed
	}
	err := r.pub.Publish(topic, msgs...)
	if err == nil {
		for _, c := range sent {
			ok = append(ok, c.id)
		}
		return ok, failed
	}
	unconfirmed := sent
	var partial broker.PartialPublishError
	if errors.As(err, &partial) && knownIDs(partial.FailedUUIDs(), sent) {
		bad := partial.FailedUUIDs()
		unconfirmed = nil
		for _, c := range sent {
			if slices.Contains(bad, c.eventID) {
				unconfirmed = append(unconfirmed, c)
			} else {
				ok = append(ok, c.id)
			}
		}
	}
	if len(unconfirmed) < 2 || !permanent(err) {
		for _, c := range unconfirmed {
			failed[c.id] = err
		}
		return ok, failed
	}
	for _, c := range unconfirmed {
		m, merr := c.message(pctx)
		if merr == nil {
			merr = r.pub.Publish(topic, m)
		}
		if merr != nil {
			failed[c.id] = merr
		} else {
			ok = append(ok, c.id)
		}
	}
	return ok, failed
}

// message is the row as the message to publish, bound to ctx. Metadata that
// does not decode never will: the error is permanent.
func (c claimed) message(ctx context.Context) (*message.Message, error) {
	m := message.NewMessage(c.eventID, c.payload)
	if err := json.Unmarshal(c.metadata, &m.Metadata); err != nil {
		return nil, failure.AsPermanent(fmt.Errorf("decode metadata: %w", err))
	}
	m.SetContext(ctx)
	return m, nil
}

// knownIDs reports whether every failed id names a message of the call. A
// partial error naming something else (an adapter that could not tell which
// entry failed) confirms nothing: the whole call counts as failed.
func knownIDs(failed []string, sent []claimed) bool {
	for _, id := range failed {
		if !slices.ContainsFunc(sent, func(c claimed) bool { return c.eventID == id }) {
			return false
		}
	}
	return true
}

// maxErrorLen bounds last_error: a broker error naming a whole batch is not
// worth kilobytes per row.
const maxErrorLen = 2000

// record marks the confirmed rows published and schedules the failed ones
// for a retry with backoff, parking those refused permanently after
// MaxAttempts tries. It returns the parked rows.
func (r *Relay) record(ctx context.Context, tx pgx.Tx, rows []claimed, published []int64, failed map[int64]error) ([]claimed, error) {
	if len(published) > 0 {
		if _, err := tx.Exec(ctx, `UPDATE `+r.table+` SET published_at = now(), last_error = NULL WHERE id = ANY($1)`, published); err != nil {
			return nil, fmt.Errorf("outbox relay: mark %d published: %w", len(published), err)
		}
	}
	if len(failed) == 0 {
		return nil, nil
	}
	var ids, delays []int64
	var msgs []string
	var parks []bool
	var parked []claimed
	for _, c := range rows {
		err, ok := failed[c.id]
		if !ok {
			continue
		}
		e := err.Error()
		if len(e) > maxErrorLen {
			e = e[:maxErrorLen]
		}
		delay := r.backoff(c.attempts)
		park := permanent(err) && c.attempts+1 >= r.cfg.MaxAttempts
		ids = append(ids, c.id)
		msgs = append(msgs, e)
		delays = append(delays, delay.Microseconds())
		parks = append(parks, park)
		if park {
			parked = append(parked, c) // logged once committed
		} else {
			r.logFailure(c, err, false, delay)
		}
	}
	_, err := tx.Exec(ctx, `UPDATE `+r.table+` o SET
			attempts = o.attempts + 1,
			last_error = f.err,
			next_attempt_at = now() + f.delay_us * interval '1 microsecond',
			parked_at = CASE WHEN f.park THEN now() END
		FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bool[]) AS f(id, err, delay_us, park)
		WHERE o.id = f.id`, ids, msgs, delays, parks)
	if err != nil {
		return nil, fmt.Errorf("outbox relay: record %d failures: %w", len(ids), err)
	}
	return parked, nil
}

// logFailure logs one failed row: a warning while it will be tried again, an
// error once it is parked — the line an operator needs to find the row, why
// it was refused, and whether it holds back the later rows of its key.
func (r *Relay) logFailure(c claimed, err error, parked bool, retryIn time.Duration) {
	attrs := []any{"message_id", c.eventID, "trace_id", c.traceID(), "queue", c.topic, "attempts", c.attempts + 1}
	if c.key != "" {
		attrs = append(attrs, "ordering_key", c.key)
	}
	switch {
	case parked:
		attrs = append(attrs, "reason", err, "class", failure.Permanent.String(),
			"holds_key", c.key != "" && r.strict(c.topic), "requeue", "eventpipe outbox requeue --id "+c.eventID)
		r.log.Error("outbox message parked: the broker refused it; not tried again until requeued", attrs...)
	case permanent(err):
		attrs = append(attrs, "error", err, "class", failure.Permanent.String(), "retry_in", retryIn)
		r.log.Warn("outbox message refused, will retry before parking it", attrs...)
	default:
		attrs = append(attrs, "error", err, "class", failure.Transient.String(), "retry_in", retryIn)
		r.log.Warn("outbox publish failed, will retry", attrs...)
	}
}

// traceID is the row's trace id, for log lines; empty when it has none.
func (c claimed) traceID() string {
	var md map[string]string
	_ = json.Unmarshal(c.metadata, &md)
	return md[metadata.TraceIDKey]
}

// strict reports whether topic's keyed rows are published in strict order.
func (r *Relay) strict(topic string) bool {
	return r.strictAll || slices.Contains(r.strictTopics, topic)
}

// backoff is the delay after a row's (attempts+1)-th failure: MinBackoff
// doubled per earlier failure, capped, with ±20 % jitter so that rows failed
// together do not retry together.
func (r *Relay) backoff(attempts int) time.Duration {
	d := r.cfg.MinBackoff
	for range attempts {
		d *= 2
		if d >= r.cfg.MaxBackoff {
			d = r.cfg.MaxBackoff
			break
		}
	}
	d = min(d, r.cfg.MaxBackoff)
	jitter := time.Duration((rand.Float64()*0.4 - 0.2) * float64(d)) //nolint:gosec // jitter, not security
	return d + jitter
}

// count updates the counters after a committed claim.
func (r *Relay) count(rows []claimed, published []int64, failed map[int64]error, parked []claimed) {
	if r.metrics == nil {
		return
	}
	topicOf := make(map[int64]string, len(rows))
	for _, c := range rows {
		topicOf[c.id] = c.topic
	}
	for _, id := range published {
		r.metrics.published.WithLabelValues(topicOf[id]).Inc()
	}
	for id := range failed {
		r.metrics.failed.WithLabelValues(topicOf[id]).Inc()
	}
	for _, c := range parked {
		r.metrics.parked.WithLabelValues(c.topic).Inc()
	}
}
