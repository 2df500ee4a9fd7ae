package postgres

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Config configures the PostgreSQL broker. The zero value of every field but
// DSN means its default.
type Config struct {
	// DSN is a PostgreSQL URL or key=value string, e.g.
	// postgres://user:pass@host:5432/db?sslmode=disable. Required.
	DSN string

	// ApplicationName is reported to PostgreSQL (pg_stat_activity) for every
	// connection, so that an operator can tell this broker's connections apart
	// and terminate them. Default: the DSN's application_name, else "eventpipe".
	ApplicationName string

	// MaxConns bounds the consuming pool (it overrides the DSN's
	// pool_max_conns). A subscription takes a connection only for its short
	// statements (claim, settle, renew), never while a handler runs, so
	// subscriptions beyond MaxConns only queue for those. Default 16.
	MaxConns int

	// MaxPublishConns bounds the publishing pool. It is separate from the
	// consuming pool so that publishes (a handler's, the outbox relay's) and
	// QueueStats never queue behind claims and settlements. Default 4.
	MaxPublishConns int

	// ConnectTimeout bounds one connection attempt when the DSN sets no
	// connect_timeout. Default 5 s.
	ConnectTimeout time.Duration

	// PollInterval is how long an idle subscription waits before looking for
	// new rows again: the delivery latency of a message published to an idle
	// queue, and one short transaction per idle subscription per interval.
	// Default 250 ms.
	PollInterval time.Duration

	// RetryInterval is how long a subscription waits after a database error
	// before it queries again. Default 1 s.
	RetryInterval time.Duration

	// BatchSize is how many rows a subscription claims at once. Larger batches
	// cost fewer statements, but the rows of a claimed batch wait for this
	// subscriber even when others are idle, and a subscriber that dies uses
	// an attempt of every row of its batch. Default 10, at most 1000.
	BatchSize int

	// Workers is how many claim loops a subscription runs while its queue is
	// busy, each holding one claim's rows at most: a claim's round trip
	// then overlaps the handling of another claim's messages, and the
	// database works on several at once. An idle queue is polled by one of
	// them only (broker.IdleLoops); a subscription never runs more loops
	// than messages it may have out at once (one at a time: one loop). As
	// sqs.workers: more rows are held than one batch (Workers × BatchSize),
	// and a subscriber that dies uses an attempt of each. Default 2.
	Workers int

	// QueueBatchSizes overrides BatchSize for some queues (topic →
	// 1..MaxBatchSize): a spec's batch size per queue (the interviews spec
	// receives 10 on one queue and 1 on the other).
	QueueBatchSizes map[string]int

	// OrderedQueues are the FIFO queues (topic → true): a row of one is
	// claimed only while no earlier row of its group (metadata.GroupIDKey;
	// the whole queue is one group for rows without it) is still in the
	// table — leased to a consumer, delayed for a retry, or claimable — so
	// a group is handled in publish order even when a consumer dies
	// holding its head (the later rows wait for the lease to end instead of
	// going to another consumer first).
	OrderedQueues map[string]bool

	// AckDeadline is the lease of a claim, a visibility timeout: while a
	// delivered message is neither acked nor nacked its lease is renewed
	// every third of it (see Leases in the package documentation), until its
	// handler passes its own deadline; then, at most AckDeadline later, its
	// context is cancelled and the message is delivered again. A subscriber
	// that dies holding messages leaves them claimed that long. Default 30 s.
	AckDeadline time.Duration

	// QueueAckDeadlines overrides AckDeadline for some queues (topic → a
	// positive duration): a spec's visibility timeout per queue (the
	// interviews spec gives one queue 180 s and the other 1800 s).
	QueueAckDeadlines map[string]time.Duration

	// RedeliveryDelay is how long a nacked message stays invisible before any
	// subscriber may claim it again, unless the message asks for its own delay
	// with metadata.NackDelayKey (the retry middleware's back-off does; its
	// delay then replaces this one, even when shorter). Default 1 s.
	RedeliveryDelay time.Duration

	// Schema is the PostgreSQL schema holding the queue tables. Default
	// "eventpipe".
	Schema string

	// TablePrefix is prepended to a topic to name its table. Prefix and topic
	// together must fit PostgreSQL's 63-byte identifiers. Default "queue_".
	TablePrefix string

	// AutoInitializeSchema creates the schema and a topic's table on first
	// publish or subscribe. Off, the tables must have been created (by
	// SubscribeInitialize, as provisioning and migrations do).
	AutoInitializeSchema bool
}

