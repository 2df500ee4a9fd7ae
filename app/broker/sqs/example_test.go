package sqs_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/eventpipe/eventpipe/app/broker/sqs"
)

// In production only the region is needed: endpoint and credentials come from
// the AWS default chain, and the queues from topology provisioning.
func ExampleNew_production() {
	ps, err := sqs.New(context.Background(), sqs.Config{Region: "eu-central-1"}, watermill.NopLogger{})
	if err != nil {
		log.Fatal(err)
	}
	defer ps.Close()
}

// Against the local emulator (.ci/sqs-emulator start): its endpoint, any static
// credentials, and queues created on first use.
func ExampleNew_emulator() {
	ps, err := sqs.New(context.Background(), sqs.Config{
		Region:       "us-east-1",
		Endpoint:     "http://127.0.0.1:9324",
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		CreateQueues: true,
	}, watermill.NopLogger{})
	if err != nil {
		log.Fatal(err)
	}
	defer ps.Close()

	msg := message.NewMessage(watermill.NewUUID(), []byte(`{"type":"interview.completed"}`))
	msg.Metadata.Set("eventType", "interview.completed")
	if err := ps.Publish("interview-report", msg); err != nil {
		log.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msgs, err := ps.Subscribe(ctx, "interview-report")
	if err != nil {
		log.Fatal(err)
	}
	for m := range msgs {
		log.Printf("%s (delivery %s): %s", m.UUID, m.Metadata.Get(sqs.ReceiveCountKey), m.Payload)
		m.Ack()
	}
}

// Topology names become SQS queue names: dots turn into hyphens except a
// trailing .fifo, the prefix goes in front, and valid names stay as they are.
func ExampleQueueName() {
	fmt.Println(sqs.QueueName("", "ai.analyze.cover_letter"))
	fmt.Println(sqs.QueueName("", "interview-completed"))
	fmt.Println(sqs.QueueName("stage-", "dlq.ai.analyze.resume"))
	fmt.Println(sqs.QueueName("stage-", "booking-session-events.fifo"))
	// Output:
	// ai-analyze-cover_letter
	// interview-completed
	// stage-dlq-ai-analyze-resume
	// stage-booking-session-events.fifo
}
