// Package memory is the embedded broker: Watermill's GoChannel, in-process and
// with no service to run. It is the default for `make run` and for tests of
// code above the broker.
//
// Unlike a queue, GoChannel gives every subscriber of a topic every message
// (fan-out), and a message published while nobody subscribes is lost unless
// Persistent is set. eventpipe's router subscribes every route before anything
// publishes, so the default keeps no history and so no unbounded memory.
package memory

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// Config configures the embedded broker.
type Config struct {
	// OutputBuffer is the size of each subscriber's channel. Default 256.
	OutputBuffer int64
	// Persistent keeps every published message so that later subscribers get
	// it too. It grows without bound: for tests, not for long runs.
	Persistent bool
}

func (c *Config) setDefaults() {
	if c.OutputBuffer == 0 {
		c.OutputBuffer = 256
	}
}

// Validate reports every problem with the configuration.
func (c Config) Validate() error {
	if c.OutputBuffer < 0 {
		return errors.New("memory: output buffer must not be negative")
	}
	return nil
}

// PubSub is the embedded broker. It implements broker.PubSub and broker.Pinger.
type PubSub struct {
	*gochannel.GoChannel
	closing   chan struct{}
	closeOnce sync.Once
	relays    sync.WaitGroup
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
	return &PubSub{
		GoChannel: gochannel.NewGoChannel(gochannel.Config{
			OutputChannelBuffer: cfg.OutputBuffer,
			Persistent:          cfg.Persistent,
		}, logger),
		closing: make(chan struct{}),
	}, nil
}

// Publish checks the payload limit, then hands the messages to GoChannel.
func (p *PubSub) Publish(topic string, msgs ...*message.Message) error {
	if err := broker.CheckPayloads(msgs); err != nil {
		return err
	}
	return p.GoChannel.Publish(topic, msgs...)
}

// Subscribe subscribes to topic. Every delivered message carries
// metadata.AttemptKey — how often this subscription was given the message before
// (GoChannel redelivers a nacked message to the same subscriber at once) — and,
// on a redelivery, metadata.FirstFailureKey: when it was first nacked.
func (p *PubSub) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	in, err := p.GoChannel.Subscribe(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	p.relays.Go(func() { countAttempts(ctx, p.closing, in, out) })
	return out, nil
}

// countAttempts relays one subscription's messages, numbering the attempts.
// GoChannel redelivers a nacked message to the same subscriber, but several
// messages may be in flight to it at once (each waits for its ack in its own
// goroutine), so the counts are kept per message id and dropped on ack.
func countAttempts(ctx context.Context, closing <-chan struct{}, in <-chan *message.Message, out chan<- *message.Message) {
	defer close(out)
	type history struct {
		attempts     int
		firstFailure time.Time
	}
	seen := map[string]history{}
	for msg := range in {
		h := seen[msg.UUID]
		msg.Metadata.Set(metadata.AttemptKey, strconv.Itoa(h.attempts))
		delete(msg.Metadata, metadata.FirstFailureKey)
		if !h.firstFailure.IsZero() {
			msg.Metadata.Set(metadata.FirstFailureKey, h.firstFailure.Format(time.RFC3339Nano))
		}
		select {
		case out <- msg:
		case <-ctx.Done():
			// GoChannel stops too; drain so it is never blocked on us.
			for range in {
			}
			return
		case <-closing:
			for range in {
			}
			return
		}
		select {
		case <-msg.Acked():
			delete(seen, msg.UUID)
		case <-msg.Nacked():
			h.attempts++
			if h.firstFailure.IsZero() {
				h.firstFailure = time.Now().UTC()
			}
			seen[msg.UUID] = h
		case <-ctx.Done():
			for range in {
			}
			return
		case <-closing:
			for range in {
			}
			return
		}
	}
}

// Close closes the broker: subscriptions end and their channels close.
func (p *PubSub) Close() error {
	p.closeOnce.Do(func() { close(p.closing) })
	err := p.GoChannel.Close()
	// Closing GoChannel closes what the relays read; once they are done,
	// every subscription's channel is closed.
	p.relays.Wait()
	return err
}

// Ping always succeeds: the broker lives in this process.
func (p *PubSub) Ping(context.Context) error { return nil }
