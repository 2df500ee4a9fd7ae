package booking_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/handlers/booking"
)

func withID(t *testing.T, ev booking.Event) booking.Event {
	t.Helper()
	ev.EventID = derive(t, ev)
	return ev
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	t.Parallel()
	ev := withID(t, base())
	body, err := booking.Encode(ev)
	require.NoError(t, err)
	require.NoError(t, booking.Validate(body))
	got, err := booking.Decode(body)
	require.NoError(t, err)
	assert.Equal(t, ev.EventID, got.EventID)
	assert.Equal(t, ev.BookingSessionID, got.BookingSessionID)
	assert.Equal(t, ev.Type, got.Type)
	assert.Equal(t, ev.StepID, got.StepID)
	assert.True(t, ev.OccurredAt.Equal(got.OccurredAt))
	assert.JSONEq(t, string(ev.Data), string(got.Data))
	assert.Equal(t, ev.EventID, derive(t, got), "the consumer could re-derive (it never does)")

	noData := withID(t, booking.Event{BookingSessionID: "bks_1", Type: booking.TypeBookingAbandoned, OccurredAt: moment})
	body, err = booking.Encode(noData)
	require.NoError(t, err)
	assert.JSONEq(t, `{"eventId":"`+noData.EventID+`","bookingSessionId":"bks_1","type":"booking-abandoned","occurredAt":"2026-11-30T09:14:03.512Z"}`, string(body))
}

func TestMessage(t *testing.T) {
	t.Parallel()
	ev := withID(t, base())
	msg, err := booking.Message(ev)
	require.NoError(t, err)
	assert.Equal(t, ev.EventID, msg.UUID)
	assert.Equal(t, "bks_1", msg.Metadata.Get(metadata.GroupIDKey))
	assert.Equal(t, ev.EventID, msg.Metadata.Get(metadata.DeduplicationIDKey))
}

func TestEncodeIsStrict(t *testing.T) {
	t.Parallel()
	cases := map[string]func(*booking.Event){
		"no event id":          func(e *booking.Event) { e.EventID = "" },
		"a foreign event id":   func(e *booking.Event) { e.EventID = "evt_1" },
		"id of another event":  func(e *booking.Event) { e.StepID = "other" },
		"no session":           func(e *booking.Event) { e.BookingSessionID = "" },
		"session not ASCII":    func(e *booking.Event) { e.BookingSessionID = "séance" },
		"session with a space": func(e *booking.Event) { e.BookingSessionID = "a b" },
		"session too long":     func(e *booking.Event) { e.BookingSessionID = strings.Repeat("s", 129) },
		"no type":              func(e *booking.Event) { e.Type = "" },
		"type not kebab":       func(e *booking.Event) { e.Type = "StepCompleted" },
		"no moment":            func(e *booking.Event) { e.OccurredAt = time.Time{} },
		"data an array":        func(e *booking.Event) { e.Data = json.RawMessage(`[1]`) },
		"step too long":        func(e *booking.Event) { e.StepID = strings.Repeat("s", 129) },
	}
	for name, mutate := range cases {
		ev := withID(t, base())
		mutate(&ev)
		_, err := booking.Encode(ev)
		assert.ErrorIs(t, err, booking.ErrInvalidEvent, name)
	}
}

func TestDecodeIsLenient(t *testing.T) {
	t.Parallel()
	ev, err := booking.Decode([]byte(`{"eventId":"foreign-1","bookingSessionId":"bks_9","type":"seat-held","occurredAt":"2026-11-30T10:14:03+01:00",
		"secret":"never kept","data":{"x":1},"stepId":null}`))
	require.NoError(t, err)
	assert.Equal(t, "foreign-1", ev.EventID, "any non-empty id is accepted")
	assert.Equal(t, "seat-held", ev.Type, "the type list is open (\"etc.\")")
	other, err := booking.Decode([]byte(`{"bookingSessionId":"bks_9","type":"Seat Held","occurredAt":"2026-11-30T10:14:03Z"}`))
	require.NoError(t, err, "a type of any shape is taken on consume; kebab-case binds our producer")
	assert.Equal(t, "Seat Held", other.Type)
	assert.Equal(t, time.Date(2026, 11, 30, 9, 14, 3, 0, time.UTC), ev.OccurredAt)
	_, err = booking.Decode([]byte(`{"bookingSessionId":"bks_9","type":"x","occurredAt":"2026-11-30T10:14:03Z","stepId":1}`))
	assert.ErrorIs(t, err, booking.ErrInvalidEvent, "a wrong type is not ignored")

	noID, err := booking.Decode([]byte(`{"bookingSessionId":"bks_9","type":"x","occurredAt":"2026-11-30T10:14:03Z"}`))
	require.NoError(t, err, "a missing eventId is forwarded, not refused here")
	assert.Empty(t, noID.EventID, "and never synthesised")

	for _, bad := range []string{``, `null`, `[]`, `"x"`, `{`, `{"eventId":1,"bookingSessionId":"b","type":"x","occurredAt":"2026-11-30T10:14:03Z"}`,
		`{"type":"x","occurredAt":"2026-11-30T10:14:03Z"}`, `{"bookingSessionId":"","type":"x","occurredAt":"2026-11-30T10:14:03Z"}`,
		`{"bookingSessionId":"b","occurredAt":"2026-11-30T10:14:03Z"}`, `{"bookingSessionId":"b","type":"x"}`,
		`{"bookingSessionId":"b","type":"x","occurredAt":"yesterday"}`, `{"bookingSessionId":"b","type":"x","occurredAt":"2026-11-30T10:14:03Z","data":[]}`,
		`{"bookingSessionId":"` + strings.Repeat("b", 129) + `","type":"x","occurredAt":"2026-11-30T10:14:03Z"}`} {
		_, err := booking.Decode([]byte(bad))
		assert.ErrorIs(t, err, booking.ErrInvalidEvent, bad)
	}
	// The error names the field at fault.
	for bad, want := range map[string]string{
		`{"type":"x","occurredAt":"2026-11-30T10:14:03Z"}`:                                    "field bookingSessionId: required",
		`{"bookingSessionId":"b","type":7,"occurredAt":"2026-11-30T10:14:03Z"}`:               "field type: want string, got number",
		`{"bookingSessionId":"b","type":"x","occurredAt":"yesterday"}`:                        "field occurredAt: not a valid date-time",
		`{"bookingSessionId":"b","type":"x","occurredAt":"2026-11-30T10:14:03Z","data":1}`:    "field data: want null or object, got number",
		`{"eventId":1,"bookingSessionId":"b","type":"x","occurredAt":"2026-11-30T10:14:03Z"}`: "field eventId: want a string",
	} {
		_, err := booking.Decode([]byte(bad))
		assert.ErrorContains(t, err, want, bad)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	body, err := booking.Encode(withID(t, base()))
	require.NoError(t, err)
	require.NoError(t, booking.Validate(body))
	var m map[string]any
	require.NoError(t, json.Unmarshal(body, &m))
	m["extra"] = true
	extra, _ := json.Marshal(m)
	assert.ErrorContains(t, booking.Validate(extra), "unknown field")
	delete(m, "extra")
	delete(m, "eventId")
	noID, _ := json.Marshal(m)
	assert.ErrorContains(t, booking.Validate(noID), "field eventId: required")
	m["eventId"] = "bse_" + strings.Repeat("0", 64)
	wrong, _ := json.Marshal(m)
	assert.ErrorContains(t, booking.Validate(wrong), "not the derived id")
}
