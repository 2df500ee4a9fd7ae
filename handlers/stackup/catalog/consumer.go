package catalog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/msgctx"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/handlers/stackup/envelope"
)

// Delivery is one message that decoded and validated, handed to the handler
// of its type and version.
type Delivery struct {
	Msg      *message.Message
	Envelope envelope.Envelope
	Payload  Payload
	Queue    string
}

// Attrs are the log attributes of every line about d: message id, trace id,
// queue, type and version (never the payload).
func (d Delivery) Attrs() []any {
	return []any{
		slog.String("message_id", d.Envelope.MessageID),
		slog.String("trace_id", d.Envelope.TraceID),
		slog.String("queue", d.Queue),
		slog.String("message_type", d.Envelope.MessageType),
		slog.String("version", d.Envelope.Version),
	}
}

// Handler handles one version of one message type.
type Handler func(ctx context.Context, d Delivery) error

// Consumer is one work queue's route: the envelope and payload decoded
// leniently, the routing key and the version checked, then the handler of
// the message's type and version. Every failure before the handler is
// permanent and, with the §6 policy, dead-letters the message at once with
// its reason.
type Consumer struct {
	// Name is the route's name and the inbox's consumer name.
	Name  string
	Queue string
	// Catalog decodes the payloads.
	Catalog Catalog
	// Handlers maps a messageType to its handler per version. v1 and v2 of
	// one type are two entries: both run side by side (§7).
	Handlers map[string]map[string]Handler
	Policy   route.Policy
	// Timeout bounds one attempt of a handler (route.Route.Timeout).
	Timeout time.Duration
	Logger  *slog.Logger
}

// Route returns the consumer's route.
func (c Consumer) Route() route.Route {
	return route.Route{
		Name:     c.Name,
		Queue:    c.Queue,
		Validate: c.Validate,
		Handle:   c.handle,
		Policy:   c.Policy,
		Timeout:  c.Timeout,
		TraceID:  envelope.TraceIDOf,
		MessageID: func(payload []byte) string {
			e, err := envelope.Decode(payload)
			if err != nil {
				return ""
			}
			return e.MessageID
		},
		// The AI worker and Core mark a request under the route's name.
		InboxConsumer: c.Name,
	}
}

// Validate is what `eventpipe publish` checks a body with: strict (no
// unknown fields, no secrets), of a type this queue consumes, in a version
// it has a handler for.
func (c Consumer) Validate(payload []byte) error {
	if err := c.Catalog.ValidateStrict(payload); err != nil {
		return err
	}
	env, err := envelope.Decode(payload)
	if err != nil {
		return err
	}
	_, err = c.handler(env)
	return err
}

func (c Consumer) handler(env envelope.Envelope) (Handler, error) {
	versions, ok := c.Handlers[env.MessageType]
	if !ok {
		return nil, failure.Permanentf("messageType %q is not consumed from queue %s (it takes %v)",
			env.MessageType, c.Queue, slices.Sorted(maps.Keys(c.Handlers)))
	}
	h, ok := versions[env.Version]
	if !ok || h == nil {
		return nil, failure.AsPermanent(&NoVersionError{MessageType: env.MessageType, Version: env.Version})
	}
	return h, nil
}

