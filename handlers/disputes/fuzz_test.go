package disputes_test

import (
	"testing"

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
		if env.EventID == "" || len(env.EventID) > disputes.MaxIDLength || env.AggregateID == "" || env.OccurredAt.IsZero() {
			t.Fatalf("accepted an envelope without its required fields: %+v", env)
		}
		set := 0
		for _, ok := range []bool{ev.DisputeRaised != nil, ev.TransactionFlagged != nil, ev.DocumentIngested != nil} {
			if ok {
				set++
			}
		}
		if set != 1 {
			t.Fatalf("%d events set", set)
		}
		_ = disputes.Validate(body) // must not panic either
	})
}

// FuzzDecodeS3Notification: no notification panics the ingest-worker's
// decoder, and every record it returns names a bucket and a key.
func FuzzDecodeS3Notification(f *testing.F) {
	f.Add([]byte(s3Example))
	f.Fuzz(func(t *testing.T, body []byte) {
		refs, err := disputes.DecodeS3Notification(body)
		if err != nil {
			return
		}
		for _, r := range refs {
			if r.Bucket == "" || r.Key == "" {
				t.Fatalf("record without bucket or key: %+v", r)
			}
		}
	})
}
