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

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/eventpipe/eventpipe/app/broker"
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
	return &PubSub{GoChannel: gochannel.NewGoChannel(gochannel.Config{
		OutputChannelBuffer: cfg.OutputBuffer,
		Persistent:          cfg.Persistent,
	}, logger)}, nil
}

// Publish checks the payload limit, then hands the messages to GoChannel.
func (p *PubSub) Publish(topic string, msgs ...*message.Message) error {
	if err := broker.CheckPayloads(msgs); err != nil {
		return err
	}
	return p.GoChannel.Publish(topic, msgs...)
}

// Ping always succeeds: the broker lives in this process.
func (p *PubSub) Ping(context.Context) error { return nil }