// Defaults, in one place.
const (
	DefaultApplicationName = "eventpipe"
	DefaultMaxConns        = 16
	DefaultMaxPublishConns = 4
	DefaultConnectTimeout  = 5 * time.Second
	DefaultPollInterval    = 250 * time.Millisecond
	DefaultRetryInterval   = time.Second
	DefaultBatchSize       = 10
	DefaultWorkers         = 2
	DefaultAckDeadline     = 30 * time.Second
	DefaultRedeliveryDelay = time.Second
	DefaultSchema          = "eventpipe"
	DefaultTablePrefix     = "queue_"

	// MaxBatchSize caps BatchSize: every claimed row stays claimed until the
	// batch reaches it.
	MaxBatchSize = 1000

	// maxWorkers caps Workers: each loop may hold a connection of the pool.
	maxWorkers = 64
)

func (c *Config) setDefaults() {
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxPublishConns == 0 {
		c.MaxPublishConns = DefaultMaxPublishConns
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = DefaultRetryInterval
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.AckDeadline == 0 {
		c.AckDeadline = DefaultAckDeadline
	}
	if c.RedeliveryDelay == 0 {
		c.RedeliveryDelay = DefaultRedeliveryDelay
	}
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if c.TablePrefix == "" {
		c.TablePrefix = DefaultTablePrefix
	}
}

// Validate reports every problem with the configuration, joined. New calls it
// after filling in defaults, so zero values pass.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("postgres: "+format, args...))
	}
	if strings.TrimSpace(c.DSN) == "" {
		add("DSN is required")
	} else if _, err := pgxpool.ParseConfig(c.DSN); err != nil {
		add("DSN: %w", err)
	}
	if len(c.ApplicationName) > maxIdentifierBytes {
		add("application name %q is longer than %d bytes (PostgreSQL would truncate it)", c.ApplicationName, maxIdentifierBytes)
	}
	if c.MaxConns < 0 {
		add("max conns must not be negative, got %d", c.MaxConns)
	}
	if c.MaxPublishConns < 0 {
		add("max publish conns must not be negative, got %d", c.MaxPublishConns)
	}
	if c.ConnectTimeout < 0 {
		add("connect timeout must not be negative, got %s", c.ConnectTimeout)
	}
	if c.PollInterval < 0 {
		add("poll interval must not be negative, got %s", c.PollInterval)
	}
	if c.RetryInterval < 0 {
		add("retry interval must not be negative, got %s", c.RetryInterval)
	}
	if c.BatchSize < 0 || c.BatchSize > MaxBatchSize {
		add("batch size must be between 0 (default) and %d, got %d", MaxBatchSize, c.BatchSize)
	}
	if c.Workers < 0 || c.Workers > maxWorkers {
		add("workers must be between 0 (default) and %d, got %d", maxWorkers, c.Workers)
	}
	for q, n := range c.QueueBatchSizes {
		if n < 1 || n > MaxBatchSize {
			add("batch size %d of queue %s: want 1..%d", n, q, MaxBatchSize)
		}
	}
	if c.AckDeadline < 0 {
		add("ack deadline must not be negative, got %s", c.AckDeadline)
	}
	for q, d := range c.QueueAckDeadlines {
		if d <= 0 {
			add("ack deadline %s of queue %s: must be positive", d, q)
		}
	}
	if c.RedeliveryDelay < 0 {
		add("redelivery delay must not be negative, got %s", c.RedeliveryDelay)
	}
	if len(c.Schema) > maxIdentifierBytes {
		add("schema %q is longer than %d bytes", c.Schema, maxIdentifierBytes)
	}
	if len(c.TablePrefix) >= maxIdentifierBytes {
		add("table prefix %q leaves no room for a topic in %d bytes", c.TablePrefix, maxIdentifierBytes)
	}
	return errors.Join(errs...)
}

// batchSizeOf is how many rows a subscription of topic claims at once.
func (c Config) batchSizeOf(topic string) int {
	if n, ok := c.QueueBatchSizes[topic]; ok {
		return n
	}
	return c.BatchSize
}

// ackDeadlineOf is the lease of topic's claims.
func (c Config) ackDeadlineOf(topic string) time.Duration {
	if d, ok := c.QueueAckDeadlines[topic]; ok {
		return d
	}
	return c.AckDeadline
}
