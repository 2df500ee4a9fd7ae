package postgres_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// BenchmarkConsume is the measurement behind the adapter choice: 1,000
// messages already in a queue, consumed by 1 or 4 subscribers (each its own
// pool, as separate processes would be) whose handler takes 0 or 2 ms, with
// this adapter and with watermill-sql's two PostgreSQL adapters as they ship.
// All use batch 10 (this adapter also 1 and 100) and a 100 ms poll interval.
//
//	go test -run '^$' -bench Consume -benchtime 3x ./app/broker/postgres/
//
// It reports msg/s, how many subscribers got work, duplicate deliveries, and
// allocations per message in this process (subscribers and the test's own
// bookkeeping; the publish before the clock starts is not counted).
func BenchmarkConsume(b *testing.B) {
	const total = 1000
	setups := []benchSetup{skipLockedSetup(10), stockQueueSetup, stockDefaultSetup, skipLockedSetup(1), skipLockedSetup(100)}
	for _, setup := range setups {
		for _, handler := range []time.Duration{0, 2 * time.Millisecond} {
			for _, subscribers := range []int{1, 4} {
				b.Run(fmt.Sprintf("%s/handler=%s/subscribers=%d", setup.name, handler, subscribers), func(b *testing.B) {
					var rate, busy, dups, allocs float64
					for range b.N {
						r := runConsume(b, setup, total, subscribers, handler)
						rate += r.rate
						busy += float64(r.busy)
						dups += float64(r.dups)
						allocs += r.allocsPerMsg
					}
					b.ReportMetric(rate/float64(b.N), "msg/s")
					b.ReportMetric(busy/float64(b.N), "busy-subs")
					b.ReportMetric(dups/float64(b.N), "dups")
					b.ReportMetric(allocs/float64(b.N), "allocs/msg")
					b.ReportMetric(0, "ns/op")
				})
			}
		}
	}
}

type benchSetup struct {
	name string
	// pubSub returns a publisher and a constructor of independent
	// subscribers, all closed by b.Cleanup.
	pubSub func(b *testing.B) (message.Publisher, func() message.Subscriber)
}

type consumeResult struct {
	rate, allocsPerMsg float64
	busy, dups         int
}

