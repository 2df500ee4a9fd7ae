package sqs

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	wsqs "github.com/ThreeDotsLabs/watermill-aws/sqs"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// Limits SQS puts on the knobs below; Validate holds the config to them so a
// bad value fails at start-up, not on the first API call.
const (
	maxBatchSize      = 10               // ReceiveMessage MaxNumberOfMessages, entries per *Batch call
	maxWaitTime       = 20 * time.Second // ReceiveMessage WaitTimeSeconds
	maxVisibility     = 12 * time.Hour   // ChangeMessageVisibility VisibilityTimeout
	defaultBatchSize  = maxBatchSize
	defaultWorkers    = 2
	defaultWaitTime   = maxWaitTime
	defaultDrain      = 30 * time.Second
	defaultReqTimeout = 30 * time.Second
)

// Config configures the SQS broker. The zero value plus a region is a working
// production configuration; every zero field means "the default" below.
type Config struct {
	// Region is the AWS region of the queues. Empty: the SDK's own resolution
	// (AWS_REGION, AWS_DEFAULT_REGION, the shared config file). New fails with
	// a clear error when neither gives one.
	Region string

	// Endpoint is the base URL of the SQS API, e.g. http://127.0.0.1:9324 for
	// the emulator. Empty: the SDK's own resolution, so AWS_ENDPOINT_URL_SQS and
	// AWS_ENDPOINT_URL work as they do for every AWS tool, and otherwise the
	// real SQS endpoint of Region is used.
	Endpoint string

	// Credentials sign every request. Nil: the AWS default chain (environment,
	// shared files, SSO, web identity, ECS/EC2 roles).
	Credentials aws.CredentialsProvider

	// CreateQueues makes Publish and Subscribe create a queue that does not
	// exist, with SQS's default attributes (no DLQ, 30 s visibility). Default
	// false: queues are provisioned from the topology, which gives them their
	// DLQ, redrive policy and timeouts; a queue created here would have none of
	// them and would then conflict with the provisioned attributes. With it
	// off, a missing queue is an error that names it. SubscribeInitialize
	// always creates: it is an explicit request to.
	CreateQueues bool

	// BatchSize is how many messages one ReceiveMessage call asks for, 1..10.
	// Default 10, SQS's maximum: fewer calls, and partial batch failures are
	// handled per message anyway.
	BatchSize int

	// QueueBatchSizes overrides BatchSize for some queues (topic → 1..10):
	// a spec's batch size per queue (the interviews spec receives 10 on one
	// queue and 1 on the other).
	QueueBatchSizes map[string]int

	// Workers is how many ReceiveMessage calls each Subscribe keeps running at
	// once while its queue has messages. Default 2. At most
	// BatchSize×Workers messages of one subscription are in flight (received
	// and not yet acked or nacked). While the queue is idle only one of them
	// long-polls: a receiver whose receive came back empty waits, unless it is
	// the last one polling, until a receive brings messages, so an idle
	// subscription costs one ReceiveMessage per WaitTime whatever Workers is
	// (SQS bills every request, empty receives included).
	Workers int

	// WaitTime is the long-poll time of ReceiveMessage, 1..20 s in whole
	// seconds. Default 20 s. There is no short polling: on an empty queue it
	// would spin. Close may take up to WaitTime: a poll under way is allowed to
	// finish and what it brings is released, because a poll abandoned
	// mid-flight can still take messages that then stay invisible for the
	// queue's whole visibility timeout (the emulator does exactly that).
	WaitTime time.Duration

	// NackVisibility is the visibility timeout a nacked message gets, i.e.
	// how long until it is delivered again, in whole seconds up to 12 h, when
	// the message carries no explicit delay (metadata.ExplicitNackDelayKey
	// with metadata.NackDelayKey: a route's own backoff). Default 0: the
	// visibility is left as it is, so the message comes back when the queue's
	// visibility timeout runs out (the SQS specs' Lambda semantics), and the
	// redrive policy moves it to the DLQ after maxReceiveCount deliveries.
	NackVisibility time.Duration

	// VisibilityTimeout is how long a received message stays invisible to
	// other consumers, in whole seconds up to 12 h. While a message handed to
	// the application is neither acked nor nacked, the subscription keeps
	// extending it (ChangeMessageVisibilityBatch) by this much, a third of it
	// after the last extension, so a handler that runs longer than the
	// visibility timeout is not redelivered meanwhile. Default 0: the queue's
	// own VisibilityTimeout, read once per Subscribe (GetQueueAttributes, so
	// the sqs:GetQueueAttributes permission is needed); a non-zero value is
	// also asked for on every ReceiveMessage, overriding the queue's. A queue
	// whose timeout is 0 gets no heartbeat. Extending stops at ack, nack, and
	// DrainTimeout after the end of the subscription; SQS itself refuses to
	// extend past 12 h after the first receive.
	VisibilityTimeout time.Duration

	// DrainTimeout is how long the end of a subscription (Close, or the
	// Subscribe context ending) waits for messages already handed to the
	// application to be acked or nacked; their acks still delete them, and
	// their contexts stay live meanwhile. Messages still unsettled after it are
	// released (visibility 0, with a log line) and their contexts cancelled,
	// so another consumer gets them at once instead of after the visibility
	// timeout. A handler that ignores its context may then still be running
	// while a second copy starts; at-least-once delivery allows that anyway,
	// and the effect's dedupe row makes it harmless. Default 30 s.
	DrainTimeout time.Duration

	// RequestTimeout bounds each SQS call other than the long poll, which gets
	// WaitTime + RequestTimeout. Default 30 s.
	RequestTimeout time.Duration

	// Marshaler turns a message into an SQS message. Default Marshaler{}.
	Marshaler wsqs.Marshaler

	// Unmarshaler turns a received SQS message into a message. Default
	// Marshaler{}.
	Unmarshaler wsqs.Unmarshaler

	// QueuePrefix is put in front of every queue name (see QueueName), e.g.
	// "prod-" to keep two stages' queues apart in one account and region.
	// Default "": a valid topology name is the queue name. At most ASCII
	// letters, digits, '-' and '_', and every queue name with it must still
	// fit SQS's 80 characters (checked for Topics by Validate, for every
	// other topic when it is used).
	QueuePrefix string

	// Topics are the topics (topology queue names) this PubSub is known to
	// serve: the enabled specs' queues and dead-letter queues. Validate
	// refuses any whose queue name SQS would refuse, or that two of them
	// share, naming them; and their queue names map back to them exactly
	// (DeadLetterSources, TopicOf). Other topics work too and are
	// remembered when first used.
	Topics []string

	// QueueURLResolver maps a queue name (QueueName of the topic, passed as
	// ResolveQueueUrlParams.Topic) to a queue URL. Default: GetQueueUrl on
	// that name, cached.
	QueueURLResolver wsqs.QueueUrlResolver

	// ClientOptions are applied to the SQS client after the endpoint (custom
	// HTTP client, retryer, middleware in tests).
	ClientOptions []func(*sqs.Options)
}

