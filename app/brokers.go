package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/cenkalti/backoff/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventpipe/eventpipe/app/attemptledger"
	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/memory"
	"github.com/eventpipe/eventpipe/app/broker/postgres"
	"github.com/eventpipe/eventpipe/app/broker/rabbitmq"
	"github.com/eventpipe/eventpipe/app/broker/sqs"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/config"
)

// NewBroker is the one factory of brokers: it builds the adapter broker.kind
// names from its section of cfg and checks that the broker answers. While the
// broker is unreachable it logs and retries with exponential backoff (capped
// at 10 s between tries) until ctx ends or serve.connect_timeout passes
// (0 = no limit). It is the broker of a command that does not consume the
// specs' queues (publish, dlq, topology, relay): serve's (newBroker) also
// gets the database, for the RabbitMQ attempt ledger.
func NewBroker(ctx context.Context, cfg config.Config, logger *slog.Logger) (broker.PubSub, error) {
	return newBroker(ctx, cfg, logger, nil)
}

// newBroker is NewBroker with serve's database (nil without one): on RabbitMQ
// it keeps the attempt ledger of ordered classic queues (attemptledger).
func newBroker(ctx context.Context, cfg config.Config, logger *slog.Logger, db *pgxpool.Pool) (broker.PubSub, error) {
	wlog := watermillLogger(logger)
	if cfg.Serve.ConnectTimeout > 0 {
		// Adapters that wait for their broker inside New (RabbitMQ) honour
		// the deadline through ctx; the others through the retry below.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Serve.ConnectTimeout)
		defer cancel()
	}
	instance := instanceName(cfg)
	connect := func() (broker.PubSub, error) {
		ps, err := newAdapter(ctx, cfg, instance, db, wlog)
		if err != nil {
			return nil, err
		}
		if p, ok := ps.(broker.Pinger); ok {
			if err := p.Ping(ctx); err != nil {
				_ = ps.Close()
				return nil, fmt.Errorf("ping: %w", err)
			}
		}
		return ps, nil
	}

	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 500 * time.Millisecond
	b.MaxInterval = 10 * time.Second
	ps, err := backoff.Retry(ctx, connect,
		backoff.WithBackOff(b),
		backoff.WithMaxElapsedTime(cfg.Serve.ConnectTimeout),
		backoff.WithNotify(func(err error, next time.Duration) {
			logger.Warn("broker unreachable, retrying",
				slog.String("broker", cfg.Broker.Kind),
				slog.Duration("retry_in", next.Round(time.Millisecond)),
				slog.Any("error", err))
		}))
	if err != nil {
		return nil, fmt.Errorf("connect to %s broker: %w", cfg.Broker.Kind, err)
	}
	return ps, nil
}

func newAdapter(ctx context.Context, cfg config.Config, instance string, db *pgxpool.Pool, logger watermill.LoggerAdapter) (broker.PubSub, error) {
	switch cfg.Broker.Kind {
	case config.KindMemory:
		top, err := SpecTopology(cfg)
		if err != nil {
			return nil, backoff.Permanent(err)
		}
		return memory.New(memory.Config{
			OutputBuffer:  int64(cfg.Memory.OutputBuffer),
			Prefetch:      cfg.Memory.Prefetch,
			QueuePrefetch: batchSizes(top),
			OrderedQueues: orderedQueues(top),
		}, logger)
	case config.KindRabbitMQ:
		top, err := SpecTopology(cfg)
		if err != nil {
			return nil, backoff.Permanent(err)
		}
		var declared rabbitmq.Topology
		if len(top.AllQueues()) > 0 {
			if declared, err = rabbitmq.NewDeclared(top, nil); err != nil {
				return nil, backoff.Permanent(err)
			}
		}
		if topics := fanoutTopics(cfg); len(topics) > 0 {
			// nil Fallback means plain durable queues.
			declared = rabbitmq.InstanceFanout{Topics: topics, Instance: instance, Fallback: declared}
		}
		var ledger rabbitmq.AttemptLedger
		if db != nil {
			if ledger, err = attemptledger.NewPostgres(db, cfg.Postgres.Schema, 0); err != nil {
				return nil, backoff.Permanent(err)
			}
		}
		return rabbitmq.New(ctx, rabbitmq.Config{
			Topology:        declared,
			AttemptLedger:   ledger,
			QueuePrefetch:   batchSizes(top),
			URL:             cfg.RabbitMQ.URL,
			Prefetch:        cfg.RabbitMQ.Prefetch,
			AckDelay:        ackDelay(cfg.RabbitMQ.AckDelay),
			ChannelPoolSize: cfg.RabbitMQ.ChannelPoolSize,
			DisableConfirms: !cfg.RabbitMQ.PublisherConfirms,
		}, logger)
	case config.KindSQS:
		top, err := SpecTopology(cfg)
		if err != nil {
			return nil, backoff.Permanent(err)
		}
		sqsCfg := sqs.Config{
			QueueBatchSizes: batchSizes(top),
			QueuePrefix:     cfg.SQS.QueuePrefix,
			Topics:          queueNames(top),
			Region:          cfg.SQS.Region,
			Endpoint:        cfg.SQS.Endpoint,
			BatchSize:       cfg.SQS.BatchSize,
			Workers:         cfg.SQS.Workers,
			WaitTime:        cfg.SQS.WaitTime,
			NackVisibility:  cfg.SQS.NackVisibility,
			CreateQueues:    cfg.SQS.CreateQueues,
		}
		// A spec queue whose SQS name (with sqs.queue_prefix) SQS would refuse,
		// or that another queue shares, is a configuration error: no retry.
		if err := sqsCfg.Validate(); err != nil {
			return nil, backoff.Permanent(err)
		}
		ps, err := sqs.New(ctx, sqsCfg, logger)
		if err != nil || !cfg.SQS.CreateQueues || len(top.AllQueues()) == 0 {
			return ps, err
		}
		// The spec queues are created as declared (visibility, FIFO,
		// redrive policy), not later by Subscribe with SQS's defaults.
		drift, err := ps.CreateMissing(ctx, top)
		if err != nil {
			_ = ps.Close()
			return nil, fmt.Errorf("create the spec queues: %w", err)
		}
		for _, c := range drift {
			logger.Info("SQS queue differs from its declaration; `eventpipe topology apply` changes it",
				watermill.LogFields{"change": c.String()})
		}
		return ps, nil
	case config.KindPostgres:
		top, err := SpecTopology(cfg)
		if err != nil {
			return nil, backoff.Permanent(err)
		}
		return postgres.New(ctx, postgres.Config{
			QueueBatchSizes:      batchSizes(top),
			QueueAckDeadlines:    visibilityTimeouts(top),
			OrderedQueues:        orderedQueues(top),
			DSN:                  cfg.Postgres.DSN,
			MaxConns:             cfg.Postgres.MaxConns,
			Workers:              cfg.Postgres.Workers,
			PollInterval:         cfg.Postgres.PollInterval,
			AutoInitializeSchema: cfg.Postgres.CreateTables,
			Schema:               cfg.Postgres.Schema,
		}, logger)
	default:
		return nil, backoff.Permanent(fmt.Errorf("unknown broker kind %q (allowed: %s, %s, %s, %s)",
			cfg.Broker.Kind, config.KindMemory, config.KindRabbitMQ, config.KindSQS, config.KindPostgres))
	}
}

