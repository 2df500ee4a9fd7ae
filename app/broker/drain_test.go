package broker_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
)

const queue, dlq = "booking-session-events.fifo", "booking-session-events-dlq.fifo"

// fakeStats answers from a map; a queue it does not hold does not exist.
type fakeStats map[string]broker.QueueStats

func (f fakeStats) QueueStats(_ context.Context, q string) (broker.QueueStats, error) {
	s, ok := f[q]
	if !ok {
		return broker.QueueStats{}, fmt.Errorf("queue %s: %w", q, broker.ErrQueueNotFound)
	}
	s.Queue = q
	return s, nil
}

func TestCheckDrained(t *testing.T) {
	t.Parallel()
	empty := broker.QueueStats{InFlightKnown: true}
	for _, tc := range []struct {
		name       string
		queue, dlq broker.QueueStats
		drained    bool
		says       string
	}{
		{"both empty", empty, empty, true, "— drained"},
		{"ready in the queue", broker.QueueStats{Ready: 3, InFlightKnown: true}, empty, false, "— not drained"},
		{"in flight: a consumer may give it back", broker.QueueStats{InFlight: 1, InFlightKnown: true}, empty, false, "1 in flight"},
		{"delayed: waiting for a redelivery", broker.QueueStats{Delayed: 1, InFlightKnown: true}, empty, false, "1 delayed"},
		{"a dead letter", empty, broker.QueueStats{Ready: 1, InFlightKnown: true}, false, "— not drained"},
		{"in flight unknown: never drained", broker.QueueStats{}, empty, false,
			"not drained: messages in flight unknown on " + queue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, err := broker.CheckDrained(context.Background(), fakeStats{queue: tc.queue, dlq: tc.dlq}, queue, dlq)
			require.NoError(t, err)
			assert.Equal(t, tc.drained, r.Drained(), r.String())
			assert.Contains(t, r.String(), tc.says)
			require.Len(t, r.Queues, 2)
			assert.Equal(t, queue, r.Queues[0].Queue)
			assert.Equal(t, dlq, r.Queues[1].Queue)
		})
	}
}

func TestCheckDrainedMissingQueueIsAnError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := broker.CheckDrained(ctx, fakeStats{queue: {InFlightKnown: true}}, queue, dlq)
	require.ErrorIs(t, err, broker.ErrQueueNotFound, "a DLQ that cannot be counted is an error, not zero")
	assert.ErrorContains(t, err, dlq)

	r, err := broker.CheckDrained(ctx, fakeStats{queue: {InFlightKnown: true}}, queue, "")
	require.NoError(t, err, "no DLQ to check")
	assert.True(t, r.Drained(), r.String())
	assert.False(t, broker.DrainReport{}.Drained(), "nothing checked is not drained")
}
