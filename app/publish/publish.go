// Package publish is eventpipe's publish path as a library: another Go
// service imports it to send a spec's message exactly as `eventpipe publish`
// does (the command is built on it):
//
//   - the body is checked before anything is sent, first against the strict
//     JSON Schema of every queue the topic reaches (app/schemas: unknown
//     fields refused, the error names the field's path), then by the Go
//     validator of the route that consumes the queue (the rules a schema
//     cannot state, docs/decisions/0030);
//   - the message id is the one the body carries (the StackUp envelope's
//     messageId, the disputes envelope's event_id), else a new UUID, so the
//     transport's id and the body's agree (consumers deduplicate on it);
//   - the trace id (metadata x-trace-id) is the body's (traceId, trace_id),
//     else the one the context carries (msgctx.TraceID inside a handler, else
//     the OpenTelemetry span's), else a new W3C trace id; the message carries
//     the context, so a tracing publisher (middleware.TracingPublisher, see
//     Options.TracerProvider) parents its producer span on the caller's span
//     and puts a traceparent on the message;
//   - a topic is a queue, or "<exchange>/<routing-key>" routed by the
//     enabled specs' topology (natively on RabbitMQ);
//   - Contract.Write puts the message in an outbox.Writer instead (publish
//     after commit: the row commits with the caller's business change).
//
// A Contract (Load) does the checking and needs no broker; a Publisher (Open,
// New) sends. Stable API: Load, Contract.Message and Contract.Write, Open,
// New, Publisher.Publish, Publisher.Send, Publisher.Close, the options
// (WithID, WithMetadata, Raw, Options), ErrMemoryBroker and the error types
// *RefusedError and *UnknownTopicError (docs/decisions/0034).
package publish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/trace"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/msgctx"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/schemas"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/config"
	"github.com/eventpipe/eventpipe/middleware"
)

// Contract is what the enabled specs of one configuration accept: their
// topology, the routes that consume their queues and the messages' JSON
// Schemas. It checks and prepares messages; it sends nothing. It is safe for
// concurrent use.
type Contract struct {
	top     topology.Topology
	routes  route.Set
	schemas schemas.Catalog
}

// Load returns the contract of the specs cfg enables (the same
// configuration `eventpipe serve` and `eventpipe publish` read: config.Load,
// or config.Defaults with the spec sections set). It does no I/O.
func Load(cfg config.Config) (*Contract, error) {
	top, err := app.SpecTopology(cfg)
	if err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	cat, err := schemas.Load()
	if err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	return &Contract{top: top, routes: app.Catalog(), schemas: cat}, nil
}

// Topology is the enabled specs' topology the contract routes topics by.
func (c *Contract) Topology() topology.Topology { return c.top }

// An Option adjusts one message.
type Option func(*options)

type options struct {
	id       string
	metadata [][2]string
	raw      bool
}

// WithID sets the message id instead of the body's or a new UUID.
func WithID(id string) Option { return func(o *options) { o.id = id } }

// WithMetadata sets a metadata entry (an AMQP header, an SQS message
// attribute); metadata.TraceIDKey ("x-trace-id") sets the trace id.
func WithMetadata(key, value string) Option {
	return func(o *options) { o.metadata = append(o.metadata, [2]string{key, value}) }
}

// Raw skips every check (schemas and routes), for a queue eventpipe does not
// consume; the ids are then WithID's or new.
func Raw() Option { return func(o *options) { o.raw = true } }

// RefusedError is a body a schema or a route of the topic refuses; nothing
// was sent or written.
type RefusedError struct {
	Topic string
	// Queue is the queue whose check refused it.
	Queue string
	// Route names the consuming route.
	Route string
	// Err is the objection: a *schemas.ValidationError (each message type's
	// schema errors, with the JSON path of the field) or the route's own.
	Err error
}

// Error implements error.
func (e *RefusedError) Error() string {
	return fmt.Sprintf("body refused by route %s, nothing sent: %v", e.Route, e.Err)
}

