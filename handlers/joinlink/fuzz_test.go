package joinlink_test

import (
	"testing"

	"github.com/stretchr/testify/require"

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
		const invalid = "accepted an invalid message: %+v"
		require.Equal(t, joinlink.SubType, m.SubType, invalid, m)
		require.Positive(t, m.Data.ProgramSessionID, invalid, m)
		require.GreaterOrEqual(t, m.Data.BatchSize, 0, invalid, m)
		require.GreaterOrEqual(t, m.Data.ActorUserID, int64(0), invalid, m)
		require.LessOrEqual(t, len(m.Data.Role), joinlink.MaxRoleLength, invalid, m)
		if joinlink.Validate(body) == nil {
			again, err := joinlink.Encode(m)
			require.NoError(t, err, "Validate accepted what Encode refuses")
			m2, err := joinlink.Decode(again)
			require.NoError(t, err, "round trip: %+v", m)
			require.Equal(t, m.Data, m2.Data, "round trip: %+v vs %+v", m, m2)
			require.True(t, m2.Timestamp.Equal(m.Timestamp.Truncate(1e6)), "round trip: %+v vs %+v", m, m2)
		}
	})
}