func (c *Config) setDefaults() {
	if c.BatchSize == 0 {
		c.BatchSize = defaultBatchSize
	}
	if c.Workers == 0 {
		c.Workers = defaultWorkers
	}
	if c.WaitTime == 0 {
		c.WaitTime = defaultWaitTime
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = defaultDrain
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = defaultReqTimeout
	}
	if c.Marshaler == nil {
		c.Marshaler = Marshaler{}
	}
	if c.Unmarshaler == nil {
		c.Unmarshaler = Marshaler{}
	}
	if c.QueueURLResolver == nil {
		c.QueueURLResolver = wsqs.NewGetQueueUrlByNameUrlResolver(wsqs.GetQueueUrlByNameUrlResolverConfig{})
	}
}

// Validate reports every problem with the configuration, joined. Zero values
// stand for their defaults and are valid.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("sqs: "+format, args...))
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		switch {
		case err != nil:
			add("endpoint %q: %v", c.Endpoint, err)
		case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			add("endpoint %q: want an absolute http or https URL", c.Endpoint)
		}
	}
	if c.BatchSize < 0 || c.BatchSize > maxBatchSize {
		add("batch size %d: want 1..%d", c.BatchSize, maxBatchSize)
	}
	for q, n := range c.QueueBatchSizes {
		if n < 1 || n > maxBatchSize {
			add("batch size %d of queue %s: want 1..%d", n, q, maxBatchSize)
		}
	}
	if c.Workers < 0 {
		add("workers %d: must not be negative", c.Workers)
	}
	if c.WaitTime < 0 || c.WaitTime > maxWaitTime || c.WaitTime%time.Second != 0 {
		add("wait time %s: want whole seconds, 1s..%s", c.WaitTime, maxWaitTime)
	}
	if c.NackVisibility < 0 || c.NackVisibility > maxVisibility || c.NackVisibility%time.Second != 0 {
		add("nack visibility %s: want whole seconds, 0..%s", c.NackVisibility, maxVisibility)
	}
	if c.VisibilityTimeout < 0 || c.VisibilityTimeout > maxVisibility || c.VisibilityTimeout%time.Second != 0 {
		add("visibility timeout %s: want whole seconds, 0..%s", c.VisibilityTimeout, maxVisibility)
	}
	if c.DrainTimeout < 0 {
		add("drain timeout %s: must not be negative", c.DrainTimeout)
	}
	if c.RequestTimeout < 0 {
		add("request timeout %s: must not be negative", c.RequestTimeout)
	}
	if reason := checkPrefix(c.QueuePrefix); reason != "" {
		add("queue prefix %q: %s", c.QueuePrefix, reason)
	} else {
		errs = append(errs, checkTopics(c.QueuePrefix, c.Topics)...)
	}
	return errors.Join(errs...)
}

// batchSizeOf is the receive batch size of topic's queue.
func (c Config) batchSizeOf(topic string) int {
	if n, ok := c.QueueBatchSizes[topic]; ok {
		return n
	}
	return c.BatchSize
}
