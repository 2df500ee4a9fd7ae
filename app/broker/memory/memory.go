// Package memory is the embedded broker: in-process, with no service to run.
// It is the default for `make run` and for tests of code above the broker.
//
// It behaves as Watermill's GoChannel, which it replaced (decision 0021),
// did: every subscriber of a topic gets every message (fan-out), and a
// message published while nobody subscribes is lost unless Persistent is
// set. eventpipe's router subscribes every route before anything publishes,
// so the default keeps no history and so no unbounded memory. Publishing
// never waits for a consumer.
//
// Each subscription hands out its messages in publish order, one at a time
// (the next once that one is acked or nacked) unless it was started with
// broker.WithConcurrency: then up to that many at once, bounded by the
// queue's prefetch (Config.Prefetch, Config.QueuePrefetch), and one at a
// time on an ordered queue (Config.OrderedQueues) whatever it asks. A
// nacked message goes behind the ones already queued (as a queue's failed
// message waits out its visibility timeout while the others go on) and comes
// back with its attempt count (metadata.AttemptKey). One goroutine per
// message the subscription may hold unsettled does all of it (decision
// 0043). GoChannel started two goroutines per message and subscriber, and
// counting attempts on top of it took a relay goroutine and a hand-off per
// message more.
package memory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// Config configures the embedded broker.
type Config struct {
	// OutputBuffer is how many messages each subscription has room for
	// before its queue grows. Publishing never blocks. Default 256.
	OutputBuffer int64
	// Persistent keeps every published message so that later subscribers get
	// it too. It grows without bound: for tests, not for long runs.
	Persistent bool
	// Prefetch is the most messages a subscription hands out before the
	// first of them is settled, when it asks for concurrency
	// (broker.WithConcurrency): a route's default concurrency. Default
	// DefaultPrefetch.
	Prefetch int
	// QueuePrefetch overrides Prefetch per topic (a queue's batch size in
	// the topology).
	QueuePrefetch map[string]int
	// OrderedQueues are the FIFO queues (topic → true): their subscriptions
	// hand out one message at a time whatever concurrency they ask for, so
	// they are handled in publish order.
	OrderedQueues map[string]bool
}

// DefaultPrefetch is Config.Prefetch's default.
const DefaultPrefetch = 16

func (c *Config) setDefaults() {
	if c.OutputBuffer == 0 {
		c.OutputBuffer = 256
	}
	if c.Prefetch == 0 {
		c.Prefetch = DefaultPrefetch
	}
}

// Validate reports every problem with the configuration.
func (c Config) Validate() error {
	var errs []error
	if c.OutputBuffer < 0 {
		errs = append(errs, errors.New("memory: output buffer must not be negative"))
	}
	if c.Prefetch < 0 {
		errs = append(errs, errors.New("memory: prefetch must not be negative"))
	}
	for topic, n := range c.QueuePrefetch {
		if n < 1 {
			errs = append(errs, fmt.Errorf("memory: prefetch of %s must be at least 1", topic))
		}
	}
	return errors.Join(errs...)
}

// concurrency is how many messages a subscription to topic started with ctx
// hands out before the first is settled.
func (c Config) concurrency(ctx context.Context, topic string) int {
	if c.OrderedQueues[topic] {
		return 1
	}
	bound := c.Prefetch
	if n := c.QueuePrefetch[topic]; n > 0 {
		bound = n
	}
	return broker.ConcurrencyWithin(ctx, bound)
}

// ErrClosed is returned by Publish and Subscribe after Close.
var ErrClosed = errors.New("memory: pub/sub closed")

// PubSub is the embedded broker. It implements broker.PubSub and broker.Pinger.
type PubSub struct {
	cfg    Config
	logger watermill.LoggerAdapter

	mu     sync.Mutex
	closed bool
	topics map[string]*topic

	closing   chan struct{}
	closeOnce sync.Once
	running   sync.WaitGroup
}

// topic is what the broker knows of one topic: its subscriptions and, when
// Persistent, every message published to it.
type topic struct {
	subs    []*subscription
	history []pending
}

var (
	_ broker.PubSub = (*PubSub)(nil)
	_ broker.Pinger = (*PubSub)(nil)
)

