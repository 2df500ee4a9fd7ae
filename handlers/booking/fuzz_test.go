package booking_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/handlers/booking"
)

const specExample = `{"eventId":"bse_8bceef79fc1399262e2928c8c0c77be30fb658dae54ae940256e391741230353","bookingSessionId":"bks_1","type":"step-completed","occurredAt":"2026-11-30T09:14:03.512Z","stepId":"pick-slot"}`

// FuzzDecode: no body panics the consumer's decoder; whatever it accepts has
// the fields the processor relies on, derives an id, and re-encodes strictly
// once given that id. Seeds: testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(specExample))
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := booking.Decode(body)
		_ = booking.Validate(body) // must not panic either
		if err != nil {
			return
		}
		const required = "accepted an event without its required fields: %+v"
		require.NotEmpty(t, ev.BookingSessionID, required, ev)
		require.NotEmpty(t, ev.Type, required, ev)
		require.False(t, ev.OccurredAt.IsZero(), required, ev)
		require.LessOrEqual(t, len(ev.EventID), booking.MaxIDLength, required, ev)
		require.LessOrEqual(t, len(ev.BookingSessionID), booking.MaxIDLength, required, ev)
		id, err := booking.DeriveEventID(ev)
		require.NoError(t, err, "accepted data DeriveEventID refuses")
		ev2, err := booking.Decode(body)
		require.NoError(t, err)
		id2, _ := booking.DeriveEventID(ev2)
		require.Equal(t, id, id2, "not deterministic")
		ev.EventID = id
		if enc, err := booking.Encode(ev); err == nil {
			back, err := booking.Decode(enc)
			require.NoError(t, err, "decode(encode)")
			again, _ := booking.DeriveEventID(back)
			require.Equal(t, id, again, "the id changed through the wire")
		}
	})
}
