package disputes_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/handlers/disputes"
)

// FuzzDecodeEvent: no input panics the consumer's decoder, and whatever it
// accepts has the fields the handler relies on. Seeds: testdata/fuzz.
func FuzzDecodeEvent(f *testing.F) {
	f.Add([]byte(specExample))
	f.Fuzz(func(t *testing.T, body []byte) {
		env, ev, err := disputes.DecodeEvent(body)
		if err != nil {
			return
		}
		const required = "accepted an envelope without its required fields: %+v"
		require.NotEmpty(t, env.EventID, required, env)
		require.LessOrEqual(t, len(env.EventID), disputes.MaxIDLength, required, env)
		require.NotEmpty(t, env.AggregateID, required, env)
		require.False(t, env.OccurredAt.IsZero(), required, env)
		set := 0
		for _, ok := range []bool{ev.DisputeRaised != nil, ev.TransactionFlagged != nil, ev.DocumentIngested != nil} {
			if ok {
				set++
			}
		}
		require.Equal(t, 1, set, "events set")
		_ = disputes.Validate(body) // must not panic either
	})
}

// FuzzDecodeS3Notification: no notification panics the ingest-worker's
// decoder, and every ObjectCreated record it returns names a bucket and a
// key.
func FuzzDecodeS3Notification(f *testing.F) {
	f.Add([]byte(s3Example))
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := disputes.DecodeS3Notification(body)
		if err != nil {
			return
		}
		for _, r := range ev.Records {
			if !r.Created() {
				continue
			}
			require.NotEmpty(t, r.Bucket, "record without bucket or key: %+v", r)
			require.NotEmpty(t, r.Key, "record without bucket or key: %+v", r)
		}
	})
}