// New returns a ready embedded broker.
func New(cfg Config, logger watermill.LoggerAdapter) (*PubSub, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	return &PubSub{cfg: cfg, logger: logger, topics: map[string]*topic{}, closing: make(chan struct{})}, nil
}

// Publish checks the payload limit, then queues a copy of each message (its
// UUID, metadata and payload; not its context) for every subscription of
// topic.
//
// The copy is a snapshot, not a message: a message's ack channels belong to
// one delivery, which deliver builds; the subscriptions of a topic share the
// snapshot, whose metadata nothing changes. The payload is the caller's, as
// Watermill's Message.Copy shares it.
func (p *PubSub) Publish(topicName string, msgs ...*message.Message) error {
	if err := broker.CheckPayloads(msgs); err != nil {
		return err
	}
	copies := make([]pending, len(msgs))
	for i, msg := range msgs {
		copies[i] = pending{uuid: msg.UUID, payload: msg.Payload, metadata: copyMetadata(msg.Metadata)}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("publish to %s: %w", topicName, ErrClosed)
	}
	t := p.topics[topicName]
	if t == nil {
		if !p.cfg.Persistent {
			for _, msg := range copies {
				p.logger.Info("No subscribers to send message", watermill.LogFields{"message_uuid": msg.uuid, "topic": topicName})
			}
			return nil
		}
		t = &topic{}
		p.topics[topicName] = t
	}
	if p.cfg.Persistent {
		t.history = append(t.history, copies...)
	}
	for _, s := range t.subs {
		s.push(copies)
	}
	return nil
}

// Subscribe subscribes to topic until ctx ends or the broker closes; then the
// channel closes. Every delivered message carries metadata.AttemptKey — how
// often this subscription was given the message before — and, on a
// redelivery, metadata.FirstFailureKey: when it was first nacked. Its context
// is ctx's, cancelled once the delivery is acked or nacked. ctx's
// concurrency (broker.WithConcurrency) is how many messages it hands out
// before the first is settled; without it, one.
func (p *PubSub) Subscribe(ctx context.Context, topicName string) (<-chan *message.Message, error) {
	n := p.cfg.concurrency(ctx, topicName)
	s := &subscription{wake: make(chan struct{}, 1), queue: make([]pending, 0, p.cfg.OutputBuffer)}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, fmt.Errorf("subscribe to %s: %w", topicName, ErrClosed)
	}
	t := p.topics[topicName]
	if t == nil {
		t = &topic{}
		p.topics[topicName] = t
	}
	s.push(t.history)
	t.subs = append(t.subs, s)
	p.running.Add(n)
	p.mu.Unlock()

	// n goroutines hand out the queue, each one message at a time; the last
	// to stop unsubscribes and closes the channel.
	out := make(chan *message.Message)
	var left atomic.Int64
	left.Store(int64(n))
	for range n {
		go func() {
			defer p.running.Done()
			s.run(ctx, p.closing, out)
			if left.Add(-1) == 0 {
				p.unsubscribe(topicName, s)
				close(out)
			}
		}()
	}
	return out, nil
}

func (p *PubSub) unsubscribe(topicName string, s *subscription) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.topics[topicName]
	if t == nil {
		return
	}
	t.subs = slices.DeleteFunc(t.subs, func(x *subscription) bool { return x == s })
	if len(t.subs) == 0 && !p.cfg.Persistent {
		delete(p.topics, topicName)
	}
}

// Close closes the broker: every subscription ends and its channel closes; a
// message handed out and not yet acked is dropped (its context cancelled).
func (p *PubSub) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		close(p.closing)
		p.mu.Unlock()
		p.running.Wait()
		p.mu.Lock()
		p.topics = map[string]*topic{}
		p.mu.Unlock()
	})
	return nil
}

// Ping always succeeds: the broker lives in this process.
func (p *PubSub) Ping(context.Context) error { return nil }

