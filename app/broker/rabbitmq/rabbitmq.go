// Package rabbitmq is the RabbitMQ broker. By default a topic is a durable
// queue, published to through the default exchange with the queue name as
// routing key, so the subscribers of one topic compete for its messages.
// Publishes are persistent and mandatory, and wait for the broker's publisher
// confirms: a message no queue took is an error (*UnroutableError), not a
// confirmed success.
//
// It speaks AMQP through amqp091-go and keeps watermill-amqp's wire format
// (its DefaultMarshaler, wrapped by Marshaler), but not watermill-amqp's
// publisher, subscriber and connection wrapper, which eventpipe's tests found
// unfit on reconnects:
//
//   - the connection wrapper swaps its "connected" channel without a lock, a
//     data race on every reconnect (watermill issue #693);
//   - a pooled publish channel that fails to reopen is never returned to the
//     pool; after ChannelPoolSize such failures every Publish blocks forever;
//   - a publish waits for its confirm with no context or timeout, so a broker
//     that blocks the connection (a memory alarm) hangs the caller;
//   - confirms are awaited one message at a time.
//
// This package also pools publish channels, pipelines the confirms of a batch,
// prefetches a real batch instead of 1, reads every AMQP header type (see
// Marshaler), and waits for a broker that is down at start.
//
// Nothing is lost, and everything is counted:
//
//   - A message that no queue took comes back (publishes are mandatory) and
//     fails its Publish with *UnroutableError; the topic's topology is then
//     declared again, as it is after every reconnect, since the broker may
//     have lost it.
//   - While RabbitMQ blocks the publish connection (a memory or disk alarm)
//     Publish fails at once with ErrBlocked instead of waiting for a confirm
//     that cannot come, and Close does not wait for a broker that no longer
//     reads.
//   - Attempts are counted by the broker on quorum queues and by eventpipe on
//     classic queues, crashes included — on ordered classic queues in an
//     AttemptLedger, which keeps the queue's order — and a publisher's
//     x-attempt is never trusted (see attempts.go, decisions 0010 and 0016).
package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/cenkalti/backoff/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// QueueType is the RabbitMQ type of the queues DurableQueues declares.
type QueueType string

// Queue types RabbitMQ offers for durable queues.
const (
	// QueueClassic is RabbitMQ's original queue type.
	QueueClassic QueueType = "classic"
	// QueueQuorum is the replicated queue type; it counts deliveries in
	// x-delivery-count, which a delivery limit can act on.
	QueueQuorum QueueType = "quorum"
)

// ErrNotConfirmed is returned by Publish when the broker refuses a message
// (a publisher-confirm nack): a full queue with overflow reject-publish, or an
// internal error. The message was not stored.
var ErrNotConfirmed = errors.New("rabbitmq: broker did not confirm the message")

// DefaultAckDelay is Config.AckDelay's default.
const DefaultAckDelay = time.Millisecond

// maxAckDelay bounds Config.AckDelay: an ack held longer only delays the
// broker's next deliveries and redelivers more after a crash.
const maxAckDelay = time.Second

