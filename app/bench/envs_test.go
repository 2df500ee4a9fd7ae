package bench

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsqs "github.com/ThreeDotsLabs/watermill-aws/sqs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventpipe/eventpipe/app/broker/postgres"
	"github.com/eventpipe/eventpipe/app/broker/sqs"
	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/app/testenv"
)

// Settings of the brokers as built below, named in the table.
const (
	rabbitSettings   = "prefetch=100 manual-ack persistent confirms=on channels=16"
	postgresSettings = "claim-batch=10 poll=100ms conns=4"
	sqsSettings      = "receive-batch=10 receivers=2 wait=1s"
	memorySettings   = "buffer=256"
)

func initialize(tb testing.TB, sub any, topic string) {
	tb.Helper()
	if si, ok := sub.(message.SubscribeInitializer); ok {
		if err := si.SubscribeInitialize(topic); err != nil {
			tb.Fatalf("initialize %s: %v", topic, err)
		}
	}
}

// rabbitEnv: eventpipe's RabbitMQ broker with its defaults (testbrokers)
// against raw amqp091-go with the same settings.
func rabbitEnv(tb testing.TB) *env {
	// The scope is a virtual host of its own, removed at the end.
	vhostURL := testbrokers.Scope(tb, "rabbitmq")
	ps := testbrokers.New(tb, "rabbitmq", vhostURL)
	raw := newAMQPPipe(tb, vhostURL, 100)
	return &env{
		kind: "rabbitmq", ours: eventpipePipe{ps}, base: raw, baseName: "amqp091-go", keeps: true,
		ensure: func(tb testing.TB, topic string) {
			initialize(tb, ps, topic)
			tb.Cleanup(func() {
				if ch, err := raw.subConn.Channel(); err == nil {
					_, _ = ch.QueueDelete(topic, false, false, false)
					_ = ch.Close()
				}
			})
		},
		purge: func(tb testing.TB, topic string) { raw.purge(tb, topic) },
	}
}

// postgresEnv: eventpipe's Postgres broker (testbrokers: claim batch 10,
// poll 100 ms, 4 connections) against raw pgx on the same table.
func postgresEnv(tb testing.TB) *env {
	scope := testbrokers.Scope(tb, "postgres")
	ps := testbrokers.New(tb, "postgres", scope)
	cfg, err := pgxpool.ParseConfig(testenv.PostgresDSN(tb))
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MaxConns = 5
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	table := func(topic string) string {
		return pgx.Identifier{scope, postgres.DefaultTablePrefix + topic}.Sanitize()
	}
	return &env{
		kind: "postgres", ours: eventpipePipe{ps}, keeps: true,
		base: pgPipe{pool: pool, table: table, batch: postgres.DefaultBatchSize, poll: 100 * time.Millisecond}, baseName: "raw pgx",
		ensure: func(tb testing.TB, topic string) { initialize(tb, ps, topic) },
		purge: func(tb testing.TB, topic string) {
			if _, err := pool.Exec(context.Background(), `DELETE FROM `+table(topic)); err != nil {
				tb.Fatalf("purge %s: %v", topic, err)
			}
		},
	}
}

// memoryEnv: the embedded broker against a bare GoChannel of the same buffer.
func memoryEnv(tb testing.TB) *env {
	ps := testbrokers.New(tb, "memory", "")
	gc := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 256}, watermill.NopLogger{})
	tb.Cleanup(func() { _ = gc.Close() })
	return &env{
		kind: "memory", ours: eventpipePipe{ps}, base: watermillPipe{pub: gc, sub: gc}, baseName: "GoChannel",
		ensure: func(testing.TB, string) {},
		purge:  func(testing.TB, string) {},
	}
}

// callCounter counts SQS API requests (the X-Amz-Target of the JSON
// protocol), as an HTTP client wrapper: every operation, or only op.
type callCounter struct {
	inner aws.HTTPClient
	total *atomic.Int64
	op    string
}

