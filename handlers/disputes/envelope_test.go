package disputes_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/handlers/disputes"
)

// specExample is §2's example envelope, with the payload's elisions filled.
const specExample = `{
"event_id": "evt_01JD3K5Z8Q3W6X2N4P7R9T1V0B",
"event_type": "DisputeRaised",
"event_version": 1,
"aggregate_type": "dispute",
"aggregate_id": "dsp_01JD3K5Z7M2B8C4D6F8H0J2K4L",
"occurred_at": "2026-11-12T09:14:03.512Z",
"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
"payload": { "txn_id": "txn_01JD3K5Z7M2B8C4D6F8H0J2K4M", "reason_code": "credit_not_received", "tat_due_at": "2026-11-17T09:14:03.512Z" }
}`

func TestSpecExample(t *testing.T) {
	t.Parallel()
	require.NoError(t, disputes.Validate([]byte(specExample)))
	env, ev, err := disputes.DecodeEvent([]byte(specExample))
	require.NoError(t, err)
	assert.Equal(t, "evt_01JD3K5Z8Q3W6X2N4P7R9T1V0B", env.EventID)
	assert.Equal(t, disputes.EventDisputeRaised, env.EventType)
	assert.Equal(t, 1, env.EventVersion)
	assert.Equal(t, "dsp_01JD3K5Z7M2B8C4D6F8H0J2K4L", env.AggregateID)
	assert.Equal(t, time.Date(2026, 11, 12, 9, 14, 3, 512e6, time.UTC), env.OccurredAt)
	assert.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", env.TraceID)
	require.NotNil(t, ev.DisputeRaised)
	assert.Equal(t, "credit_not_received", ev.DisputeRaised.ReasonCode)
	require.NotNil(t, ev.DisputeRaised.TATDueAt)
	assert.Equal(t, time.Date(2026, 11, 17, 9, 14, 3, 512e6, time.UTC), *ev.DisputeRaised.TATDueAt)
}

func TestEncodeRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 12, 9, 14, 3, 512_345_678, time.FixedZone("IST", 19800))
	env, err := disputes.NewEnvelope(disputes.Event{TransactionFlagged: &disputes.TransactionFlagged{TxnID: "txn_1", RiskScore: 81.5, Reason: "velocity"}},
		"txn_1", "", at)
	require.NoError(t, err)
	assert.True(t, disputes.IsEventID(env.EventID), env.EventID)
	msg, err := disputes.Message(env)
	require.NoError(t, err)
	assert.Equal(t, env.EventID, msg.UUID, "message UUID = event_id")
	assert.Equal(t, env.EventID, msg.Metadata.Get(disputes.EventIDKey), "attribute = a copy of event_id")
	assert.Equal(t, env.TraceID, msg.Metadata.Get(metadata.TraceIDKey))
	assert.Contains(t, string(msg.Payload), `"occurred_at":"2026-11-12T03:44:03.512Z"`, "UTC, milliseconds")
	require.NoError(t, disputes.Validate(msg.Payload))

	got, ev, err := disputes.DecodeEvent(msg.Payload)
	require.NoError(t, err)
	assert.Equal(t, env.EventID, got.EventID)
	assert.Equal(t, disputes.AggregateTransaction, got.AggregateType)
	assert.Equal(t, &disputes.TransactionFlagged{TxnID: "txn_1", RiskScore: 81.5, Reason: "velocity"}, ev.TransactionFlagged)
}

