package middleware_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/middleware"
)

type drainKey struct{}

// Drain: the handler keeps the delivery's values, outlives the delivery's
// context (the subscription, which shutdown cancels first), and ends with
// drain — and so does every context derived from it, such as Timeout's.
func TestDrainOutlivesTheDeliveryUntilDrainEnds(t *testing.T) {
	t.Parallel()
	drain, endDrain := context.WithCancel(context.Background())
	defer endDrain()
	delivery, endDelivery := context.WithCancel(context.WithValue(context.Background(), drainKey{}, "kept"))
	defer endDelivery()

	running, ended := make(chan struct{}), make(chan error, 1)
	h := middleware.Drain(drain, nil)(middleware.Timeout(time.Hour)(func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		assert.Equal(t, "kept", ctx.Value(drainKey{}), "the delivery's values")
		close(running)
		<-ctx.Done()
		ended <- context.Cause(ctx)
		return nil, ctx.Err()
	}))
	msg := message.NewMessage(watermill.NewUUID(), nil)
	msg.SetContext(delivery)
	returned := make(chan error, 1)
	go func() {
		_, err := h(msg)
		returned <- err
	}()

	<-running
	endDelivery()
	select {
	case <-ended:
		require.FailNow(t, "the handler's context ended with the delivery's")
	case <-time.After(100 * time.Millisecond):
	}
	endDrain()
	select {
	case cause := <-ended:
		require.ErrorIs(t, cause, context.Canceled)
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the handler's context did not end with drain")
	}
	require.ErrorIs(t, <-returned, context.Canceled)
}

// Before drain ends, the handler's context is live and has no cause, even
// after the delivery's context ended.
func TestDrainContextIsLiveBeforeDrainEnds(t *testing.T) {
	t.Parallel()
	drain, endDrain := context.WithCancel(context.Background())
	defer endDrain()
	delivery, endDelivery := context.WithCancel(context.Background())
	endDelivery()
	msg := message.NewMessage(watermill.NewUUID(), nil)
	msg.SetContext(delivery)
	_, err := middleware.Drain(drain, nil)(func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		require.NoError(t, ctx.Err())
		require.NoError(t, context.Cause(ctx))
		_, ok := ctx.Deadline()
		assert.False(t, ok, "drain has no deadline")
		return nil, nil
	})(msg)
	require.NoError(t, err)
}
