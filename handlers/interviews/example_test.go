package interviews_test

import (
	"context"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/handlers/interviews"
)

// The API publishes an interview's end inside its request; the request id
// becomes the requestId attribute (and the trace id).
func ExampleProducer_PublishInterviewCompleted() {
	var publisher message.Publisher // the service's publisher
	p := interviews.NewProducer(publisher, slog.Default())
	ctx := interviews.WithRequestID(context.Background(), "req-8f2c")
	_, _ = p.PublishInterviewCompleted(ctx, interviews.InterviewCompleted{
		InterviewID:     "65f1c2a9e4b0a1b2c3d4e5f6",
		OrganizationID:  "65f1c2a9e4b0a1b2c3d4e5f7",
		CompletedAt:     time.Now(), // zero: now
		DurationSeconds: 754,        // 12 credits
	})
}