func runConsume(b *testing.B, setup benchSetup, total, subscribers int, handler time.Duration) consumeResult {
	b.StopTimer()
	pub, newSub := setup.pubSub(b)
	topic := "bench_" + strings.ToLower(watermill.NewShortUUID())
	subs := make([]message.Subscriber, subscribers)
	for i := range subs {
		subs[i] = newSub()
		if si, ok := subs[i].(message.SubscribeInitializer); ok {
			require.NoError(b, si.SubscribeInitialize(topic))
		}
	}
	for i := 0; i < total; i += 100 {
		batch := make([]*message.Message, 100)
		for j := range batch {
			batch[j] = message.NewMessage(watermill.NewUUID(), []byte(`{"n":1}`))
		}
		require.NoError(b, pub.Publish(topic, batch...))
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu     sync.Mutex
		seen   = map[string]int{}
		perSub = make([]int, subscribers)
		done   = make(chan struct{})
		once   sync.Once
	)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.StartTimer()
	start := time.Now()
	for i, sub := range subs {
		msgs, err := sub.Subscribe(ctx, topic)
		require.NoError(b, err)
		go func() {
			for m := range msgs {
				if handler > 0 {
					time.Sleep(handler)
				}
				mu.Lock()
				seen[m.UUID]++
				perSub[i]++
				if len(seen) == total {
					once.Do(func() { close(done) })
				}
				mu.Unlock()
				m.Ack()
			}
		}()
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		b.Errorf("%s: %d of %d messages after 2 minutes", setup.name, len(seen), total)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	runtime.ReadMemStats(&after)
	cancel()

	mu.Lock()
	defer mu.Unlock()
	r := consumeResult{
		rate:         float64(len(seen)) / elapsed.Seconds(),
		allocsPerMsg: float64(after.Mallocs-before.Mallocs) / float64(total),
	}
	for _, n := range perSub {
		if n > 0 {
			r.busy++
		}
	}
	for _, n := range seen {
		r.dups += n - 1
	}
	return r
}

func skipLockedSetup(batch int) benchSetup {
	return benchSetup{
		name: fmt.Sprintf("skiplocked-batch%d", batch),
		pubSub: func(b *testing.B) (message.Publisher, func() message.Subscriber) {
			cfg := testConfig(b)
			cfg.MaxConns, cfg.MaxPublishConns = 2, 2
			cfg.BatchSize = batch
			cfg.PollInterval = 100 * time.Millisecond
			return newPubSub(b, cfg), func() message.Subscriber { return newPubSub(b, cfg) }
		},
	}
}

func benchPool(b *testing.B) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(testDSN(b))
	require.NoError(b, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = appName(b)
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(b, err)
	b.Cleanup(pool.Close)
	return pool
}

func stockTable(prefix string) func(string) string {
	return func(topic string) string { return pgx.Identifier{runSchema, prefix + topic}.Sanitize() }
}

// stockQueueSetup is PostgreSQLQueueSchema + PostgreSQLQueueOffsetsAdapter:
// FOR UPDATE without SKIP LOCKED, REPEATABLE READ.
var stockQueueSetup = benchSetup{
	name: "stockqueue",
	pubSub: func(b *testing.B) (message.Publisher, func() message.Subscriber) {
		schema := wsql.PostgreSQLQueueSchema{
			GeneratePayloadType:       func(string) string { return "BYTEA" },
			GenerateMessagesTableName: stockTable("sq_"),
			SubscribeBatchSize:        10,
		}
		offsets := wsql.PostgreSQLQueueOffsetsAdapter{DeleteOnAck: true, GenerateMessagesTableName: stockTable("sq_")}
		return stockPubSub(b, schema, offsets, "")
	},
}

// stockDefaultSetup is DefaultPostgreSQLSchema + DefaultPostgreSQLOffsetsAdapter
// with every subscriber in one consumer group, the way to share a topic.
var stockDefaultSetup = benchSetup{
	name: "stockdefault",
	pubSub: func(b *testing.B) (message.Publisher, func() message.Subscriber) {
		schema := wsql.DefaultPostgreSQLSchema{
			GeneratePayloadType:       func(string) string { return "BYTEA" },
			GenerateMessagesTableName: stockTable("sd_"),
			SubscribeBatchSize:        10,
		}
		offsets := wsql.DefaultPostgreSQLOffsetsAdapter{GenerateMessagesOffsetsTableName: stockTable("sdo_")}
		return stockPubSub(b, schema, offsets, "bench")
	},
}

func stockPubSub(b *testing.B, schema wsql.SchemaAdapter, offsets wsql.OffsetsAdapter, group string) (message.Publisher, func() message.Subscriber) {
	_, err := benchPool(b).Exec(context.Background(), `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{runSchema}.Sanitize())
	require.NoError(b, err)
	pub, err := wsql.NewPublisher(wsql.BeginnerFromPgx(benchPool(b)), wsql.PublisherConfig{
		SchemaAdapter: schema, AutoInitializeSchema: true,
	}, nil)
	require.NoError(b, err)
	return pub, func() message.Subscriber {
		sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(benchPool(b)), wsql.SubscriberConfig{
			ConsumerGroup:    group,
			PollInterval:     100 * time.Millisecond,
			ResendInterval:   100 * time.Millisecond,
			RetryInterval:    100 * time.Millisecond,
			SchemaAdapter:    schema,
			OffsetsAdapter:   offsets,
			InitializeSchema: true,
		}, nil)
		require.NoError(b, err)
		b.Cleanup(func() { _ = sub.Close() })
		return sub
	}
}
