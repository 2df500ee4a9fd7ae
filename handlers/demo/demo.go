// Package demo is the small route `make run` shows a newcomer: a greeting is
// published, handled (logged with its message id and trace id) and answered
// with a second message that carries the same trace id to a second handler.
package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/msgctx"
	"github.com/eventpipe/eventpipe/app/route"
)

// Queues of the demo.
const (
	GreetingsQueue = "demo.greetings"
	GreetedQueue   = "demo.greeted"
)

// Greeting asks for someone to be greeted.
type Greeting struct {
	Name string `json:"name"`
}

// Greeted announces that someone was greeted.
type Greeted struct {
	Text string `json:"text"`
}

const maxName = 100

// ValidateGreeting is strict, as every publisher of ours is: unknown fields,
// a missing or oversized name, or trailing data are errors.
func ValidateGreeting(payload []byte) error {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	var g Greeting
	if err := dec.Decode(&g); err != nil {
		return fmt.Errorf("greeting: %w", err)
	}
	if dec.More() {
		return errors.New("greeting: trailing data after the JSON object")
	}
	return g.validate()
}

func (g Greeting) validate() error {
	name := strings.TrimSpace(g.Name)
	switch {
	case name == "":
		return errors.New("greeting: name is required")
	case utf8.RuneCountInString(name) > maxName:
		return fmt.Errorf("greeting: name is longer than %d characters", maxName)
	}
	return nil
}

// Handlers are the demo's two routes.
type Handlers struct {
	Publisher message.Publisher
	Logger    *slog.Logger
}

// Routes returns the demo routes.
func (h Handlers) Routes() route.Set {
	return route.Set{
		{Name: "demo-greet", Queue: GreetingsQueue, Validate: ValidateGreeting, Handle: h.greet},
		{Name: "demo-greeted", Queue: GreetedQueue, Validate: validateGreeted, Handle: h.greeted},
	}
}

func (h Handlers) greet(msg *message.Message) error {
	// Lenient on consume: unknown fields are ignored.
	var g Greeting
	if err := json.Unmarshal(msg.Payload, &g); err != nil {
		return fmt.Errorf("decode greeting: %w", err)
	}
	if err := g.validate(); err != nil {
		return err
	}
	ctx := msg.Context()
	msgctx.Logger(ctx, h.Logger, msg).InfoContext(ctx, "greeting handled", slog.String("name", g.Name))

	body, err := json.Marshal(Greeted{Text: "hello, " + strings.TrimSpace(g.Name)})
	if err != nil {
		return err
	}
	if err := h.Publisher.Publish(GreetedQueue, msgctx.NewMessage(ctx, body)); err != nil {
		return fmt.Errorf("publish %s: %w", GreetedQueue, err)
	}
	return nil
}

func validateGreeted(payload []byte) error {
	var g Greeted
	if err := json.Unmarshal(payload, &g); err != nil {
		return fmt.Errorf("greeted: %w", err)
	}
	if g.Text == "" {
		return errors.New("greeted: text is required")
	}
	return nil
}

func (h Handlers) greeted(msg *message.Message) error {
	var g Greeted
	if err := json.Unmarshal(msg.Payload, &g); err != nil {
		return fmt.Errorf("decode greeted: %w", err)
	}
	ctx := msg.Context()
	msgctx.Logger(ctx, h.Logger, msg).InfoContext(ctx, "greeted", slog.String("text", g.Text))
	return nil
}

var names = []string{"Ada", "Grace", "Edsger", "Barbara", "Donald", "Frances", "세종"}

// Produce publishes a greeting every interval until ctx ends, each starting a
// new trace. It is the demo's traffic source.
func Produce(ctx context.Context, pub message.Publisher, interval time.Duration, logger *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for i := 0; ; i++ {
		body, _ := json.Marshal(Greeting{Name: names[i%len(names)]})
		msg := msgctx.NewMessage(msgctx.WithTraceID(ctx, msgctx.NewTraceID()), body)
		if err := pub.Publish(GreetingsQueue, msg); err != nil {
			logger.WarnContext(ctx, "demo publish failed", slog.String("message_id", msg.UUID), slog.Any("error", err))
		} else {
			logger.InfoContext(ctx, "greeting published",
				slog.String("message_id", msg.UUID),
				slog.String("trace_id", msg.Metadata.Get(metadata.TraceIDKey)),
				slog.String("queue", GreetingsQueue))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
