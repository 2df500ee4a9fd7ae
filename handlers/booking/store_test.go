package booking_test

// One suite for both stores.

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/handlers/booking"
)

func TestStores(t *testing.T) {
	t.Parallel()
	stores := map[string]func(t *testing.T) booking.Store{
		"memory": func(*testing.T) booking.Store { return booking.NewMemory() },
		"postgres": func(t *testing.T) booking.Store {
			pool, schema := dbtest.Schema(t)
			s, err := booking.NewPostgres(pool, schema)
			require.NoError(t, err)
			return s
		},
	}
	for name, newStore := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			storeSuite(t, newStore(t))
		})
	}
}

func storeSuite(t *testing.T, s booking.Store) {
	ctx := context.Background()
	_, ok, err := s.Session(ctx, "bks_s")
	require.NoError(t, err)
	assert.False(t, ok)
	evs, err := s.Events(ctx, "bks_s")
	require.NoError(t, err)
	assert.Empty(t, evs)

	step := withID(t, booking.Event{BookingSessionID: "bks_s", Type: booking.TypeStepCompleted, OccurredAt: moment, StepID: "pick-slot",
		Data: json.RawMessage(`{"z":1, "a":{"y":2,"b":[1,2]}}`)})
	answer := withID(t, booking.Event{BookingSessionID: "bks_s", Type: booking.TypeQuestionAnswered, OccurredAt: moment.Add(time.Second), StepID: "intake"})
	done := withID(t, booking.Event{BookingSessionID: "bks_s", Type: booking.TypeBookingCompleted, OccurredAt: moment.Add(2 * time.Second)})
	late := withID(t, booking.Event{BookingSessionID: "bks_s", Type: booking.TypeStepCompleted, OccurredAt: moment.Add(3 * time.Second), StepID: "late"})
	other := withID(t, booking.Event{BookingSessionID: "bks_o", Type: booking.TypeBookingAbandoned, OccurredAt: moment})

	require.NoError(t, s.Apply(ctx, step))
	st, ok, err := s.Session(ctx, "bks_s")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, booking.StatusInProgress, st.Status)
	assert.Equal(t, int64(1), st.Events)
	assert.Equal(t, step.EventID, st.LastEventID)
	assert.Equal(t, "pick-slot", st.LastStepID)
	assert.False(t, st.UpdatedAt.IsZero())

	require.NoError(t, s.Apply(ctx, step), "the same event id again: no change")
	require.NoError(t, s.Apply(ctx, other))
	require.NoError(t, s.Apply(ctx, answer))
	require.NoError(t, s.Apply(ctx, done))
	require.NoError(t, s.Apply(ctx, late))
	st, _, err = s.Session(ctx, "bks_s")
	require.NoError(t, err)
	assert.Equal(t, booking.StatusCompleted, st.Status, "final: a later event does not reopen it")
	assert.Equal(t, int64(4), st.Events)
	assert.Equal(t, late.EventID, st.LastEventID)
	o, _, err := s.Session(ctx, "bks_o")
	require.NoError(t, err)
	assert.Equal(t, booking.StatusAbandoned, o.Status)

	evs, err = s.Events(ctx, "bks_s")
	require.NoError(t, err)
	require.Len(t, evs, 4)
	for i, want := range []booking.Event{step, answer, done, late} {
		assert.Equal(t, want.EventID, evs[i].EventID, "applied order")
		assert.Equal(t, want.Type, evs[i].Type)
		assert.True(t, want.OccurredAt.Equal(evs[i].OccurredAt))
		assert.Equal(t, want.EventID, derive(t, evs[i]), "stored faithfully: it derives its id again")
	}
	assert.JSONEq(t, `{"a":{"b":[1,2],"y":2},"z":1}`, string(evs[0].Data))
	assert.JSONEq(t, `{}`, string(evs[1].Data))
}