// Config configures the RabbitMQ broker.
type Config struct {
	// URL is the AMQP URI, amqp[s]://user:password@host:port/vhost. Required.
	URL string

	// Prefetch is how many unacknowledged messages RabbitMQ pushes to each
	// subscription ahead of its acks. Default 100.
	Prefetch int
	// QueuePrefetch overrides Prefetch for some queues (queue → 1..65535): a
	// spec's batch size per queue (the interviews spec's report-generate
	// takes one message at a time).
	QueuePrefetch map[string]int

	// AckDelay is how long a subscription may hold an ack back so that the
	// acks of the deliveries after it go out with it, as one multiple ack:
	// RabbitMQ's cost is per ack frame (decision 0040). An ack goes at once
	// when half the queue's prefetch is due, and a subscription that stops
	// sends what it holds first. It applies to subscriptions handling several
	// deliveries at once (broker.WithConcurrency); one handling one at a
	// time acks each at once. Default 1 ms; negative: every ack at once (acks
	// that come due while a frame is being written still share the next).
	AckDelay time.Duration

	// ChannelPoolSize is the number of AMQP channels publishes share, and so
	// the number of Publish calls in flight at once; more wait for a free
	// channel. Default 16.
	ChannelPoolSize int

	// DisableConfirms turns publisher confirms off: Publish then returns once
	// the message is written to the socket, and a message the broker drops
	// (a full queue, a crash, no queue bound: without confirms a return
	// cannot be matched to its publish, so publishes are not mandatory) is
	// lost without an error. Confirms are on by default; only benchmarks
	// should turn them off.
	DisableConfirms bool

	// PublishTimeout bounds one Publish call: waiting for a free channel,
	// sending, and awaiting the confirms. The messages' own contexts can
	// shorten it. Default 30 s.
	PublishTimeout time.Duration

	// QueueType is the type of the queues declared for topics when Topology
	// is nil: QueueClassic (the default) or QueueQuorum. Leave it empty when
	// Topology is set.
	QueueType QueueType

	// Topology maps topics to exchanges and queues and declares them. Nil
	// means DurableQueues{Type: QueueType}.
	Topology Topology

	// AttemptLedger, when set, counts the crash redeliveries of ordered
	// classic queues (Orderer), whose redeliveries cannot be counted by a
	// republished copy without reordering them (attempts.go). It must be
	// durable (a database): it has to outlive the consumer that crashed.
	// Without one, a message that kills its consumer every time is
	// redelivered forever on such a queue; a quorum queue needs none.
	AttemptLedger AttemptLedger

	// ReconnectInitialInterval is the first pause before connecting again,
	// at start or after the connection drops; the pause grows by half each
	// time. Default 500 ms.
	ReconnectInitialInterval time.Duration

	// ReconnectMaxInterval caps the pause between connection attempts.
	// Default 30 s.
	ReconnectMaxInterval time.Duration

	// ConnectionName labels the connections in RabbitMQ's management UI and
	// rabbitmqctl, suffixed with "publish" and "consume". Default "eventpipe".
	ConnectionName string

	// ManagementURL is the base URL of RabbitMQ's management HTTP API (the
	// rabbitmq_management plugin), http[s]://[user:password@]host:port,
	// where QueueStats reads the messages in flight: RabbitMQ reports
	// unacknowledged messages nowhere else. Without user and password it
	// logs in with URL's. Default: URL's host on the plugin's default port,
	// http://host:15672 (https://host:15671 for amqps). When the API does
	// not answer, QueueStats still counts the ready messages and says the
	// in-flight count is unknown.
	ManagementURL string
}

func (c *Config) setDefaults() {
	if c.Prefetch == 0 {
		c.Prefetch = 100
	}
	if c.AckDelay == 0 {
		c.AckDelay = DefaultAckDelay
	}
	if c.ChannelPoolSize == 0 {
		c.ChannelPoolSize = 16
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = 30 * time.Second
	}
	if c.QueueType == "" && c.Topology == nil {
		c.QueueType = QueueClassic
	}
	if c.ReconnectInitialInterval == 0 {
		c.ReconnectInitialInterval = 500 * time.Millisecond
	}
	if c.ReconnectMaxInterval == 0 {
		c.ReconnectMaxInterval = 30 * time.Second
	}
	if c.ConnectionName == "" {
		c.ConnectionName = "eventpipe"
	}
	if c.ManagementURL == "" {
		c.ManagementURL = defaultManagementURL(c.URL)
	}
}

