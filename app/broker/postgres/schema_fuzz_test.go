package postgres

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"
	"unicode/utf8"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/metadata"
)

// fakeRow is a claimed row as SelectQuery returns it: offset, uuid, payload,
// metadata, attempts, first_failed_at.
type fakeRow struct {
	offset      int64
	uuid        string
	payload     []byte
	metadata    []byte
	attempts    int64
	firstFailed *time.Time
}

func (r fakeRow) Scan(dest ...any) error {
	if len(dest) != 6 {
		return fmt.Errorf("scan into %d destinations, the row has 6 columns", len(dest))
	}
	*dest[0].(*int64) = r.offset
	*dest[1].(*string) = r.uuid
	*dest[2].(*[]byte) = r.payload
	*dest[3].(*[]byte) = r.metadata
	*dest[4].(*int64) = r.attempts
	*dest[5].(**time.Time) = r.firstFailed
	return nil
}

// FuzzUnmarshalMessage feeds UnmarshalMessage whatever the metadata column
// may hold (anything a foreign writer puts in a JSON column, and more).
// Properties: it never fails or panics, so no row can block the queue; the
// metadata is never nil; the delivery keys are the row's alone; a column that
// is a JSON object of strings decodes exactly; and what was delivered, stored
// again by InsertQuery, decodes to the same metadata. Seeds are in
// testdata/fuzz/FuzzUnmarshalMessage.
func FuzzUnmarshalMessage(f *testing.F) {
	s := queueSchema{schema: "s", prefix: "queue_"}
	f.Fuzz(func(t *testing.T, raw []byte, attempts int64, failed bool, failedSec, failedNsec int64) {
		row := fakeRow{offset: 1, uuid: "u", payload: []byte("p"), metadata: raw, attempts: attempts}
		writable := false
		if failed {
			at := time.Unix(failedSec, failedNsec).In(time.FixedZone("elsewhere", 3600))
			row.firstFailed = &at
			writable = at.UTC().Year() >= 0 && at.UTC().Year() <= 9999
		}
		r, err := s.UnmarshalMessage(wsql.UnmarshalMessageParams{Row: row})
		require.NoError(t, err)
		msg := r.Msg
		require.NotNil(t, msg)
		require.NotNil(t, msg.Metadata)
		require.Equal(t, "u", msg.UUID)
		require.Equal(t, strconv.FormatInt(attempts, 10), msg.Metadata[metadata.AttemptKey])
		require.NotContains(t, msg.Metadata, metadata.NackDelayKey, "a stored nack delay is not delivered")
		got, ok := msg.Metadata[metadata.FirstFailureKey]
		require.Equal(t, writable, ok, "first failure iff the column is set (to a time RFC 3339 can write)")
		if ok {
			at, err := time.Parse(time.RFC3339Nano, got)
			require.NoError(t, err, got)
			require.True(t, at.Equal(*row.firstFailed), "%s != %s", at, row.firstFailed)
		}

		var strs map[string]string
		if json.Unmarshal(raw, &strs) == nil && strs != nil {
			for k, v := range strs {
				if k != metadata.AttemptKey && k != metadata.FirstFailureKey && k != metadata.NackDelayKey {
					require.Equal(t, v, msg.Metadata[k], "key %q", k)
				}
			}
		}
		for k, v := range msg.Metadata {
			require.True(t, utf8.ValidString(k) && utf8.ValidString(v), "%q: %q", k, v)
		}

		// Stored again (a handler forwarding what it received) and read back.
		q, err := s.InsertQuery(wsql.InsertQueryParams{Topic: "t", Msgs: message.Messages{msg}})
		require.NoError(t, err)
		stored := q.Args[2].([]string)[0]
		back, err := s.UnmarshalMessage(wsql.UnmarshalMessageParams{Row: fakeRow{uuid: "u", metadata: []byte(stored)}})
		require.NoError(t, err)
		want := message.Metadata{}
		for k, v := range msg.Metadata {
			if k != metadata.AttemptKey && k != metadata.FirstFailureKey {
				want[k] = v
			}
		}
		want[metadata.AttemptKey] = "0"
		require.Equal(t, want, back.Msg.Metadata)
	})
}
