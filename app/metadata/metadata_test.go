package metadata_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/metadata"
)

func TestDeadLetterRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	want := metadata.DeadLetter{
		Reason: "decode: unexpected EOF", Class: "permanent", Attempts: 3,
		FirstFailureAt: at, LastFailureAt: at.Add(time.Minute), SourceQueue: "orders",
		DeadLetteredAt: at.Add(2 * time.Minute), TraceID: "4bf92f3577b34da6a3ce929d0e0e4736",
	}
	msg := message.NewMessage(watermill.NewUUID(), nil)
	metadata.SetDeadLetter(msg, want)

	got, ok, err := metadata.DeadLetterOf(msg)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, want, got)
	assert.Contains(t, msg.Metadata.Get("x-dead-letter"), `"source_queue":"orders"`, "the wire key and field names are the contract")
}

func TestDeadLetterOf(t *testing.T) {
	t.Parallel()
	t.Run("not dead-lettered by eventpipe", func(t *testing.T) {
		t.Parallel()
		_, ok, err := metadata.DeadLetterOf(message.NewMessage(watermill.NewUUID(), nil))
		require.NoError(t, err)
		assert.False(t, ok)
	})
	t.Run("garbled history", func(t *testing.T) {
		t.Parallel()
		msg := message.NewMessage(watermill.NewUUID(), nil)
		msg.Metadata.Set(metadata.DeadLetterKey, "{not json")
		_, ok, err := metadata.DeadLetterOf(msg)
		require.Error(t, err)
		assert.False(t, ok)
		assert.Contains(t, err.Error(), msg.UUID)
	})
}

func TestNackDelay(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		raw  string
		want time.Duration
	}{
		{"", 0},
		{"1.5s", 1500 * time.Millisecond},
		{"-3s", 0},
		{"soon", 0},
	} {
		msg := message.NewMessage(watermill.NewUUID(), nil)
		if tt.raw != "" {
			msg.Metadata.Set(metadata.NackDelayKey, tt.raw)
		}
		assert.Equal(t, tt.want, metadata.NackDelay(msg), "%q", tt.raw)
	}
}