// Validate reports every problem with the configuration.
func (c Config) Validate() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("rabbitmq: url is required"))
	} else if _, err := amqp.ParseURI(c.URL); err != nil {
		errs = append(errs, fmt.Errorf("rabbitmq: url: %w", err))
	}
	if c.Prefetch < 0 {
		errs = append(errs, fmt.Errorf("rabbitmq: prefetch %d must not be negative", c.Prefetch))
	}
	if c.Prefetch > 65535 {
		// The AMQP field is 16 bits wide.
		errs = append(errs, fmt.Errorf("rabbitmq: prefetch %d exceeds 65535", c.Prefetch))
	}
	for q, n := range c.QueuePrefetch {
		if n < 1 || n > 65535 {
			errs = append(errs, fmt.Errorf("rabbitmq: prefetch %d of queue %s: want 1..65535", n, q))
		}
	}
	if c.ChannelPoolSize < 0 {
		errs = append(errs, fmt.Errorf("rabbitmq: channel pool size %d must not be negative", c.ChannelPoolSize))
	}
	if c.AckDelay > maxAckDelay {
		errs = append(errs, fmt.Errorf("rabbitmq: ack delay %s exceeds %s", c.AckDelay, maxAckDelay))
	}
	if c.PublishTimeout < 0 {
		errs = append(errs, fmt.Errorf("rabbitmq: publish timeout %s must not be negative", c.PublishTimeout))
	}
	switch {
	case c.Topology != nil && c.QueueType != "":
		errs = append(errs, errors.New("rabbitmq: queue type applies to auto-declared queues only; with a topology, declare the type there"))
	case c.Topology == nil && c.QueueType != QueueClassic && c.QueueType != QueueQuorum:
		errs = append(errs, fmt.Errorf("rabbitmq: queue type %q: want %q or %q", c.QueueType, QueueClassic, QueueQuorum))
	}
	if c.ReconnectInitialInterval < 0 || c.ReconnectMaxInterval < 0 {
		errs = append(errs, errors.New("rabbitmq: reconnect intervals must not be negative"))
	}
	if c.ReconnectMaxInterval < c.ReconnectInitialInterval {
		errs = append(errs, fmt.Errorf("rabbitmq: reconnect max interval %s is below the initial interval %s", c.ReconnectMaxInterval, c.ReconnectInitialInterval))
	}
	if c.ManagementURL != "" {
		if err := validManagementURL(c.ManagementURL); err != nil {
			errs = append(errs, fmt.Errorf("rabbitmq: management url: %w", err))
		}
	}
	return errors.Join(errs...)
}

// PubSub is the RabbitMQ broker. It implements broker.PubSub, broker.Pinger,
// broker.Provisioner, broker.QueueStatter and message.SubscribeInitializer.
//
// It holds two connections, one to publish and one to consume, as RabbitMQ
// advises: under flow control or a memory alarm the broker stops reading from
// connections that publish, and a consumer sharing such a connection could no
// longer ack — the queues whose draining would end the alarm would stop
// draining. Every subscription has its own channel on the consume connection;
// publishes share a pool of channels on the publish connection.
type PubSub struct {
	cfg       Config
	topology  Topology
	marshaler Marshaler
	logger    watermill.LoggerAdapter

	pubConn *connection
	subConn *connection
	// pool holds ChannelPoolSize publish channels, opened on first use and
	// reopened when found closed; a slot always goes back, even empty.
	pool chan *pubChannel

	// declared holds the topics whose topology is in place, so that Publish
	// declares once and never loses a message as unroutable because nobody
	// has subscribed yet. A return clears the topic (forgetDeclared), a
	// reconnect clears them all (forgetAllDeclared).
	declared sync.Map

	// mu guards closed; publishes hold it shared so that Close waits for
	// them. closeCtx ends when Close starts, to stop every wait.
	mu            sync.RWMutex
	closed        bool
	closeCtx      context.Context
	closeCancel   context.CancelFunc
	subscriptions sync.WaitGroup
	closeOnce     sync.Once
	closeErr      error
}

var (
	_ broker.PubSub                = (*PubSub)(nil)
	_ broker.Pinger                = (*PubSub)(nil)
	_ message.SubscribeInitializer = (*PubSub)(nil)
)

