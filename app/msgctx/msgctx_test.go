package msgctx_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/msgctx"
)

func TestNewMessageContinuesTrace(t *testing.T) {
	t.Parallel()
	ctx := msgctx.WithTraceID(context.Background(), "t-1")
	msg := msgctx.NewMessage(ctx, []byte("x"))
	assert.Equal(t, "t-1", msg.Metadata.Get(metadata.TraceIDKey), "the trace id travels under metadata.TraceIDKey")
	assert.Equal(t, "t-1", msgctx.TraceID(msg.Context()))
	assert.NotEmpty(t, msg.UUID)

	bare := msgctx.NewMessage(context.Background(), nil)
	assert.Empty(t, bare.Metadata.Get(metadata.TraceIDKey))
}

func TestNewTraceIDIsAW3CTraceID(t *testing.T) {
	t.Parallel()
	a, b := msgctx.NewTraceID(), msgctx.NewTraceID()
	assert.Regexp(t, regexp.MustCompile(`^[0-9a-f]{32}$`), a)
	assert.NotEqual(t, a, b)
}

func TestAttempt(t *testing.T) {
	t.Parallel()
	assert.Zero(t, msgctx.Attempt(context.Background()), "outside a handler run by the policy")
	assert.Equal(t, 3, msgctx.Attempt(msgctx.WithAttempt(context.Background(), 3)))
}

// TestLoggerAttachesMessageAttributes runs a real Watermill router: only the
// router puts the queue into a message's context.
func TestLoggerAttachesMessageAttributes(t *testing.T) {
	t.Parallel()
	const queue = "msgctx.orders"
	pubSub := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)

	var buf bytes.Buffer
	logged := make(chan struct{})
	router.AddConsumerHandler("orders", queue, pubSub, func(msg *message.Message) error {
		ctx := msgctx.WithTraceID(msg.Context(), "trace-1")
		msgctx.Logger(ctx, slog.New(slog.NewJSONHandler(&buf, nil)), msg).InfoContext(ctx, "handled", slog.Int("n", 1))
		close(logged)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = router.Run(ctx) }()
	t.Cleanup(func() { _ = router.Close() })
	<-router.Running()

	msg := message.NewMessage(watermill.NewUUID(), nil)
	require.NoError(t, pubSub.Publish(queue, msg))
	select {
	case <-logged:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the handler never ran")
	}

	var line map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &line), buf.String())
	assert.Equal(t, msg.UUID, line["message_id"])
	assert.Equal(t, "trace-1", line["trace_id"])
	assert.Equal(t, queue, line["queue"])
	assert.EqualValues(t, 1, line["n"], "the caller's own attributes follow")
}

func TestLoggerWithoutBaseDiscards(t *testing.T) {
	t.Parallel()
	log := msgctx.Logger(context.Background(), nil, message.NewMessage(watermill.NewUUID(), nil))
	require.NotNil(t, log)
	log.Info("goes nowhere")
	assert.False(t, log.Enabled(context.Background(), slog.LevelError))
}