func (c callCounter) Do(r *http.Request) (*http.Response, error) {
	if target := r.Header.Get("X-Amz-Target"); target == "AmazonSQS."+c.op || c.op == "" && strings.HasPrefix(target, "AmazonSQS.") {
		c.total.Add(1)
	}
	return c.inner.Do(r)
}

func countCalls(total *atomic.Int64) func(*awssqs.Options) { return countOp(total, "") }

// countOp counts the calls of one operation, e.g. "ReceiveMessage"; "" for
// all.
func countOp(total *atomic.Int64, op string) func(*awssqs.Options) {
	return func(o *awssqs.Options) {
		inner := o.HTTPClient
		if inner == nil {
			inner = http.DefaultClient
		}
		o.HTTPClient = callCounter{inner: inner, total: total, op: op}
	}
}

func sqsAWSConfig(tb testing.TB) aws.Config {
	return aws.Config{
		Region:       testenv.SQSRegion,
		BaseEndpoint: aws.String(testenv.SQSEndpoint(tb)),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	}
}

// newSQS is eventpipe's SQS broker as testbrokers builds it, with a call
// counter.
func newSQS(tb testing.TB, calls *atomic.Int64) *sqs.PubSub {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ps, err := sqs.New(ctx, sqs.Config{
		Region:            testenv.SQSRegion,
		Endpoint:          testenv.SQSEndpoint(tb),
		Credentials:       credentials.NewStaticCredentialsProvider("test", "test", ""),
		CreateQueues:      true,
		WaitTime:          time.Second,
		VisibilityTimeout: 3 * time.Second,
		ClientOptions:     []func(*awssqs.Options){countCalls(calls)},
	}, watermill.NopLogger{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = ps.Close() })
	return ps
}

// sqsEnv: eventpipe's SQS broker against watermill-aws with its defaults,
// both counting API calls, on the emulator.
func sqsEnv(tb testing.TB) *env {
	var oursCalls, baseCalls atomic.Int64
	ps := newSQS(tb, &oursCalls)
	awsCfg := sqsAWSConfig(tb)
	pub, err := wsqs.NewPublisher(wsqs.PublisherConfig{AWSConfig: awsCfg, OptFns: []func(*awssqs.Options){countCalls(&baseCalls)}}, watermill.NopLogger{})
	if err != nil {
		tb.Fatal(err)
	}
	sub, err := wsqs.NewSubscriber(wsqs.SubscriberConfig{AWSConfig: awsCfg, OptFns: []func(*awssqs.Options){countCalls(&baseCalls)}}, watermill.NopLogger{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = sub.Close() })
	admin := sqsAdminClient(tb)
	queueURL := func(tb testing.TB, topic string) string {
		out, err := admin.GetQueueUrl(context.Background(), &awssqs.GetQueueUrlInput{QueueName: aws.String(topic)})
		if err != nil {
			tb.Fatalf("queue url %s: %v", topic, err)
		}
		return aws.ToString(out.QueueUrl)
	}
	return &env{
		kind: "sqs", ours: eventpipePipe{ps}, base: watermillPipe{pub: pub, sub: sub}, baseName: "watermill-aws defaults", keeps: true, freshTopics: true,
		oursCalls: oursCalls.Load, baseCalls: baseCalls.Load,
		ensure: func(tb testing.TB, topic string) {
			initialize(tb, ps, topic)
			u := queueURL(tb, topic)
			tb.Cleanup(func() {
				_, _ = admin.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(u)})
			})
		},
		purge: func(tb testing.TB, topic string) {
			if _, err := admin.PurgeQueue(context.Background(), &awssqs.PurgeQueueInput{QueueUrl: aws.String(queueURL(tb, topic))}); err != nil {
				tb.Fatalf("purge %s: %v", topic, err)
			}
		},
	}
}

// sqsAdminClient is an SDK client on the emulator for purges and the raw
// batched relay.
func sqsAdminClient(tb testing.TB) *awssqs.Client {
	return awssqs.NewFromConfig(sqsAWSConfig(tb))
}