func (c Consumer) handle(msg *message.Message) error {
	ctx := msg.Context()
	var h Handler
	env, p, err := c.Catalog.Decode(msg.Payload, func(env envelope.Envelope) error {
		if err := env.CheckRoutingKey(msg); err != nil {
			return err
		}
		var err error
		h, err = c.handler(env)
		return err
	})
	if err != nil {
		// Not msgctx.Logger: like Delivery.Attrs, the lines about a StackUp
		// message name it by its envelope's ids whenever it decoded that far.
		c.Logger.WarnContext(ctx, "stackup message rejected",
			slog.String("message_id", firstNonEmpty(env.MessageID, msg.UUID)),
			slog.String("trace_id", firstNonEmpty(env.TraceID, msgctx.TraceID(ctx))),
			slog.String("queue", c.Queue),
			slog.Any("error", err))
		return err
	}
	d := Delivery{Msg: msg, Envelope: env, Payload: p, Queue: c.Queue}
	if secrets := SecretFields(msg.Payload); len(secrets) > 0 {
		// Lenient on consume (eventpipe's rule): the typed decode already
		// dropped them; only their names are logged, so the values go
		// nowhere.
		c.Logger.WarnContext(ctx, "stackup message carried fields §5.2 forbids; ignored",
			append(d.Attrs(), slog.Any("fields", secrets))...)
	}
	return h(ctx, d)
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Retry is the §6 retry: in-process attempts with exponential backoff.
type Retry struct {
	// MaxAttempts counts every attempt (§6: "최대 3회"). Default 3.
	MaxAttempts int
	// Backoff between attempts. Default 200ms doubling up to 5s, ±20 %.
	Backoff route.Backoff
}

// DefaultRetry is §6's: three in-process attempts, exponential backoff.
func DefaultRetry() Retry {
	return Retry{MaxAttempts: 3, Backoff: route.Backoff{Initial: 200 * time.Millisecond, Multiplier: 2, Max: 5 * time.Second, Jitter: 0.2}}
}

// PolicyFor returns the §6 policy of a work queue: r's in-process retries,
// permanent failures (parse failure, wrong messageType, unknown version)
// dead-lettered at once, to the queue's DLQ as the topology names it
// (dlq.<queue>).
func PolicyFor(top topology.Topology, queue string, r Retry) (route.Policy, error) {
	q, ok := top.Queue(queue)
	if !ok {
		return route.Policy{}, fmt.Errorf("stackup: queue %s is not in topology %s", queue, top.Name)
	}
	if q.DeadLetter == nil || q.DeadLetter.Queue == "" {
		return route.Policy{}, fmt.Errorf("stackup: queue %s has no dead-letter queue in topology %s", queue, top.Name)
	}
	d := DefaultRetry()
	if r.MaxAttempts == 0 {
		r.MaxAttempts = d.MaxAttempts
	}
	if r.Backoff == (route.Backoff{}) {
		r.Backoff = d.Backoff
	}
	p := route.Policy{
		MaxAttempts:     r.MaxAttempts,
		Redelivery:      route.InProcess,
		Backoff:         r.Backoff,
		OnPermanent:     route.DeadLetter,
		DeadLetterQueue: q.DeadLetter.Queue,
	}
	// The queue's own policy block (topology.Queue.Policy) wins, as it does
	// for every route (route.Policy.ForQueue); applying it here too keeps
	// the AI worker's attempt count in step with the policy that runs.
	p, err := p.ForQueue(q)
	if err != nil {
		return route.Policy{}, fmt.Errorf("stackup: queue %s: %w", queue, err)
	}
	return p, nil
}

// ErrNotConfigured is wrapped by the error of a consumer that cannot start
// because a dependency (a processor, a store) is missing.
var ErrNotConfigured = errors.New("not configured")

// Version is a further version of a callback or notification type that Core
// or RealTime consume beside v1 (§7 step 2: "Consumer는 v1, v2 모두
// 핸들링"). The AI worker's request versions carry their own work
// (aiworker.VersionHandler); a callback's or notification's effect stays the
// v1 one: AsV1 maps the new shape to the v1 payload, which is validated and
// applied as if it had come as v1. When the v1 handler is removed (§7 step
// 4), the version's own handler takes its place.
type Version struct {
	Schema Schema
	// AsV1 returns the v1 payload of a payload of Schema. An error is a
	// payload that cannot be applied: permanent, dead-lettered at once.
	AsV1 func(Payload) (Payload, error)
}

// WithVersions returns c with the schema of every version added (With), for
// the consumer of those types to decode them.
func (c Catalog) WithVersions(versions map[string][]Version) (Catalog, error) {
	var errs []error
	for _, typ := range slices.Sorted(maps.Keys(versions)) {
		for _, v := range versions[typ] {
			if v.AsV1 == nil {
				errs = append(errs, fmt.Errorf("catalog: %s %s: AsV1 is required", typ, v.Schema.Version))
				continue
			}
			next, err := c.With(typ, v.Schema)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			c = next
		}
	}
	return c, errors.Join(errs...)
}

// Handler returns the handler of v's version: the payload mapped to v1 and
// validated as v1 (its schema, then its Go rules), then v1.
func (v Version) Handler(messageType string, v1 Handler) Handler {
	return func(ctx context.Context, d Delivery) error {
		p, err := v.AsV1(d.Payload)
		if err == nil && p == nil {
			err = errors.New("no v1 payload")
		}
		if err == nil {
			err = checkV1(d.Envelope, p)
		}
		if err != nil {
			return failure.AsPermanent(&PayloadError{MessageType: messageType, Version: v.Schema.Version, Err: fmt.Errorf("as v1: %w", err)})
		}
		d.Payload = p
		return v1(ctx, d)
	}
}

// AddVersions registers, in handlers (messageType → version → handler), the
// handler of every version of the types that have a v1 handler there;
// versions of other types are left to the consumers that take them. A
// version handled already is an error.
func AddVersions(handlers map[string]map[string]Handler, versions map[string][]Version) error {
	var errs []error
	for typ, vs := range versions {
		byVersion, ok := handlers[typ]
		if !ok || byVersion[V1] == nil {
			continue // another consumer's type
		}
		for _, v := range vs {
			if _, dup := byVersion[v.Schema.Version]; dup {
				errs = append(errs, fmt.Errorf("catalog: %s %s is handled twice", typ, v.Schema.Version))
				continue
			}
			byVersion[v.Schema.Version] = v.Handler(typ, byVersion[V1])
		}
	}
	return errors.Join(errs...)
}