// subscription is one subscriber's queue of messages and the goroutines
// that hand them out (run).
type subscription struct {
	mu sync.Mutex
	// queue[head:] are the queued messages. The slots before head are
	// reused (queued messages moved to the front) before the queue grows,
	// and the queue starts over when it empties, so a subscription that
	// keeps up allocates nothing per message.
	queue []pending
	head  int
	// wake has room for one signal: something was queued. A goroutine that
	// takes a message and leaves more queued passes the signal on.
	wake chan struct{}
}

// pending is a message waiting in one subscription's queue (a value in it:
// no allocation per message and subscription), with what the subscription
// knows of its earlier deliveries. Its metadata is shared with the topic's
// other subscriptions and never written.
type pending struct {
	uuid         string
	payload      message.Payload
	metadata     message.Metadata
	attempts     int
	firstFailure time.Time
}

// copyMetadata copies md, or returns nil for none (nothing to allocate).
func copyMetadata(md message.Metadata) message.Metadata {
	if len(md) == 0 {
		return nil
	}
	c := make(message.Metadata, len(md))
	for k, v := range md {
		c[k] = v
	}
	return c
}

func (s *subscription) push(msgs []pending) {
	if len(msgs) == 0 {
		return
	}
	s.mu.Lock()
	s.makeRoom(len(msgs))
	s.queue = append(s.queue, msgs...)
	s.mu.Unlock()
	s.signal()
}

func (s *subscription) requeue(p pending) {
	s.mu.Lock()
	s.makeRoom(1)
	s.queue = append(s.queue, p)
	s.mu.Unlock()
	s.signal()
}

// makeRoom moves the queued messages to the front when n more would not fit
// behind them: into the free slots, or into a grown queue without the dead
// ones. The caller holds mu.
func (s *subscription) makeRoom(n int) {
	if s.head == 0 || len(s.queue)+n <= cap(s.queue) {
		return
	}
	k := copy(s.queue, s.queue[s.head:])
	clear(s.queue[k:])
	s.queue, s.head = s.queue[:k], 0
}

func (s *subscription) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// pop returns the next queued message; ok is false when there is none. When
// more are queued it signals wake, for another of the subscription's
// goroutines.
func (s *subscription) pop() (p pending, ok bool) {
	s.mu.Lock()
	if s.head == len(s.queue) {
		s.mu.Unlock()
		return pending{}, false
	}
	p = s.queue[s.head]
	s.queue[s.head] = pending{}
	s.head++
	more := s.head < len(s.queue)
	if !more {
		s.queue, s.head = s.queue[:0], 0
	}
	s.mu.Unlock()
	if more {
		s.signal()
	}
	return p, true
}

// run hands out queued messages one at a time, each once the one before is
// settled, until ctx ends or closing closes.
func (s *subscription) run(ctx context.Context, closing <-chan struct{}, out chan<- *message.Message) {
	for {
		p, ok := s.pop()
		if !ok {
			select {
			case <-s.wake:
				continue
			case <-ctx.Done():
				return
			case <-closing:
				return
			}
		}
		acked, ok := deliver(ctx, closing, out, p)
		if !ok {
			return
		}
		if !acked {
			p.attempts++
			if p.firstFailure.IsZero() {
				p.firstFailure = time.Now().UTC()
			}
			s.requeue(p)
		}
	}
}

// deliver hands a copy of p's message to out and waits for its ack (true) or
// nack (false); ok is false when ctx ended or closing closed first.
func deliver(ctx context.Context, closing <-chan struct{}, out chan<- *message.Message, p pending) (acked, ok bool) {
	d := message.NewMessage(p.uuid, p.payload)
	for k, v := range p.metadata {
		if k != metadata.FirstFailureKey {
			d.Metadata[k] = v
		}
	}
	d.Metadata.Set(metadata.AttemptKey, strconv.Itoa(p.attempts))
	if !p.firstFailure.IsZero() {
		d.Metadata.Set(metadata.FirstFailureKey, p.firstFailure.Format(time.RFC3339Nano))
	}
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d.SetContext(dctx)
	select {
	case out <- d:
	case <-ctx.Done():
		return false, false
	case <-closing:
		return false, false
	}
	select {
	case <-d.Acked():
		return true, true
	case <-d.Nacked():
		return false, true
	case <-ctx.Done():
		return false, false
	case <-closing:
		return false, false
	}
}
