package realtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/failure"
	stackuprt "github.com/eventpipe/eventpipe/handlers/stackup/realtime"
)

// Bus carries events from the instance that consumed a notification to
// every instance, itself included (decision 0012). Subscribe must be in
// place when it returns: an event published after that reaches it.
type Bus interface {
	Publish(ctx context.Context, e Event) error
	Subscribe(ctx context.Context) (<-chan Event, error)
}

// MaxEventTypeLen bounds payload.eventType (an SseEventType name).
const MaxEventTypeLen = 128

// RejectError is a notification the relay refuses; it is permanent, so the
// route dead-letters the message with this reason.
type RejectError struct {
	// Reason is the metric label: unknown_channel, bad_channel_id, bad_id,
	// bad_event_type, bad_data or oversized_data.
	Reason string
	Detail string
}

func (e *RejectError) Error() string { return "realtime: " + e.Reason + ": " + e.Detail }

// relay is the Sink of handlers/stackup/realtime's route: it checks an event
// and hands it to the bus, or straight to the hub without one.
type relay struct {
	bus     Bus
	hub     *Hub
	maxData int
	m       *metrics
	logger  *slog.Logger
}

var _ stackuprt.Sink = (*relay)(nil)

// Deliver implements stackuprt.Sink. A rejected event is a permanent error
// (the route dead-letters it); a failed fan-out of a volatile event is a
// warning and nil (§5.12-1: 발행 실패는 무시, 경고만); of any other event, an
// error the route retries and finally dead-letters.
func (r *relay) Deliver(ctx context.Context, in stackuprt.Event) error {
	e, err := r.check(in)
	attrs := []any{slog.String("message_id", in.MessageID), slog.String("trace_id", in.TraceID),
		slog.String("queue", stackuprt.Queue), slog.String("channel", in.Channel), slog.String("event_type", in.EventType)}
	if err != nil {
		var rej *RejectError
		if errors.As(err, &rej) {
			r.m.rejected.WithLabelValues(rej.Reason).Inc()
		}
		r.logger.WarnContext(ctx, "realtime notification rejected", append(attrs, slog.Any("error", err))...)
		return failure.AsPermanent(err)
	}
	if r.bus == nil {
		r.hub.Deliver(e)
		return nil
	}
	if err := r.bus.Publish(ctx, e); err != nil {
		if e.Volatile {
			r.m.fanoutFail.WithLabelValues("true").Inc()
			r.logger.WarnContext(ctx, "realtime volatile event not fanned out; dropped", append(attrs, slog.Any("error", err))...)
			return nil
		}
		r.m.fanoutFail.WithLabelValues("false").Inc()
		return fmt.Errorf("realtime: fan out %s %s: %w", in.Channel, in.EventType, err)
	}
	return nil
}

func (r *relay) check(in stackuprt.Event) (Event, error) {
	reject := func(reason, format string, args ...any) (Event, error) {
		return Event{}, &RejectError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
	}
	kind := Kind(in.Channel)
	if !kind.Valid() {
		return reject("unknown_channel", "channel %q is not session, user or document", in.Channel)
	}
	if in.ID <= 0 {
		return reject("bad_channel_id", "%s id %d is not positive", kind, in.ID)
	}
	if in.MessageID == "" || strings.ContainsAny(in.MessageID, "\r\n\x00") {
		return reject("bad_id", "messageId is empty or breaks the SSE id line")
	}
	if in.EventType == "" || len(in.EventType) > MaxEventTypeLen || strings.ContainsAny(in.EventType, "\r\n\x00") {
		return reject("bad_event_type", "eventType is empty, longer than %d bytes or breaks the SSE event line", MaxEventTypeLen)
	}
	if len(in.Data) > r.maxData {
		return reject("oversized_data", "data is %d bytes, more than %d", len(in.Data), r.maxData)
	}
	data := []byte("null")
	if len(bytes.TrimSpace(in.Data)) > 0 {
		// Compact: one SSE data line (newlines inside strings are escaped).
		var b bytes.Buffer
		if err := json.Compact(&b, in.Data); err != nil {
			return reject("bad_data", "data is not JSON: %v", err)
		}
		data = b.Bytes()
	}
	return Event{
		Channel:  Channel{Kind: kind, ID: in.ID},
		ID:       in.MessageID,
		Type:     in.EventType,
		Data:     data,
		TraceID:  in.TraceID,
		Volatile: IsVolatile(in.EventType),
	}, nil
}

// WatermillBus is a Bus over a Watermill publisher and subscriber on which
// every subscriber of Topic receives every message: a RabbitMQ broker whose
// topology maps Topic to a fanout exchange and a queue per instance
// (rabbitmq.InstanceFanout), or an in-process GoChannel.
type WatermillBus struct {
	Publisher  message.Publisher
	Subscriber message.Subscriber
	// Topic is FanoutTopic unless set.
	Topic  string
	Logger *slog.Logger
}

// FanoutTopic is the default topic of WatermillBus.
const FanoutTopic = "eventpipe.realtime.fanout"

func (b WatermillBus) topic() string {
	if b.Topic == "" {
		return FanoutTopic
	}
	return b.Topic
}

// Publish implements Bus.
func (b WatermillBus) Publish(ctx context.Context, e Event) error {
	body, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("realtime bus: encode: %w", err)
	}
	msg := message.NewMessage(watermill.NewUUID(), body)
	msg.SetContext(ctx)
	if err := b.Publisher.Publish(b.topic(), msg); err != nil {
		return fmt.Errorf("realtime bus: publish %s: %w", b.topic(), err)
	}
	return nil
}

// Subscribe implements Bus. Every frame is acked once decoded (or found
// undecodable, logged and dropped): the hub never blocks.
func (b WatermillBus) Subscribe(ctx context.Context) (<-chan Event, error) {
	msgs, err := b.Subscriber.Subscribe(ctx, b.topic())
	if err != nil {
		return nil, fmt.Errorf("realtime bus: subscribe %s: %w", b.topic(), err)
	}
	logger := b.Logger
	if logger == nil {
		logger = slog.Default()
	}
	out := make(chan Event)
	go func() {
		defer close(out)
		for msg := range msgs {
			var e Event
			err := json.Unmarshal(msg.Payload, &e)
			msg.Ack()
			if err != nil {
				logger.WarnContext(ctx, "realtime bus: undecodable frame dropped", slog.String("message_id", msg.UUID), slog.Any("error", err))
				continue
			}
			select {
			case out <- e:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}
