package rabbitmq_test

import (
	"strconv"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
)

// BenchmarkPublish compares Publish with watermill-amqp's publisher in the
// configuration eventpipe would otherwise use (durable queue, pool of 16
// channels, confirms on), sending 256-byte persistent messages with confirms.
//
//	go test -run '^$' -bench Publish ./app/broker/rabbitmq/
func BenchmarkPublish(b *testing.B) {
	amqpURL, _ := newVhost(b)
	payload := make([]byte, 256)

	// watermill-amqp's publisher declares no queue: without the subscriber's
	// declaration every message would be unroutable, dropped, and confirmed
	// at once without touching the disk.
	baseline := func(b *testing.B) message.Publisher {
		cfg := wamqp.NewDurableQueueConfig(amqpURL)
		cfg.Publish.ChannelPoolSize = 16
		cfg.Publish.ConfirmDelivery = true
		pub, err := wamqp.NewPublisher(cfg, watermill.NopLogger{})
		require.NoError(b, err)
		sub, err := wamqp.NewSubscriber(cfg, watermill.NopLogger{})
		require.NoError(b, err)
		b.Cleanup(func() { _ = pub.Close(); _ = sub.Close() })
		return declaringPublisher{pub, sub, &sync.Map{}}
	}
	ours := func(b *testing.B) message.Publisher { return newPubSub(b, amqpURL, nil) }

	for _, pub := range []struct {
		name string
		new  func(*testing.B) message.Publisher
	}{{"watermill-amqp", baseline}, {"eventpipe", ours}} {
		for _, batch := range []int{1, 100} {
			b.Run(pub.name+"/batch="+strconv.Itoa(batch), func(b *testing.B) {
				p := pub.new(b)
				topic := "ept-bench-" + watermill.NewShortUUID()
				require.NoError(b, p.Publish(topic, message.NewMessage(watermill.NewUUID(), payload)))
				b.ResetTimer()
				for b.Loop() {
					msgs := make([]*message.Message, batch)
					for i := range msgs {
						msgs[i] = message.NewMessage(watermill.NewUUID(), payload)
					}
					if err := p.Publish(topic, msgs...); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "msg/s")
			})
		}
		b.Run(pub.name+"/parallel", func(b *testing.B) {
			p := pub.new(b)
			topic := "ept-bench-" + watermill.NewShortUUID()
			require.NoError(b, p.Publish(topic, message.NewMessage(watermill.NewUUID(), payload)))
			b.SetParallelism(4) // 4 × GOMAXPROCS publishers
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := p.Publish(topic, message.NewMessage(watermill.NewUUID(), payload)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
		})
	}
}

// declaringPublisher declares a topic's queue before its first publish, as
// PubSub does.
type declaringPublisher struct {
	*wamqp.Publisher
	sub      *wamqp.Subscriber
	declared *sync.Map
}

func (p declaringPublisher) Publish(topic string, msgs ...*message.Message) error {
	if _, ok := p.declared.Load(topic); !ok {
		if err := p.sub.SubscribeInitialize(topic); err != nil {
			return err
		}
		p.declared.Store(topic, true)
	}
	return p.Publisher.Publish(topic, msgs...)
}