func TestEncodeIsStrict(t *testing.T) {
	t.Parallel()
	good := func() disputes.Envelope {
		env, err := disputes.NewEnvelope(disputes.Event{DocumentIngested: &disputes.DocumentIngested{Bucket: "b", Key: "k"}}, "doc_1", "", time.Now())
		require.NoError(t, err)
		return env
	}
	_, err := disputes.Encode(good())
	require.NoError(t, err)
	cases := map[string]func(*disputes.Envelope){
		"event id not evt_+ULID":   func(e *disputes.Envelope) { e.EventID = "evt_123" },
		"event id lower case":      func(e *disputes.Envelope) { e.EventID = strings.ToLower(e.EventID) },
		"no event id":              func(e *disputes.Envelope) { e.EventID = "" },
		"unknown type":             func(e *disputes.Envelope) { e.EventType = "DisputeClosed" },
		"version 2":                func(e *disputes.Envelope) { e.EventVersion = 2 },
		"no aggregate id":          func(e *disputes.Envelope) { e.AggregateID = "" },
		"wrong aggregate type":     func(e *disputes.Envelope) { e.AggregateType = "dispute" },
		"no occurred_at":           func(e *disputes.Envelope) { e.OccurredAt = time.Time{} },
		"trace id not W3C":         func(e *disputes.Envelope) { e.TraceID = "req-1" },
		"no trace id":              func(e *disputes.Envelope) { e.TraceID = "" },
		"unknown payload field":    func(e *disputes.Envelope) { e.Payload = json.RawMessage(`{"bucket":"b","key":"k","secret":"x"}`) },
		"missing payload field":    func(e *disputes.Envelope) { e.Payload = json.RawMessage(`{"bucket":"b"}`) },
		"payload not an object":    func(e *disputes.Envelope) { e.Payload = json.RawMessage(`[]`) },
		"payload missing entirely": func(e *disputes.Envelope) { e.Payload = nil },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env := good()
			mutate(&env)
			_, err := disputes.Encode(env)
			require.ErrorIs(t, err, disputes.ErrInvalidEnvelope)
		})
	}
}

func TestDecodeIsLenient(t *testing.T) {
	t.Parallel()
	body := `{"event_id":"foreign-42","event_type":"TransactionFlagged","event_version":1,"aggregate_type":"transaction",
		"aggregate_id":"t1","occurred_at":"2026-11-12T09:14:03+05:30","payload":{"txn_id":"t1","risk_score":10,"extra":{"secret":"s"}},
		"producer":"someone else"}`
	env, ev, err := disputes.DecodeEvent([]byte(body))
	require.NoError(t, err)
	assert.Equal(t, "foreign-42", env.EventID, "a foreign id is accepted as the dedupe key")
	assert.Empty(t, env.TraceID, "trace_id is optional on consume")
	assert.Equal(t, time.Date(2026, 11, 12, 3, 44, 3, 0, time.UTC), env.OccurredAt)
	assert.InDelta(t, 10, ev.TransactionFlagged.RiskScore, 0)
	require.Error(t, disputes.Validate([]byte(body)), "but our publishers refuse it")
}

func TestDecodeRejects(t *testing.T) {
	t.Parallel()
	base := map[string]any{}
	require.NoError(t, json.Unmarshal([]byte(specExample), &base))
	with := func(k string, v any) []byte {
		m := map[string]any{}
		for kk, vv := range base {
			m[kk] = vv
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		b, err := json.Marshal(m)
		require.NoError(t, err)
		return b
	}
	cases := map[string][]byte{
		"null":                 []byte(`null`),
		"array":                []byte(`[]`),
		"not json":             []byte(`{"event_id":`),
		"empty":                nil,
		"no event_id":          with("event_id", nil),
		"empty event_id":       with("event_id", ""),
		"numeric event_id":     with("event_id", 7),
		"huge event_id":        with("event_id", strings.Repeat("e", 129)),
		"no event_type":        with("event_type", nil),
		"version not a number": with("event_version", "1"),
		"version fraction":     with("event_version", 1.5),
		"no occurred_at":       with("occurred_at", nil),
		"bad occurred_at":      with("occurred_at", "yesterday"),
		"no payload":           with("payload", nil),
		"payload null":         with("payload", json.RawMessage(`null`)),
		"payload string":       with("payload", "x"),
		"no aggregate_id":      with("aggregate_id", nil),
		"trace_id not string":  with("trace_id", 5),
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, _, err := disputes.DecodeEvent(body)
			require.ErrorIs(t, err, disputes.ErrInvalidEnvelope)
		})
	}
}