// New connects to RabbitMQ and returns a ready broker. While RabbitMQ is
// unreachable it logs each failed attempt and tries again with backoff until
// it connects or ctx ends, so a service started before its broker starts a
// little later, cleanly; New never blocks past ctx. Once connected, it
// reconnects by itself, and subscriptions resume on the new connection.
func New(ctx context.Context, cfg Config, logger watermill.LoggerAdapter) (*PubSub, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	p := &PubSub{
		cfg:      cfg,
		topology: cfg.Topology,
		logger:   logger,
		pool:     make(chan *pubChannel, cfg.ChannelPoolSize),
	}
	p.closeCtx, p.closeCancel = context.WithCancel(context.Background())
	if p.topology == nil {
		p.topology = DurableQueues{Type: cfg.QueueType}
	}
	for range cfg.ChannelPoolSize {
		p.pool <- nil
	}

	var err error
	if p.pubConn, err = openConnection(ctx, "publish", cfg, logger, p.forgetAllDeclared); err != nil {
		p.closeCancel()
		return nil, err
	}
	if p.subConn, err = openConnection(ctx, "consume", cfg, logger, p.forgetAllDeclared); err != nil {
		p.closeCancel()
		_ = p.pubConn.close()
		return nil, err
	}
	return p, nil
}

// Publish checks the payload limit, declares the topic's topology on first
// use, and publishes the messages in order on one channel. With confirms on,
// it sends them all, mandatory, then waits until the broker has confirmed
// each one; it returns an error wrapping ErrNotConfirmed if the broker
// refused one, a *UnroutableError if it returned one that no queue took,
// ErrNotConnected while reconnecting, and ErrBlocked (at once) while the
// broker blocks the publish connection. After an error some of the messages
// may have been stored: publish again, consumers deduplicate.
func (p *PubSub) Publish(topic string, msgs ...*message.Message) error {
	if err := broker.CheckPayloads(msgs); err != nil {
		return err
	}
	if len(msgs) == 0 {
		return nil
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return fmt.Errorf("publish %s: %w", topic, ErrClosed)
	}
	if err := p.publish(topic, msgs); err != nil {
		return fmt.Errorf("publish %s: %w", topic, err)
	}
	return nil
}

// SubscribeInitialize declares the topic's topology, so that messages
// published before anyone subscribes wait in its queue.
func (p *PubSub) SubscribeInitialize(topic string) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return fmt.Errorf("declare %s: %w", topic, ErrClosed)
	}
	if err := p.declare(topic); err != nil {
		return fmt.Errorf("declare %s: %w", topic, err)
	}
	return nil
}

// declare declares topic's topology on a channel of its own, on the consume
// connection, and closes the channel.
func (p *PubSub) declare(topic string) error {
	ch, err := p.subConn.channel()
	if err != nil {
		return err
	}
	defer func() { _ = ch.Close() }()
	if err := p.topology.Declare(ch, topic); err != nil {
		return err
	}
	p.declared.Store(topic, struct{}{})
	return nil
}

// Subscribe declares the topic's topology and consumes from its queue until
// ctx ends or the broker is closed; then the channel closes. A lost
// connection does not end the subscription: it resumes once the broker is
// back, and the messages it had not acked are delivered again.
//
// Each message must be acked or nacked before the next is delivered; a nack
// puts the message back in the queue, counted (attempts.go): as a copy at the
// back of a classic queue, by a native requeue on a quorum queue. A message
// redelivered on a classic queue after its consumer died is counted the same
// way before it is delivered again. Subscribe itself fails, with an error
// wrapping ErrNotConnected, if the broker is reconnecting at that moment.
func (p *PubSub) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return nil, fmt.Errorf("subscribe %s: %w", topic, ErrClosed)
	}
	if err := p.declare(topic); err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", topic, err)
	}
	out := make(chan *message.Message)
	p.subscriptions.Add(1)
	go p.consume(ctx, topic, out)
	return out, nil
}