// watermillLogger adapts logger for Watermill and the adapters. Watermill logs
// its lifecycle (handlers added, started, stopped) at info; those lines go to
// debug so that info shows what happens to messages. Errors stay errors.
func watermillLogger(logger *slog.Logger) watermill.LoggerAdapter {
	return watermill.NewSlogLoggerWithLevelMapping(logger, map[slog.Level]slog.Level{
		slog.LevelInfo: slog.LevelDebug,
	})
}

// batchSizes are the receive batch sizes the topology's queues declare.
func batchSizes(top topology.Topology) map[string]int {
	sizes := map[string]int{}
	for _, q := range top.AllQueues() {
		if q.BatchSize > 0 {
			sizes[q.Name] = q.BatchSize
		}
	}
	return sizes
}

// orderedQueues are the topology's FIFO queues.
func orderedQueues(top topology.Topology) map[string]bool {
	ordered := map[string]bool{}
	for _, q := range top.AllQueues() {
		if q.FIFO {
			ordered[q.Name] = true
		}
	}
	return ordered
}

// queueNames are the names of the topology's queues and dead-letter queues.
func queueNames(top topology.Topology) []string {
	all := top.AllQueues()
	names := make([]string, len(all))
	for i, q := range all {
		names[i] = q.Name
	}
	return names
}

// visibilityTimeouts are the visibility timeouts the topology's queues
// declare: the Postgres broker's ack deadline (its claim's lease) per queue.
func visibilityTimeouts(top topology.Topology) map[string]time.Duration {
	timeouts := map[string]time.Duration{}
	for _, q := range top.AllQueues() {
		if q.VisibilityTimeout > 0 {
			timeouts[q.Name] = q.VisibilityTimeout
		}
	}
	return timeouts
}

// instanceName names this instance's own queues (fan-out topics):
// realtime.instance, else the host name and a random suffix.
func instanceName(cfg config.Config) string {
	if cfg.Realtime.Instance != "" {
		return cfg.Realtime.Instance
	}
	host, _ := os.Hostname()
	return strings.ToLower(host + "-" + watermill.NewShortUUID())
}

// uncountedCrashQueues are the queues of top on which, with cfg, a message
// that kills its consumer every time is redelivered forever: RabbitMQ's
// ordered (FIFO) classic queues when the process has no database for the
// attempt ledger (rabbitmq.AttemptLedger). serve warns about each at start.
func uncountedCrashQueues(cfg config.Config, top topology.Topology) []string {
	if cfg.Broker.Kind != config.KindRabbitMQ || cfg.Postgres.DSN != "" {
		return nil
	}
	var out []string
	for _, q := range top.Queues {
		if q.FIFO && q.Type != topology.Quorum {
			out = append(out, q.Name)
		}
	}
	return out
}

// ackDelay is rabbitmq.ack_delay as the adapter takes it: its 0 means the
// default, and a negative delay none.
func ackDelay(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
