// Package sqs is the Amazon SQS broker: standard queues through aws-sdk-go-v2,
// with watermill-aws's marshaling conventions and queue URL resolvers but our
// own publisher and receive loop.
//
// A topic is a queue's topology name; QueueName maps it to its SQS queue
// name (dots become hyphens, Config.QueuePrefix in front; see "Queue names"
// in names.go) on every path, and a name SQS would refuse is refused here
// too, even on the emulator. Publish sends with SendMessageBatch, ten messages
// (and at most 1 MiB) per call, and reports exactly which messages SQS
// refused. Subscribe runs Config.Workers long-polling receivers, each asking
// for Config.BatchSize messages, and hands every message of a batch out on its
// own: an ack deletes it (acks that arrive together are deleted together with
// DeleteMessageBatch; a failed delete is retried briefly), a nack leaves its
// visibility alone so that it comes back after the queue's visibility timeout
// (Lambda semantics; a route's explicit delay, metadata.ExplicitNackDelayKey,
// or Config.NackVisibility changes it instead), and one nack never holds back
// or gives up the rest of its batch — except on a FIFO queue, where a group's
// messages of one batch are handed out one at a time, in order, and those
// after one that is not acked are released unhandled (see Subscribe). While a
// message is received and unsettled, a heartbeat extends its visibility
// (ChangeMessageVisibilityBatch), so a handler may run longer than the
// visibility timeout. Every message carries metadata.AttemptKey
// (x-attempt), ApproximateReceiveCount − 1, and a redelivered one
// metadata.FirstFailureKey, from ApproximateFirstReceiveTimestamp: the start of
// its first attempt (SQS records no failure time; the first receive is when
// the attempt that failed first began). watermill-aws's subscriber is not
// used because it receives one message per call and abandons the rest of a
// batch on a nack.
//
// The emulator used in development and tests (fauxqs) is more lenient than
// SQS: it accepts more than 10 message attributes, any attribute name and
// empty attribute values. Publish checks SQS's own rules itself, so that what
// works against the emulator works against AWS.
package sqs

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	wsqs "github.com/ThreeDotsLabs/watermill-aws/sqs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/eventpipe/eventpipe/app/broker"
)

// ErrClosed is returned by Publish and Subscribe after Close.
var ErrClosed = errors.New("sqs: pubsub closed")

// QueueNotFoundError is returned by Publish and Subscribe for a topic whose
// queue does not exist while Config.CreateQueues is off, and by QueueStats.
// It is broker.ErrQueueNotFound for errors.Is.
type QueueNotFoundError struct {
	Topic string
	Queue string
}

// Error says which queue is missing and how to get it.
func (e *QueueNotFoundError) Error() string {
	return fmt.Sprintf("sqs: queue %q for topic %q does not exist (provision the topology, or set CreateQueues)", e.Queue, e.Topic)
}

// Is makes the error broker.ErrQueueNotFound for errors.Is.
func (e *QueueNotFoundError) Is(target error) bool { return target == broker.ErrQueueNotFound }

// PubSub is the SQS broker. It implements broker.PubSub, broker.Pinger,
// broker.NackDelayer, broker.QueueStatter, broker.DeadLetterSourcer and
// message.SubscribeInitializer. It holds no connection
// (SQS is HTTP), so it needs no reconnecting; Close ends its subscriptions.
type PubSub struct {
	cfg    Config
	client *sqs.Client
	logger watermill.LoggerAdapter
	names  *queueNames

	closing   chan struct{}
	closeOnce sync.Once
	mu        sync.Mutex // guards closed against subs.Add racing subs.Wait
	closed    bool
	subs      sync.WaitGroup
}

var (
	_ broker.PubSub                = (*PubSub)(nil)
	_ broker.Pinger                = (*PubSub)(nil)
	_ message.SubscribeInitializer = (*PubSub)(nil)
)

