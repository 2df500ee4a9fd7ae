package booking_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/handlers/booking"
)

var moment = time.Date(2026, 11, 30, 9, 14, 3, 512e6, time.UTC)

func base() booking.Event {
	return booking.Event{
		BookingSessionID: "bks_1", Type: booking.TypeStepCompleted, OccurredAt: moment, StepID: "pick-slot",
		Data: json.RawMessage(`{"slot":"2026-12-01T10:00:00Z","guests":2,"tags":["a","b"],"who":{"name":"Ana","age":30}}`),
	}
}

func derive(t *testing.T, ev booking.Event) string {
	t.Helper()
	id, err := booking.DeriveEventID(ev)
	require.NoError(t, err)
	require.True(t, booking.IsEventID(id), id)
	return id
}

func TestDeriveEventIDSame(t *testing.T) {
	t.Parallel()
	want := derive(t, base())
	cases := map[string]func(*booking.Event){
		"deterministic": func(*booking.Event) {},
		"key order": func(e *booking.Event) {
			e.Data = json.RawMessage(`{"who":{"age":30,"name":"Ana"},"tags":["a","b"],"guests":2,"slot":"2026-12-01T10:00:00Z"}`)
		},
		"whitespace": func(e *booking.Event) {
			e.Data = json.RawMessage("{ \"slot\" : \"2026-12-01T10:00:00Z\",\n\"guests\":2, \"tags\":[ \"a\",\"b\" ], \"who\":{\"name\":\"Ana\",\"age\":30} }")
		},
		"number spelling": func(e *booking.Event) {
			e.Data = json.RawMessage(`{"slot":"2026-12-01T10:00:00Z","guests":2.0,"tags":["a","b"],"who":{"name":"Ana","age":3e1}}`)
		},
		"moment in another offset": func(e *booking.Event) { e.OccurredAt = moment.In(time.FixedZone("IST", 5*3600+1800)) },
		"sub-millisecond dropped":  func(e *booking.Event) { e.OccurredAt = moment.Add(999 * time.Microsecond) },
		"its own event id ignored": func(e *booking.Event) { e.EventID = "anything" },
		"escaped and unescaped text": func(e *booking.Event) {
			e.Data = json.RawMessage(`{"slot":"2026-12-01T10:00:00Z","guests":2,"tags":["\u0061","b"],"who":{"name":"Ana","age":30}}`)
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ev := base()
			mutate(&ev)
			assert.Equal(t, want, derive(t, ev))
		})
	}
}

func TestDeriveEventIDAbsentNullEmptyData(t *testing.T) {
	t.Parallel()
	ev := base()
	ev.Data = nil
	want := derive(t, ev)
	for _, d := range []string{"", "null", " null ", "{}", "{ }", "\n{}\n"} {
		ev.Data = json.RawMessage(d)
		assert.Equal(t, want, derive(t, ev), "data %q", d)
	}
	// Through the wire: a body with no data, "data": null and "data": {}.
	for _, body := range []string{
		`{"eventId":"x","bookingSessionId":"bks_1","type":"step-completed","occurredAt":"2026-11-30T09:14:03.512Z","stepId":"pick-slot"}`,
		`{"eventId":"x","bookingSessionId":"bks_1","type":"step-completed","occurredAt":"2026-11-30T09:14:03.512Z","stepId":"pick-slot","data":null}`,
		`{"eventId":"x","bookingSessionId":"bks_1","type":"step-completed","occurredAt":"2026-11-30T09:14:03.512Z","stepId":"pick-slot","data":{}}`,
	} {
		got, err := booking.Decode([]byte(body))
		require.NoError(t, err)
		assert.Equal(t, want, derive(t, got), body)
	}
	ev.Data = json.RawMessage(`{"a":null}`)
	assert.NotEqual(t, want, derive(t, ev), "a key with a null value is data")
}

func TestDeriveEventIDDiffers(t *testing.T) {
	t.Parallel()
	ref := derive(t, base())
	seen := map[string]string{"base": ref}
	cases := map[string]func(*booking.Event){
		"another session": func(e *booking.Event) { e.BookingSessionID = "bks_2" },
		"another type":    func(e *booking.Event) { e.Type = booking.TypeBookingCompleted },
		"another moment":  func(e *booking.Event) { e.OccurredAt = moment.Add(time.Millisecond) },
		"another step":    func(e *booking.Event) { e.StepID = "intake" },
		"no step":         func(e *booking.Event) { e.StepID = "" },
		"another data value": func(e *booking.Event) {
			e.Data = json.RawMessage(`{"slot":"2026-12-01T10:00:00Z","guests":3,"tags":["a","b"],"who":{"name":"Ana","age":30}}`)
		},
		"array order": func(e *booking.Event) {
			e.Data = json.RawMessage(`{"slot":"2026-12-01T10:00:00Z","guests":2,"tags":["b","a"],"who":{"name":"Ana","age":30}}`)
		},
		"number vs string": func(e *booking.Event) {
			e.Data = json.RawMessage(`{"slot":"2026-12-01T10:00:00Z","guests":"2","tags":["a","b"],"who":{"name":"Ana","age":30}}`)
		},
		"no data": func(e *booking.Event) { e.Data = nil },
		// Field boundaries are JSON-encoded: moving text between fields
		// cannot produce the same projection.
		"session/step shift": func(e *booking.Event) { e.BookingSessionID, e.StepID = "bks_1pick", "-slot" },
	}
	for name, mutate := range cases {
		ev := base()
		mutate(&ev)
		id := derive(t, ev)
		for other, oid := range seen {
			assert.NotEqual(t, oid, id, "%s collides with %s", name, other)
		}
		seen[name] = id
	}
}

// Two sessions never collide: the same step, moment and data in many
// sessions give as many ids.
func TestDeriveEventIDSessionsNeverCollide(t *testing.T) {
	t.Parallel()
	ids := map[string]bool{}
	for i := range 1000 {
		ev := base()
		ev.BookingSessionID = "bks_" + string(rune('a'+i%26)) + time.Duration(i).String()
		ids[derive(t, ev)] = true
	}
	assert.Len(t, ids, 1000)
}

func TestDeriveEventIDRefusesNonObjectData(t *testing.T) {
	t.Parallel()
	for _, d := range []string{`[]`, `"x"`, `1`, `{"a":1}x`, `{"a":`, `{} {}`} {
		ev := base()
		ev.Data = json.RawMessage(d)
		_, err := booking.DeriveEventID(ev)
		assert.ErrorIs(t, err, booking.ErrInvalidEvent, d)
	}
}

// The id is pinned: a change to the projection changes every id in flight
// and must be deliberate (bump projectionVersion and drain first).
func TestDeriveEventIDPinned(t *testing.T) {
	t.Parallel()
	ev := booking.Event{BookingSessionID: "bks_1", Type: "step-completed", OccurredAt: moment, StepID: "pick-slot"}
	// sha256("booking-session-event/v1\x00" + `["bks_1","step-completed","2026-11-30T09:14:03.512Z","pick-slot",{}]`)
	assert.Equal(t, "bse_8bceef79fc1399262e2928c8c0c77be30fb658dae54ae940256e391741230353", derive(t, ev))
}