func TestDecodeEventRejects(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		typ, payload string
		unknown      bool
		want         string // the field the error names
	}{
		"unknown type":              {typ: "DisputeClosed", payload: `{}`, unknown: true},
		"dispute without txn_id":    {typ: "DisputeRaised", payload: `{"reason_code":"x"}`, want: "field payload.txn_id: required"},
		"dispute bad tat":           {typ: "DisputeRaised", payload: `{"txn_id":"t","reason_code":"x","tat_due_at":"soon"}`, want: "field payload.tat_due_at: not a valid date-time"},
		"flag without score":        {typ: "TransactionFlagged", payload: `{"txn_id":"t"}`, want: "field payload.risk_score: required"},
		"flag score over 100":       {typ: "TransactionFlagged", payload: `{"txn_id":"t","risk_score":101}`, want: "field payload.risk_score: must be <= 100"},
		"flag score negative":       {typ: "TransactionFlagged", payload: `{"txn_id":"t","risk_score":-1}`, want: "field payload.risk_score: must be >= 0"},
		"document without key":      {typ: "DocumentIngested", payload: `{"bucket":"b"}`, want: "field payload.key: required"},
		"document with numeric key": {typ: "DocumentIngested", payload: `{"bucket":"b","key":1}`, want: "field payload.key: want string, got number"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			body := `{"event_id":"e1","event_type":"` + c.typ + `","event_version":1,"aggregate_type":"x","aggregate_id":"a",
				"occurred_at":"2026-11-12T09:14:03.512Z","payload":` + c.payload + `}`
			_, _, err := disputes.DecodeEvent([]byte(body))
			require.ErrorIs(t, err, disputes.ErrInvalidEnvelope)
			assert.Equal(t, c.unknown, errors.Is(err, disputes.ErrUnknownEventType))
			assert.Equal(t, failure.Transient, failure.Of(err), "the codec does not classify; the handler does")
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

// TestDecodeEventIgnoresUnknownFields: per event type, an unknown payload
// field is accepted on consume and not kept; our publishers may not send it.
func TestDecodeEventIgnoresUnknownFields(t *testing.T) {
	t.Parallel()
	for typ, payload := range map[string]string{
		"DisputeRaised":      `{"txn_id":"t","reason_code":"x","zz":"forward-me"}`,
		"TransactionFlagged": `{"txn_id":"t","risk_score":1,"zz":"forward-me"}`,
		"DocumentIngested":   `{"bucket":"b","key":"k","zz":"forward-me"}`,
	} {
		body := `{"event_id":"e1","event_type":"` + typ + `","event_version":1,"aggregate_type":"x","aggregate_id":"a",
			"occurred_at":"2026-11-12T09:14:03.512Z","payload":` + payload + `}`
		_, ev, err := disputes.DecodeEvent([]byte(body))
		require.NoError(t, err, typ)
		out, err := json.Marshal(ev)
		require.NoError(t, err)
		assert.NotContains(t, string(out), "forward-me", typ)
		require.Error(t, disputes.Validate([]byte(body)), typ)
	}
}

func TestValidateIsStrict(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{
		"unknown envelope field": strings.Replace(specExample, `"event_version": 1,`, `"event_version": 1, "extra": 1,`, 1),
		"no trace_id":            strings.Replace(specExample, `"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",`, ``, 1),
		"occurred_at not ms":     strings.Replace(specExample, `09:14:03.512Z`, `09:14:03Z`, 1),
		"occurred_at not UTC":    strings.Replace(specExample, `09:14:03.512Z`, `14:44:03.512+05:30`, 1),
		"unknown payload field":  strings.Replace(specExample, `"reason_code"`, `"note":"x","reason_code"`, 1),
		"foreign event id":       strings.Replace(specExample, `evt_01JD3K5Z8Q3W6X2N4P7R9T1V0B`, `evt-1`, 1),
	} {
		require.Error(t, disputes.Validate([]byte(body)), name)
	}
}

func TestNewIDs(t *testing.T) {
	t.Parallel()
	a, b := disputes.NewEventID(time.Now()), disputes.NewEventID(time.Now())
	assert.NotEqual(t, a, b)
	assert.True(t, disputes.IsEventID(a))
	assert.Len(t, a, len("evt_")+26)
	assert.True(t, strings.HasPrefix(disputes.NewDisputeID(), "dsp_"))
	assert.False(t, disputes.IsEventID("evt_01JD3K5Z8Q3W6X2N4P7R9T1V0L"), "L is not Crockford base 32")
}
