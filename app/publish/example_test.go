package publish_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/eventpipe/eventpipe/app/broker/memory"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/app/publish"
	"github.com/eventpipe/eventpipe/config"
)

// smoke is the StackUp contract's section 9 smoke message.
const smoke = `{"messageId":"smoke-1","messageType":"analyze.resume","version":"v1","traceId":"local-test",` +
	`"publishedAt":"2026-04-27T15:00:00Z","publisher":"manual",` +
	`"payload":{"resumeId":1,"filePath":"resumes/raw/1/test.pdf","analyzedDocumentId":1},"context":{"userId":1}}`

// A service publishes a StackUp message to the exchange and routing key the
// contract names; the ids come from the envelope. Here the broker is an
// in-process memory broker its consumer shares (New); against RabbitMQ, SQS
// or PostgreSQL, Open(ctx, cfg, ...) connects to the one cfg names.
func Example() {
	ctx := context.Background()
	cfg := config.Defaults()
	cfg.StackUp.Enabled = true

	broker, _ := memory.New(memory.Config{}, nil)
	defer func() { _ = broker.Close() }()
	deliveries, _ := broker.Subscribe(ctx, "ai.analyze.resume") // the AI worker's queue

	contract, err := publish.Load(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	pub, _ := publish.New(cfg, contract, broker, publish.Options{})
	sent, err := pub.Publish(ctx, "stackup.core-to-ai/analyze.resume", []byte(smoke))
	if err != nil {
		fmt.Println(err)
		return
	}
	got := <-deliveries
	got.Ack()
	fmt.Println("sent", sent.UUID, "trace", sent.Metadata.Get(metadata.TraceIDKey))
	fmt.Println("received", got.UUID, "trace", got.Metadata.Get(metadata.TraceIDKey))
	// Output:
	// sent smoke-1 trace local-test
	// received smoke-1 trace local-test
}

// A body with a field the schema does not know is refused before anything is
// sent (strict on publish); the error names the field's path.
func ExampleContract_Message_refused() {
	cfg := config.Defaults()
	cfg.StackUp.Enabled = true
	contract, _ := publish.Load(cfg)

	body := strings.Replace(smoke, `"analyzedDocumentId":1`, `"analyzedDocumentId":1,"priority":"high"`, 1)
	_, err := contract.Message(context.Background(), "stackup.core-to-ai/analyze.resume", []byte(body))
	var refused *publish.RefusedError
	if errors.As(err, &refused) {
		fmt.Println("refused for queue", refused.Queue)
		fmt.Println(strings.Contains(err.Error(), "at '/payload': additional properties 'priority' not allowed"))
	}
	// Output:
	// refused for queue ai.analyze.resume
	// true
}

// Publish after commit: the message is checked and prepared at once, written
// to the outbox with the business change, and sent only once that change
// commits. Without a database (outbox.AfterCommit) outbox.Unit is the
// commit; with one, outbox.TxWriter writes the row inside dbtx.InTx and the
// relay sends it.
func ExampleContract_Write() {
	ctx := context.Background()
	cfg := config.Defaults()
	cfg.Demo.Enabled = true
	broker, _ := memory.New(memory.Config{}, nil)
	defer func() { _ = broker.Close() }()
	deliveries, _ := broker.Subscribe(ctx, "demo.greetings")

	contract, _ := publish.Load(cfg)
	var w outbox.Writer = outbox.AfterCommit{Publisher: broker}
	err := outbox.Unit(ctx, func(ctx context.Context) error {
		// ... the business change ...
		_, err := contract.Write(ctx, w, "demo.greetings", []byte(`{"name":"Ada"}`),
			publish.WithID("greeting-1"), publish.WithMetadata(metadata.TraceIDKey, "4bf92f3577b34da6a3ce929d0e0e4736"))
		return err
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	got := <-deliveries
	got.Ack()
	fmt.Println(got.UUID, string(got.Payload), got.Metadata.Get(metadata.TraceIDKey))
	// Output:
	// greeting-1 {"name":"Ada"} 4bf92f3577b34da6a3ce929d0e0e4736
}