// New returns a PubSub for cfg. It loads the AWS configuration the way every
// AWS tool does (environment, shared files, default credential chain), with
// cfg's region, endpoint and credentials taking precedence. It makes no call
// to SQS; use Ping to check reachability.
func New(ctx context.Context, cfg Config, logger watermill.LoggerAdapter) (*PubSub, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}

	var opts []func(*awsconfig.LoadOptions) error
	if cfg.Region != "" {
		opts = append(opts, awsconfig.WithRegion(cfg.Region))
	}
	if cfg.Credentials != nil {
		opts = append(opts, awsconfig.WithCredentialsProvider(cfg.Credentials))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("sqs: load AWS configuration: %w", err)
	}
	if awsCfg.Region == "" {
		return nil, errors.New("sqs: no AWS region: set the region in the configuration, or AWS_REGION")
	}

	clientOpts := make([]func(*sqs.Options), 0, len(cfg.ClientOptions)+1)
	if cfg.Endpoint != "" {
		clientOpts = append(clientOpts, func(o *sqs.Options) { o.BaseEndpoint = aws.String(cfg.Endpoint) })
	}
	clientOpts = append(clientOpts, cfg.ClientOptions...)

	return &PubSub{
		cfg:     cfg,
		client:  sqs.NewFromConfig(awsCfg, clientOpts...),
		logger:  logger,
		names:   newQueueNames(cfg.QueuePrefix, cfg.Topics),
		closing: make(chan struct{}),
	}, nil
}

// Ping lists at most one queue: the cheapest call that proves the endpoint
// answers and accepts the credentials. It needs the sqs:ListQueues permission.
func (p *PubSub) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	if _, err := p.client.ListQueues(ctx, &sqs.ListQueuesInput{MaxResults: aws.Int32(1)}); err != nil {
		return fmt.Errorf("sqs: ping: %w", err)
	}
	return nil
}

// SubscribeInitialize creates the topic's queue (QueueName) if it does not exist, whatever
// Config.CreateQueues says, with SQS's default attributes.
func (p *PubSub) SubscribeInitialize(topic string) error {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.RequestTimeout)
	defer cancel()
	_, err := p.queueURL(ctx, topic, true)
	return err
}

// Close ends every subscription and waits for them: receiving stops, messages
// not yet handed out are made visible again, messages handed out get
// Config.DrainTimeout to be acked or nacked and are made visible again if they
// are not. Nothing is deleted without an ack. Publish and Subscribe fail
// afterwards. Calling Close again waits the same way and returns nil.
func (p *PubSub) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		close(p.closing)
	})
	p.subs.Wait()
	return nil
}

func (p *PubSub) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// queueURL resolves topic to the URL of its queue (QueueName), creating the
// queue when create is set and the resolver says it does not exist.
func (p *PubSub) queueURL(ctx context.Context, topic string, create bool) (string, error) {
	mapped, err := p.names.queue(topic)
	if err != nil {
		return "", err
	}
	res, err := p.cfg.QueueURLResolver.ResolveQueueUrl(ctx, wsqs.ResolveQueueUrlParams{
		Topic:     mapped,
		SqsClient: p.client,
		Logger:    p.logger,
	})
	if err != nil {
		return "", fmt.Errorf("sqs: resolve queue %s of topic %s: %w", mapped, topic, err)
	}
	if res.QueueURL != nil && *res.QueueURL != "" && (res.Exists == nil || *res.Exists) {
		return string(*res.QueueURL), nil
	}
	name := string(res.QueueName)
	if name == "" {
		name = mapped
	}
	if !create {
		return "", &QueueNotFoundError{Topic: topic, Queue: name}
	}
	in := &sqs.CreateQueueInput{QueueName: aws.String(name)}
	if isFIFO(name) {
		// SQS refuses a .fifo name without the attribute.
		in.Attributes = map[string]string{string(types.QueueAttributeNameFifoQueue): "true"}
	}
	out, err := p.client.CreateQueue(ctx, in)
	if err != nil {
		// Created meanwhile with other attributes: it exists, which is all
		// this call promises.
		var exists *types.QueueNameExists
		if !errors.As(err, &exists) {
			return "", fmt.Errorf("sqs: create queue %s: %w", name, err)
		}
		got, err := p.client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
		if err != nil {
			return "", fmt.Errorf("sqs: get queue %s: %w", name, err)
		}
		return aws.ToString(got.QueueUrl), nil
	}
	p.logger.Info("Created SQS queue", watermill.LogFields{"queue": name, "topic": topic})
	return aws.ToString(out.QueueUrl), nil
}
