package sqs_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsqs "github.com/ThreeDotsLabs/watermill-aws/sqs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/testenv"
)

// BenchmarkPublishConsume publishes b.N messages in calls of ten, then
// receives and acks them, against the emulator. The watermill-aws baseline is
// the stock publisher and subscriber with defaults: one SendMessage per
// message, one ReceiveMessage and one DeleteMessage per message received.
//
//	go test -run '^$' -bench PublishConsume -benchtime 5000x ./app/broker/sqs/
func BenchmarkPublishConsume(b *testing.B) {
	b.Run("eventpipe", func(b *testing.B) {
		ps := newPubSub(b, testConfig(b))
		benchPublishConsume(b, ps, ps, ps.SubscribeInitialize)
	})
	b.Run("watermill-aws", func(b *testing.B) {
		awsCfg := aws.Config{
			Region:       testenv.SQSRegion,
			BaseEndpoint: aws.String(testenv.SQSEndpoint(b)),
			Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		}
		pub, err := wsqs.NewPublisher(wsqs.PublisherConfig{AWSConfig: awsCfg}, watermill.NopLogger{})
		require.NoError(b, err)
		sub, err := wsqs.NewSubscriber(wsqs.SubscriberConfig{AWSConfig: awsCfg}, watermill.NopLogger{})
		require.NoError(b, err)
		b.Cleanup(func() { _ = sub.Close() })
		benchPublishConsume(b, pub, sub, sub.SubscribeInitialize)
	})
}

func benchPublishConsume(b *testing.B, pub message.Publisher, sub message.Subscriber, initialize func(string) error) {
	topic := "ept-bench-" + strings.ToLower(watermill.NewShortUUID())
	require.NoError(b, initialize(topic))
	msgs := newMessages(b.N)

	b.ResetTimer()
	start := time.Now()
	for i := 0; i < len(msgs); i += 10 {
		require.NoError(b, pub.Publish(topic, msgs[i:min(i+10, len(msgs))]...))
	}
	published := time.Since(start)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, err := sub.Subscribe(ctx, topic)
	require.NoError(b, err)
	start = time.Now()
	for range b.N {
		m := <-out
		m.Ack()
	}
	consumed := time.Since(start)
	b.StopTimer()

	b.ReportMetric(float64(b.N)/published.Seconds(), "published/s")
	b.ReportMetric(float64(b.N)/consumed.Seconds(), "consumed/s")
}