// consume runs one subscription, restarting it after every lost channel.
func (p *PubSub) consume(ctx context.Context, topic string, out chan<- *message.Message) {
	defer p.subscriptions.Done()
	defer close(out)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(p.closeCtx, cancel)()
	fields := watermill.LogFields{"topic": topic, "amqp_queue": p.topology.Queue(topic)}
	b := &backoff.ExponentialBackOff{
		InitialInterval:     p.cfg.ReconnectInitialInterval,
		RandomizationFactor: 0.5,
		Multiplier:          1.5,
		MaxInterval:         p.cfg.ReconnectMaxInterval,
	}
	b.Reset()
	for first := true; ; first = false {
		if !first {
			if err := p.subConn.waitUp(ctx); err != nil {
				return
			}
			wait := b.NextBackOff()
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		started, err := p.consumeOnce(ctx, topic, out)
		if ctx.Err() != nil {
			return
		}
		if started {
			b.Reset()
		}
		p.logger.Error("Subscription interrupted, resubscribing", err, fields)
	}
}

// consumeOnce consumes on one channel until it closes, ctx ends or the broker
// closes. started reports whether the consumer was registered.
func (p *PubSub) consumeOnce(ctx context.Context, topic string, out chan<- *message.Message) (started bool, err error) {
	ch, err := p.subConn.channel()
	if err != nil {
		return false, err
	}
	defer func() { _ = ch.Close() }()
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))

	isOrdered := ordered(p.topology, topic)
	prefetch := p.cfg.Prefetch
	if n, ok := p.cfg.QueuePrefetch[p.topology.Queue(topic)]; ok {
		prefetch = n
	}
	if isOrdered {
		// An ordered queue is handled one message at a time anyway; a
		// message prefetched behind the one in hand would come back flagged
		// (and, on a quorum queue, counted) every time that one crashes its
		// consumer, and be dead-lettered for crashes it never caused.
		prefetch = 1
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return false, fmt.Errorf("set prefetch: %w", err)
	}
	// Again, in case the broker lost the queue (a non-durable broker reset,
	// an operator's delete) while the connection was down.
	if err := p.topology.Declare(ch, topic); err != nil {
		return false, err
	}
	src := source{queue: p.topology.Queue(topic), typ: typeOfQueue(p.topology, topic), ordered: isOrdered, ch: ch, prefetch: prefetch}
	deliveries, err := ch.Consume(src.queue, "", false, false, false, false, nil)
	if err != nil {
		return false, fmt.Errorf("consume: %w", err)
	}
	gone := watchClose(closed)
	// An ordered queue is handled one message at a time (prefetch 1).
	if n := broker.ConcurrencyWithin(ctx, prefetch); n > 1 {
		return true, p.consumeConcurrently(ctx, src, deliveries, out, gone, n)
	}
	for {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return true, gone.ended()
			}
			if err := p.deliver(ctx, src, &d, out, gone); err != nil {
				return true, err
			}
		case <-gone.done:
			return true, gone.err
		case <-ctx.Done():
			return true, ctx.Err()
		}
	}
}

