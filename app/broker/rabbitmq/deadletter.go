package rabbitmq

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventpipe/eventpipe/app/metadata"
)

// Dead letters on RabbitMQ (decision 0025).
//
// The guarantees middleware dead-letters a message by publishing a copy with
// its history (metadata.DeadLetterKey) to the route's dead-letter queue, and
// acks the original only once the copy is confirmed. On RabbitMQ that copy is
// made to look like what a peer of the StackUp contract expects in a DLQ —
// what RabbitMQ's own dead-lettering and Spring AMQP's
// RepublishMessageRecoverer produce:
//
//   - It goes to the source queue's declared dead-letter exchange with its
//     declared dead-letter routing key (x-dead-letter-exchange,
//     x-dead-letter-routing-key: stackup.dlx with dlq.<queue>), as a broker
//     reject would, not through the default exchange; so every queue a
//     peer bound to that exchange and key gets it too. A queue with no
//     dead-lettering declared (DeadLetterRouter), or a copy addressed to
//     another queue than the declared one, is published to its topic as
//     any message is.
//   - Every header of the delivery keeps its AMQP type (an integer stays an
//     integer, x-death stays a table), where the copy's metadata still holds
//     the delivery's value; a header the middleware changed or added is a
//     string, as on any publish. x-attempt is 0: the dead letter is a new
//     message on a new queue (eventpipe's own redrive also starts at 0).
//   - It carries Spring's names x-exception-message (the reason),
//     x-original-exchange and x-original-routingKey (where the message
//     first came through: a counted copy's original's, the delivery's own
//     otherwise) beside eventpipe's record in x-dead-letter (JSON), which
//     `eventpipe dlq` reads.
//   - The delivery's AMQP properties (message_id, correlation_id,
//     content_type, content_encoding, type, app_id, timestamp, reply_to,
//     priority) are kept; expiration is not (RabbitMQ drops it when it
//     dead-letters, so that a dead letter never expires on its way), nor is
//     user_id (RabbitMQ refuses a user_id other than the publishing
//     connection's).

// The header names of Spring AMQP's RepublishMessageRecoverer, which a
// dead letter of eventpipe's carries on RabbitMQ.
const (
	// HeaderExceptionMessage is why the message was dead-lettered.
	HeaderExceptionMessage = "x-exception-message"
	// HeaderOriginalExchange is the exchange the message came through
	// ("" for the default exchange).
	HeaderOriginalExchange = "x-original-exchange"
	// HeaderOriginalRoutingKey is the routing key it came with.
	HeaderOriginalRoutingKey = "x-original-routingKey"
)

// DeadLetterRouter is implemented by a Topology that knows how queues
// dead-letter: a dead letter of eventpipe's is then published the way the
// broker would dead-letter it.
type DeadLetterRouter interface {
	// DeadLetterRoute returns the dead-letter queue, exchange and routing
	// key declared for queue; ok is false when it declares none.
	DeadLetterRoute(queue string) (dlq, exchange, routingKey string, ok bool)
}

// deliveryKey is the context key of the delivery a message was made from.
type deliveryKey struct{}

// deliveryFacts is what a dead letter needs of the delivery it copies.
type deliveryFacts struct {
	queue string
	d     *amqp.Delivery
}

// withDelivery returns ctx carrying delivery d from queue: a handler's
// message context, so that a dead letter made from it (its context derives
// from the handler's) can keep the delivery's typed headers and properties.
func withDelivery(ctx context.Context, d *amqp.Delivery, queue string) context.Context {
	return &deliveryCtx{Context: ctx, facts: deliveryFacts{queue: queue, d: d}}
}

func deliveryOf(ctx context.Context) (deliveryFacts, bool) {
	if ctx == nil {
		return deliveryFacts{}, false
	}
	if c, ok := ctx.Value(deliveryKey{}).(*deliveryCtx); ok {
		return c.facts, true
	}
	return deliveryFacts{}, false
}

// deliveryCtx carries a delivery's facts in one allocation per message:
// context.WithValue would box the (large) amqp.Delivery in a second one.
// Everything but deliveryKey is the embedded context's, so contexts derived
// from it hang on the consumer's cancelable context directly.
type deliveryCtx struct {
	context.Context
	facts deliveryFacts
}

func (c *deliveryCtx) Value(key any) any {
	if _, ok := key.(deliveryKey); ok {
		return c
	}
	return c.Context.Value(key)
}

func (c *deliveryCtx) String() string {
	name := "context"
	if s, ok := c.Context.(interface{ String() string }); ok {
		name = s.String()
	}
	return name + ".WithDelivery(" + c.facts.queue + ")"
}

// isDeadLetter reports whether msgs hold a dead letter of eventpipe's.
func isDeadLetter(msgs []*message.Message) bool {
	for _, m := range msgs {
		if m.Metadata.Get(metadata.DeadLetterKey) != "" {
			return true
		}
	}
	return false
}

// deadLetterPublishing marshals msg, published to topic, and returns where it
// goes: for a dead letter of eventpipe's (metadata.DeadLetterOf) made for the
// queue its source declares, that queue's dead-letter exchange and routing
// key, with the delivery's typed headers and properties and Spring's headers
// (see above); anything else goes where the topology routes topic.
func (p *PubSub) deadLetterPublishing(topic string, msg *message.Message) (exchange, key string, pub amqp.Publishing, err error) {
	pub, err = p.marshaler.Marshal(msg)
	if err != nil {
		return "", "", amqp.Publishing{}, err
	}
	exchange, key = p.topology.Route(topic)
	record, ok, err := metadata.DeadLetterOf(msg)
	if err != nil || !ok {
		// Not a record of ours: moved as it is.
		return exchange, key, pub, nil
	}
	if r, ok := p.topology.(DeadLetterRouter); ok {
		if dlq, x, k, ok := r.DeadLetterRoute(record.SourceQueue); ok && dlq == topic {
			exchange, key = x, k
		}
	}
	origExchange, origKey := msg.Metadata.Get(metadata.ExchangeKey), msg.Metadata.Get(metadata.RoutingKeyKey)
	facts, known := deliveryOf(msg.Context())
	known = known && facts.queue == record.SourceQueue
	if known {
		d := facts.d
		retype(pub.Headers, d.Headers)
		if origKey == "" {
			// Through the default exchange: its routing key is the queue.
			origExchange, origKey = d.Exchange, d.RoutingKey
		}
		pub.Type, pub.AppId, pub.Timestamp, pub.ReplyTo, pub.Priority = d.Type, d.AppId, d.Timestamp, d.ReplyTo, d.Priority
	} else if origKey == "" {
		origExchange, origKey = "", record.SourceQueue
	}
	pub.Headers[HeaderExceptionMessage] = record.Reason
	pub.Headers[HeaderOriginalExchange] = origExchange
	pub.Headers[HeaderOriginalRoutingKey] = origKey
	return exchange, key, pub, nil
}

// retype gives each string header of headers whose value is still the one
// original holds (as HeaderString renders it) its original AMQP value back.
func retype(headers, original amqp.Table) {
	for k, v := range headers {
		s, isString := v.(string)
		if o, ok := original[k]; ok && isString && HeaderString(o) == s {
			headers[k] = o
		}
	}
}