// Unwrap returns the objection.
func (e *RefusedError) Unwrap() error { return e.Err }

// UnknownTopicError is a topic that reaches no queue an enabled spec's route
// consumes (Raw publishes it anyway); nothing was sent or written.
type UnknownTopicError struct {
	Topic string
	// Unbound is an "<exchange>/<routing-key>" topic whose key no binding
	// of the enabled specs matches (Raw would not help: the broker routes
	// it nowhere either).
	Unbound bool
	Err     error
}

// Error implements error.
func (e *UnknownTopicError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *UnknownTopicError) Unwrap() error { return e.Err }

// Message checks body for topic and returns the message to send, with its
// id and trace id set and ctx as its context. Nothing is sent. A body refused
// is a *RefusedError, a topic no route consumes an *UnknownTopicError.
func (c *Contract) Message(ctx context.Context, topic string, body []byte, opts ...Option) (*message.Message, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	msg := message.NewMessage("", body)
	for _, kv := range o.metadata {
		msg.Metadata.Set(kv[0], kv[1])
	}
	var consumer route.Route
	if !o.raw {
		var err error
		if consumer, err = c.check(topic, body); err != nil {
			return nil, err
		}
	}
	// The ids the body carries, unless given: the transport's must agree
	// with them (consumers deduplicate and trace on them).
	id := o.id
	if id == "" && consumer.MessageID != nil {
		id = consumer.MessageID(body)
	}
	if id == "" {
		id = watermill.NewUUID()
	}
	msg.UUID = id
	if msg.Metadata.Get(metadata.TraceIDKey) == "" {
		msg.Metadata.Set(metadata.TraceIDKey, traceID(ctx, consumer, body))
	}
	msg.SetContext(ctx)
	return msg, nil
}

// traceID is the body's trace id, else the context's, else a new one.
func traceID(ctx context.Context, consumer route.Route, body []byte) string {
	if consumer.TraceID != nil {
		if id := consumer.TraceID(message.NewMessage("", body)); id != "" {
			return id
		}
	}
	if id := msgctx.TraceID(ctx); id != "" {
		return id
	}
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	return msgctx.NewTraceID()
}

// check validates body the way the consumers of topic will: the queue, or
// every queue an "<exchange>/<routing-key>" topic reaches by the topology's
// bindings, strict schema first, then the route. It returns the first
// queue's route (the source of the body's ids).
func (c *Contract) check(topic string, body []byte) (route.Route, error) {
	queues := c.top.TopicQueues(topic)
	if len(queues) == 0 {
		exchange, key, _ := strings.Cut(topic, "/")
		return route.Route{}, &UnknownTopicError{Topic: topic, Unbound: true, Err: fmt.Errorf(
			"no queue of the enabled specs is bound to exchange %q for routing key %q (is the spec enabled?); nothing sent", exchange, key)}
	}
	var first route.Route
	for i, q := range queues {
		r, err := c.routes.ByQueue(q)
		if err != nil {
			return route.Route{}, &UnknownTopicError{Topic: topic, Err: err}
		}
		if err := c.schemas.ValidateQueue(q, body, schemas.Strict); err != nil {
			var none *schemas.NoSchemaError
			if !errors.As(err, &none) {
				return route.Route{}, &RefusedError{Topic: topic, Queue: q, Route: r.Name, Err: err}
			}
		}
		if err := r.Validate(body); err != nil {
			return route.Route{}, &RefusedError{Topic: topic, Queue: q, Route: r.Name, Err: err}
		}
		if i == 0 {
			first = r
		}
	}
	return first, nil
}

// Write checks and prepares the message like Message and writes it to w
// for topic: it goes out once the business change of ctx commits
// (outbox.TxWriter inside dbtx.InTx; outbox.AfterCommit inside outbox.Unit).
func (c *Contract) Write(ctx context.Context, w outbox.Writer, topic string, body []byte, opts ...Option) (*message.Message, error) {
	msg, err := c.Message(ctx, topic, body, opts...)
	if err != nil {
		return nil, err
	}
	if err := w.Write(ctx, topic, msg); err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	return msg, nil
}