// consumeConcurrently hands up to n deliveries to the subscriber at once,
// each settled on its own as the subscriber says (deliver). It returns when
// the subscription must stop, once every delivery it handed out is settled or
// given up: a handler finishing while the subscription is cancelled can still
// ack what it has done, and what is left unsettled returns to the queue when
// the channel closes.
func (p *PubSub) consumeConcurrently(ctx context.Context, src source, deliveries <-chan amqp.Delivery, out chan<- *message.Message, gone *closeWatch, n int) error {
	// The first delivery that must stop the subscription cancels the rest,
	// and its error is the subscription's (context.Cause).
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	src.acks = newAcker(src.ch.Ack, max(p.cfg.AckDelay, 0), src.prefetch/2)
	// After every delivery is settled: what is due goes out before the
	// channel closes.
	defer src.acks.close()
	var running sync.WaitGroup
	defer running.Wait()
	slots := make(chan struct{}, n)
	for {
		select {
		case slots <- struct{}{}:
		case <-gone.done:
			return gone.err
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		select {
		case d, ok := <-deliveries:
			if !ok {
				return gone.ended()
			}
			running.Add(1)
			go func() {
				defer running.Done()
				defer func() { <-slots }()
				if err := p.deliver(ctx, src, &d, out, gone); err != nil {
					stop(err)
				}
			}()
		case <-gone.done:
			return gone.err
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// closeWatch tells every delivery of a channel at once that the channel
// closed: NotifyClose reports it once, to one receiver.
type closeWatch struct {
	done chan struct{}
	// err is why the channel closed (closeError), set before done closes.
	err error
}

func watchClose(closed <-chan *amqp.Error) *closeWatch {
	w := &closeWatch{done: make(chan struct{})}
	go func() {
		w.err = closeError(<-closed)
		close(w.done)
	}()
	return w
}

// ended is the error of a subscription whose deliveries channel closed: why
// its channel closed, or, when the channel is still open (the broker
// cancelled the consumer: its queue was deleted), that the deliveries ended.
// A channel's close is reported before its deliveries channel closes, so the
// watcher has it within moments.
func (w *closeWatch) ended() error {
	t := time.NewTimer(100 * time.Millisecond)
	defer t.Stop()
	select {
	case <-w.done:
		return w.err
	case <-t.C:
		return errors.New("delivery channel closed")
	}
}

// source is the queue a subscription consumes from, its type, and the
// channel and prefetch it consumes with.
type source struct {
	queue string
	typ   QueueType
	// ordered: the queue keeps its messages in order (Orderer).
	ordered  bool
	ch       *amqp.Channel
	prefetch int
	// acks coalesces the acks of concurrent deliveries (acker); nil when
	// one delivery is handled at a time, each acked on its own.
	acks *acker
}

// ack acks d: through the acker when there is one.
func (src source) ack(d *amqp.Delivery) error {
	if src.acks != nil {
		src.acks.ack(d.DeliveryTag)
		return nil
	}
	return d.Ack(false)
}

// settled tells the acker that d was settled by a frame of its own, written.
func (src source) settled(d *amqp.Delivery) {
	if src.acks != nil {
		src.acks.settled(d.DeliveryTag)
	}
}

// ackBarrier returns once the broker has processed every ack sent before on
// src's channel: AMQP acks are not confirmed, but a channel's methods are
// processed in order, and basic.qos (the same prefetch again) is answered.
// After a counted copy is confirmed, the original must be settled before the
// copy can be handled: a consumer dying in between would otherwise leave both
// in the queue.
func (src source) ackBarrier() error {
	if err := src.ch.Qos(src.prefetch, 0, false); err != nil {
		return fmt.Errorf("ack barrier: %w", err)
	}
	return nil
}

// deliver hands one delivery to the subscriber and settles it as the
// subscriber says. It returns an error when the subscription must stop.
func (p *PubSub) deliver(ctx context.Context, src source, d *amqp.Delivery, out chan<- *message.Message, gone *closeWatch) error {
	msg := p.marshaler.unmarshal(d)
	if d.Redelivered {
		msg.Metadata.Set(wamqp.MetadataRedeliveredKey, "true")
	}
	setAttempt(msg, d, src.typ)
	attempt := attemptOf(d, src.typ)
	// ledgered: this delivery's crashes are in the attempt ledger, whose
	// row goes once the delivery is settled.
	ledgered := false
	if d.Redelivered && src.typ != QueueQuorum {
		if !src.ordered {
			if done, err := p.recount(ctx, src, d, msg); done || err != nil {
				if done && err == nil {
					src.settled(d)
				}
				return err
			}
		} else if n, ok := p.countCrash(ctx, src, d, msg); ok {
			attempt, ledgered = n, true
			msg.Metadata.Set(metadata.AttemptKey, strconv.Itoa(attempt))
		}
	}
	msgCtx, cancel := context.WithCancel(withDelivery(ctx, d, src.queue))
	defer cancel()
	msg.SetContext(msgCtx)

	select {
	case out <- msg:
	case <-ctx.Done():
		// Not nacked: the consumer's channel closes next, which returns
		// every unsettled delivery to the queue at once. A nack would let
		// the broker push it to this consumer again first, counting an
		// extra delivery on a quorum queue.
		return ctx.Err()
	case <-gone.done:
		return gone.err
	}

	// Not ctx: a handler finishing while its subscription is cancelled must
	// still be able to ack what it has done. Only Close cuts it short.
	select {
	case <-msg.Acked():
		if err := src.ack(d); err != nil {
			return fmt.Errorf("ack %s: %w", msg.UUID, err)
		}
		if ledgered {
			p.forgetCrashes(src, d, msg)
		}
	case <-msg.Nacked():
		if err := p.settleNack(ctx, src, d, msg, attempt, ledgered); err != nil {
			return err
		}
	case <-p.closeCtx.Done():
		// Returned to the queue by the channel's close, as above.
		return ErrClosed
	case <-gone.done:
		// The broker requeues the delivery itself.
		return gone.err
	}
	return nil
}

// settleNack gives a nacked delivery, of attempt earlier attempts, back to
// its queue: natively on a quorum queue, which counts it, as a counted copy
// on a classic queue, for a message without message_id, whose id only a copy
// can keep (attempts.go), and for a nack with a delay, which only a copy can
// wait out (delay.go). A copy carries the whole count, so the delivery's row
// in the attempt ledger (ledgered) goes once the copy is in.
func (p *PubSub) settleNack(ctx context.Context, src source, d *amqp.Delivery, msg *message.Message, attempt int, ledgered bool) error {
	delay := metadata.NackDelay(msg)
	if src.typ != QueueQuorum || d.MessageId == "" || delay > 0 {
		err := p.republish(ctx, src, d, msg, attempt+1, delay)
		if err == nil {
			if err := errors.Join(d.Ack(false), src.ackBarrier()); err != nil {
				// The copy is in the queue; the original comes back too once
				// the channel closes: a duplicate, which consumers absorb.
				return fmt.Errorf("ack %s after its counted redelivery: %w", msg.UUID, err)
			}
			src.settled(d)
			if ledgered {
				p.forgetCrashes(src, d, msg)
			}
			return nil
		}
		fields := watermill.LogFields{"message_uuid": msg.UUID, "amqp_queue": src.queue}
		if ctx.Err() != nil {
			// Shutdown: a handler cancelled at the shutdown timeout nacks
			// after intake stopped. The requeued delivery comes back
			// redelivered and is counted then (recount), so nothing is
			// wrong; a copy published now would race the channel's close.
			p.logger.Info("Subscription stopping: nacked message requeued", fields)
		} else {
			p.logger.Error("Counted redelivery failed, requeueing the message", err, fields)
		}
	}
	if err := d.Nack(false, true); err != nil {
		return fmt.Errorf("nack %s: %w", msg.UUID, err)
	}
	src.settled(d)
	return nil
}

func closeError(amqpErr *amqp.Error) error {
	if amqpErr == nil {
		return ErrNotConnected
	}
	return amqpErr
}

// Ping reports whether both connections are up: while either reconnects it
// returns an error wrapping ErrNotConnected, and after Close one wrapping
// ErrClosed.
func (p *PubSub) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var errs []error
	for _, c := range []*connection{p.pubConn, p.subConn} {
		if _, err := c.get(); err != nil {
			errs = append(errs, fmt.Errorf("%s connection: %w", c.name, err))
		}
	}
	return errors.Join(errs...)
}

// Close ends every subscription (their channels close; deliveries not yet
// acked go back to the queue), waits for publishes in flight, and closes both
// connections, waiting at most a few seconds for the broker's answer, and not
// at all on a connection the broker blocks. It is safe to call more than
// once.
func (p *PubSub) Close() error {
	p.closeOnce.Do(func() {
		p.closeCancel()
		var blockedErr error
		if p.pubConn.flow.Load().blocked {
			// Publishes in flight fail fast on a blocked connection, but
			// one stuck in a call the broker will not answer (a channel
			// opening) would hold Close until its deadline; nothing can be
			// published any more anyway.
			blockedErr = p.pubConn.close()
		}
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()

		p.subscriptions.Wait()
		// Every slot is back: nothing publishes any more. The channels
		// close with their connection (closing each would wait for the
		// broker, which a blocked connection never gets).
		for range p.cfg.ChannelPoolSize {
			<-p.pool
		}
		p.closeErr = errors.Join(p.subConn.close(), blockedErr, p.pubConn.close())
	})
	return p.closeErr
}
