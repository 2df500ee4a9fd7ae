package booking_test

import (
	"testing"

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
		if ev.BookingSessionID == "" || ev.Type == "" || ev.OccurredAt.IsZero() ||
			len(ev.EventID) > booking.MaxIDLength || len(ev.BookingSessionID) > booking.MaxIDLength {
			t.Fatalf("accepted an event without its required fields: %+v", ev)
		}
		id, err := booking.DeriveEventID(ev)
		if err != nil {
			t.Fatalf("accepted data DeriveEventID refuses: %v", err)
		}
		ev2, err := booking.Decode(body)
		if err != nil {
			t.Fatal(err)
		}
		if id2, _ := booking.DeriveEventID(ev2); id2 != id {
			t.Fatalf("not deterministic: %s, %s", id, id2)
		}
		ev.EventID = id
		if enc, err := booking.Encode(ev); err == nil {
			back, err := booking.Decode(enc)
			if err != nil {
				t.Fatalf("decode(encode): %v", err)
			}
			if again, _ := booking.DeriveEventID(back); again != id {
				t.Fatalf("the id changed through the wire: %s → %s", id, again)
			}
		}
	})
}
