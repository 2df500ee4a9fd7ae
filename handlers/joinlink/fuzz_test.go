package joinlink_test

import (
	"testing"

	"github.com/eventpipe/eventpipe/handlers/joinlink"
)

// FuzzDecode: no input panics the processor's decoder, whatever it accepts
// has the fields the processor relies on, and what Validate accepts
// re-encodes to the same message. Seeds: below and testdata/fuzz.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(specExample))
	f.Add([]byte(`{"subType":"JOIN_LINK_GENERATION","data":{"programSessionId":1}}`))
	f.Add([]byte(`{"subType":"JOIN_LINK_GENERATION","data":{"programSessionId":1e3,"batchSize":2.0}}`))
	f.Add([]byte(`{"subType":"JOIN_LINK_GENERATION","data":{"programSessionId":"1"}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := joinlink.Decode(body)
		if err != nil {
			return
		}
		if m.SubType != joinlink.SubType || m.Data.ProgramSessionID <= 0 || m.Data.BatchSize < 0 || m.Data.ActorUserID < 0 || len(m.Data.Role) > joinlink.MaxRoleLength {
			t.Fatalf("accepted an invalid message: %+v", m)
		}
		if joinlink.Validate(body) == nil {
			again, err := joinlink.Encode(m)
			if err != nil {
				t.Fatalf("Validate accepted what Encode refuses: %v", err)
			}
			m2, err := joinlink.Decode(again)
			if err != nil || m2.Data != m.Data || !m2.Timestamp.Equal(m.Timestamp.Truncate(1e6)) {
				t.Fatalf("round trip: %+v vs %+v (%v)", m, m2, err)
			}
		}
	})
}
