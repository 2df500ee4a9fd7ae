package booking

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/eventpipe/eventpipe/app/jsonfields"
)

// projectionVersion is hashed with every projection: a change to the
// projection must change it, so old and new ids never mean different events.
const projectionVersion = "booking-session-event/v1"

// DeriveEventID is the spec's deriveEventId: an opaque id, deterministic in
// the event's canonical projection, so that two enqueues of the "same" event
// — from either transport — derive the same id and collapse at SQS.
//
// The projection is, in this order: the booking session id (eventpipe's
// rule, where the spec lists only "event moment, step id, data fields": two
// sessions must never collide), the event type, the event moment (UTC, to
// the millisecond — the wire's precision — whatever the offset it was
// written with), the step id and the data fields as canonical JSON (keys
// sorted at every depth, numbers normalised, insignificant whitespace
// removed; absent, null and {} data are the same). ev.EventID is
// not projected, nor is the transport. The id is "bse_" + the projection's
// SHA-256 in hex (68 characters: a valid SQS MessageDeduplicationId).
//
// The type is projected although the spec's list ("event moment, step id,
// data fields") does not name it: without it, say, a step-completed and a
// booking-completed of the same step at the same millisecond with the same
// data would collapse and one would be lost. Both transports stamp the same
// type on one logical event, so unification is unaffected.
//
// It fails only when data is not a JSON object (or null).
func DeriveEventID(ev Event) (string, error) {
	data, err := canonicalData(ev.Data)
	if err != nil {
		return "", err
	}
	projection, err := json.Marshal([]any{
		ev.BookingSessionID,
		ev.Type,
		ev.OccurredAt.UTC().Truncate(time.Millisecond).Format(occurredAtLayout),
		ev.StepID,
		json.RawMessage(data),
	})
	if err != nil {
		return "", invalid("project: %v", err)
	}
	h := sha256.New()
	h.Write([]byte(projectionVersion))
	h.Write([]byte{0})
	h.Write(projection)
	return "bse_" + hex.EncodeToString(h.Sum(nil)), nil
}

// canonicalData returns data as canonical JSON: "{}" for nil, null and an
// empty object; an error when it is not a JSON object.
func canonicalData(data json.RawMessage) ([]byte, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || jsonfields.IsNull(trimmed) {
		return []byte("{}"), nil
	}
	if trimmed[0] != '{' {
		return nil, invalid("data is not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, invalid("data is not a JSON object: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, invalid("data: trailing bytes after the object")
	}
	var buf bytes.Buffer
	if err := writeCanonical(&buf, v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeCanonical writes v with object keys sorted (encoding/json sorts map
// keys), HTML characters unescaped and numbers normalised (1, 1.0 and 1e0
// are the same number).
func writeCanonical(buf *bytes.Buffer, v any) error {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(normalise(v)); err != nil {
		return invalid("data: %v", err)
	}
	buf.Truncate(buf.Len() - 1) // Encode's newline
	return nil
}

func normalise(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = normalise(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = normalise(e)
		}
		return x
	case json.Number:
		return json.Number(canonicalNumber(x))
	default:
		return v
	}
}

// canonicalNumber writes n the way a JavaScript producer would see it (a
// float64): integers below 2^53 without a fraction, others in Go's shortest
// round-trip form. Numbers out of float64's range keep their text.
func canonicalNumber(n json.Number) string {
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsInf(f, 0) {
		return string(n)
	}
	if f == 0 {
		return "0" // -0 is 0
	}
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
