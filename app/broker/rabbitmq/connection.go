package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/cenkalti/backoff/v5"
	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrNotConnected is returned while the broker is reconnecting. It is
// transient: the same call succeeds once the connection is back.
var ErrNotConnected = errors.New("rabbitmq: not connected (reconnecting)")

// ErrClosed is returned by calls on a closed PubSub.
var ErrClosed = errors.New("rabbitmq: closed")

// connection keeps one AMQP connection open: it dials until the broker
// answers, and dials again, with backoff, whenever the connection drops.
//
// It replaces watermill-amqp's ConnectionWrapper, which swaps its
// "connected" channel without a lock while publishers and subscribers read
// it (a data race on every reconnect, watermill issue #693).
type connection struct {
	name     string // "publish" or "consume"
	url      string
	redacted string
	config   amqp.Config
	cfg      Config
	logger   watermill.LoggerAdapter
	// reconnected runs after every redial, before the new connection is
	// handed out: what was declared on the broker may be gone.
	reconnected func()

	// ctx ends when the connection is closed for good; it stops redialing.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	conn *amqp.Connection // nil while reconnecting
	up   chan struct{}    // closed while conn is usable; replaced when it drops
}

// openConnection dials until it connects or ctx ends, then keeps the
// connection open until close. reconnected (may be nil) runs after every
// redial, before the new connection is used.
func openConnection(ctx context.Context, name string, cfg Config, logger watermill.LoggerAdapter, reconnected func()) (*connection, error) {
	c := &connection{
		reconnected: reconnected,
		name:        name,
		url:         cfg.URL,
		redacted:    redactURL(cfg.URL),
		config: amqp.Config{
			Properties: amqp.Table{"connection_name": cfg.ConnectionName + " " + name},
		},
		cfg:    cfg,
		logger: logger.With(watermill.LogFields{"amqp_connection": name}),
		up:     make(chan struct{}),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())

	conn, err := c.dialUntil(ctx)
	if err != nil {
		c.cancel()
		return nil, err
	}
	c.set(conn)
	c.wg.Add(1)
	go c.watch(conn)
	return c, nil
}

// dialUntil dials until it succeeds or ctx (or the connection) ends, logging
// every failed attempt.
func (c *connection) dialUntil(ctx context.Context) (*amqp.Connection, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel)
	defer stop()

	b := &backoff.ExponentialBackOff{
		InitialInterval:     c.cfg.ReconnectInitialInterval,
		RandomizationFactor: 0.5,
		Multiplier:          1.5,
		MaxInterval:         c.cfg.ReconnectMaxInterval,
	}
	b.Reset()
	for attempt := 1; ; attempt++ {
		conn, err := c.dialOnce(ctx)
		if err == nil {
			if attempt > 1 {
				c.logger.Info("Connected to RabbitMQ", watermill.LogFields{"url": c.redacted, "attempts": attempt})
			}
			return conn, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("rabbitmq: connect to %s: gave up after %d attempts: %w", c.redacted, attempt, errors.Join(ctx.Err(), err))
		}
		wait := b.NextBackOff()
		c.logger.Error("RabbitMQ unreachable, retrying", err, watermill.LogFields{
			"url": c.redacted, "attempt": attempt, "retry_in": wait.String(),
		})
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("rabbitmq: connect to %s: gave up after %d attempts: %w", c.redacted, attempt, errors.Join(ctx.Err(), err))
		case <-t.C:
		}
	}
}

// dialOnce makes one attempt. It returns as soon as ctx ends, even while the
// dial hangs on a host that accepts TCP but never speaks AMQP; the abandoned
// dial, bounded by amqp091's handshake timeout, closes what it opened.
func (c *connection) dialOnce(ctx context.Context) (*amqp.Connection, error) {
	type result struct {
		conn *amqp.Connection
		err  error
	}
	done := make(chan result, 1)
	go func() {
		conn, err := amqp.DialConfig(c.url, c.config)
		done <- result{conn, err}
	}()
	select {
	case r := <-done:
		return r.conn, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; r.conn != nil {
				_ = r.conn.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// watch redials whenever the connection drops, until close.
func (c *connection) watch(conn *amqp.Connection) {
	defer c.wg.Done()
	for {
		closed := conn.NotifyClose(make(chan *amqp.Error, 1))
		select {
		case <-c.ctx.Done():
			return
		case amqpErr := <-closed:
			if c.ctx.Err() != nil {
				return
			}
			c.mu.Lock()
			c.conn = nil
			c.up = make(chan struct{})
			c.mu.Unlock()

			err := ErrNotConnected
			if amqpErr != nil {
				err = amqpErr
			}
			c.logger.Error("RabbitMQ connection lost, reconnecting", err, watermill.LogFields{"url": c.redacted})
			next, dialErr := c.dialUntil(c.ctx)
			if dialErr != nil {
				return // closing
			}
			if c.reconnected != nil {
				c.reconnected()
			}
			c.set(next)
			conn = next
		}
	}
}

func (c *connection) set(conn *amqp.Connection) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conn = conn
	close(c.up)
}

// get returns the open connection, or ErrNotConnected at once while it is
// being re-established.
func (c *connection) get() (*amqp.Connection, error) {
	if c.ctx.Err() != nil {
		return nil, ErrClosed
	}
	c.mu.Lock()
	conn := c.conn
	c.mu.Unlock()
	if conn == nil || conn.IsClosed() {
		return nil, ErrNotConnected
	}
	return conn, nil
}

// channel opens a channel on the open connection.
func (c *connection) channel() (*amqp.Channel, error) {
	conn, err := c.get()
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	return ch, nil
}

// waitUp blocks until the connection is up, ctx ends or it is closed.
func (c *connection) waitUp(ctx context.Context) error {
	c.mu.Lock()
	up := c.up
	c.mu.Unlock()
	select {
	case <-up:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.ctx.Done():
		return ErrClosed
	}
}

// close stops redialing and closes the connection.
func (c *connection) close() error {
	c.cancel()
	c.wg.Wait()
	c.mu.Lock()
	conn := c.conn
	c.conn = nil
	c.mu.Unlock()
	if conn == nil || conn.IsClosed() {
		return nil
	}
	if err := conn.Close(); err != nil && !errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("rabbitmq: close %s connection: %w", c.name, err)
	}
	return nil
}

// redactURL hides the password in log lines and errors.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