// Options are a Publisher's.
type Options struct {
	// Logger receives the broker adapter's lines; none when nil.
	Logger *slog.Logger
	// TracerProvider, when set, gives every message a producer span and a
	// traceparent (middleware.TracingPublisher), as serve's publisher does.
	TracerProvider trace.TracerProvider
	// ConnectTimeout bounds how long Open waits for an unreachable broker
	// when the configuration's serve.connect_timeout is 0 (serve's
	// "forever"). DefaultConnectTimeout when 0.
	ConnectTimeout time.Duration
}

// DefaultConnectTimeout is Options.ConnectTimeout's default.
const DefaultConnectTimeout = 15 * time.Second

// ErrMemoryBroker is Open's refusal of broker.kind memory: that broker lives
// inside the process that creates it, so a message sent to one of its own
// would reach no consumer. Share the memory broker with its consumers
// through New instead.
var ErrMemoryBroker = errors.New("publish: broker.kind is memory: an in-process broker of its own reaches no consumer; use New with the broker the consumers share")

// Publisher sends checked messages to a broker. It is safe for concurrent
// use.
type Publisher struct {
	*Contract
	pub   message.Publisher
	close func() error
}

// Open connects to the broker cfg names for the specs cfg enables. Close
// releases the connection.
func Open(ctx context.Context, cfg config.Config, o Options) (*Publisher, error) {
	if cfg.Broker.Kind == config.KindMemory {
		return nil, ErrMemoryBroker
	}
	c, err := Load(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Serve.ConnectTimeout == 0 {
		cfg.Serve.ConnectTimeout = o.ConnectTimeout
		if cfg.Serve.ConnectTimeout <= 0 {
			cfg.Serve.ConnectTimeout = DefaultConnectTimeout
		}
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ps, err := app.NewBroker(ctx, cfg, logger)
	if err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	p, err := newPublisher(cfg, c, ps, o)
	if err != nil {
		_ = ps.Close()
		return nil, err
	}
	p.close = ps.Close
	return p, nil
}

// New returns a Publisher that checks with c and sends through pub, a
// publisher of cfg's broker kind that takes queue names (a broker.PubSub:
// the memory broker the consumers share, in tests or an embedded service).
// Close leaves pub open.
func New(cfg config.Config, c *Contract, pub message.Publisher, o Options) (*Publisher, error) {
	return newPublisher(cfg, c, pub, o)
}

func newPublisher(cfg config.Config, c *Contract, pub message.Publisher, o Options) (*Publisher, error) {
	routed, err := app.NewPublisher(cfg, pub, c.top)
	if err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	return &Publisher{Contract: c, pub: middleware.TracingPublisher(routed, o.TracerProvider, middleware.MessagingSystem(cfg.Broker.Kind)), close: func() error { return nil }}, nil
}

// Publish checks body for topic (Contract.Message) and sends it; it returns
// the message sent (its UUID and x-trace-id). Nothing is sent when the check
// fails.
func (p *Publisher) Publish(ctx context.Context, topic string, body []byte, opts ...Option) (*message.Message, error) {
	msg, err := p.Message(ctx, topic, body, opts...)
	if err != nil {
		return nil, err
	}
	if err := p.Send(topic, msg); err != nil {
		return nil, err
	}
	return msg, nil
}

// Send sends a message Contract.Message prepared for topic.
func (p *Publisher) Send(topic string, msg *message.Message) error {
	if err := p.pub.Publish(topic, msg); err != nil {
		return fmt.Errorf("publish to %s: %w", topic, err)
	}
	return nil
}

// Close closes the broker connection Open made.
func (p *Publisher) Close() error { return p.close() }
