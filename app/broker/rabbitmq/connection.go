package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
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

// ErrBlocked is returned by Publish while RabbitMQ blocks the publishing
// connection (connection.blocked: a memory or disk alarm). A blocked broker
// stops reading from the connection, so a publish would wait for a confirm
// that cannot come; it fails at once instead, with the broker's reason. It is
// transient: publishing works again once the alarm clears.
var ErrBlocked = errors.New("rabbitmq: the broker blocks the connection")

// closeTimeout bounds the close handshake with the broker. A blocked
// connection is not read by the broker, so it is closed without one.
const closeTimeout = 5 * time.Second

// flowState is whether the broker blocks a connection, and why. A state is
// never changed, only replaced, and changed is closed when it is.
type flowState struct {
	blocked bool
	reason  string
	changed chan struct{}
}

func (f *flowState) err() error {
	if !f.blocked {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrBlocked, f.reason)
}

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

	// flow is the current connection's flow state (connection.blocked);
	// publishes read it without a lock.
	flow atomic.Pointer[flowState]
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
	c.flow.Store(&flowState{changed: make(chan struct{})})
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

// watch follows the broker's flow control and redials whenever the
// connection drops, until close.
func (c *connection) watch(conn *amqp.Connection) {
	defer c.wg.Done()
	for {
		amqpErr, closing := c.follow(conn)
		if closing {
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

// follow records conn's connection.blocked and unblocked notifications until
// it closes (with the broker's error, if any) or c is closed (closing).
func (c *connection) follow(conn *amqp.Connection) (amqpErr *amqp.Error, closing bool) {
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	// amqp091 gives up on a listener that has not taken a notification
	// within 5 s; this loop takes them at once.
	blocks := conn.NotifyBlocked(make(chan amqp.Blocking, 1))
	for {
		select {
		case <-c.ctx.Done():
			return nil, true
		case b, ok := <-blocks:
			if !ok {
				blocks = nil
				continue
			}
			c.setFlow(b.Active, b.Reason)
		case amqpErr = <-closed:
			return amqpErr, c.ctx.Err() != nil
		}
	}
}

// setFlow records whether the broker blocks the connection, and logs the
// change.
func (c *connection) setFlow(blocked bool, reason string) {
	next := &flowState{blocked: blocked, reason: reason, changed: make(chan struct{})}
	prev := c.flow.Swap(next)
	close(prev.changed)
	switch {
	case blocked:
		c.logger.Error("RabbitMQ blocks the connection, publishes fail until it unblocks", fmt.Errorf("%w: %s", ErrBlocked, reason), nil)
	case prev.blocked:
		c.logger.Info("RabbitMQ unblocked the connection", nil)
	}
}

// abortIfBlocked drops the connection if the broker blocks it: a call stuck
// on it (a channel opening, a declaration, a socket write the broker no
// longer reads) returns, and the connection is redialed. A publish calls it
// when its deadline passes before it is done.
func (c *connection) abortIfBlocked() {
	flow := c.flow.Load()
	if !flow.blocked {
		return
	}
	conn, err := c.get()
	if err != nil {
		return
	}
	c.logger.Error("A call outlived its deadline on a blocked connection, dropping the connection", flow.err(), nil)
	// A deadline in the past fails every read and write on the socket at
	// once, and amqp091 shuts the connection down.
	_ = conn.CloseDeadline(time.Now())
}

func (c *connection) set(conn *amqp.Connection) {
	// A new connection starts unblocked.
	if c.flow.Load().blocked {
		c.setFlow(false, "")
	}
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

// close stops redialing and closes the connection, waiting at most
// closeTimeout for the broker's answer, and not at all when the broker
// blocks the connection (it would never read the request).
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
	deadline := time.Now().Add(closeTimeout)
	if c.flow.Load().blocked {
		deadline = time.Now()
	}
	if err := conn.CloseDeadline(deadline); err != nil && !errors.Is(err, amqp.ErrClosed) {
		if c.flow.Load().blocked {
			return nil // as expected: nobody read the close request
		}
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
