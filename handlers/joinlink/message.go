package joinlink

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/jsonfields"
)

// Queue is the event queue the schedule delivers into
// (config/topology/joinlink.yaml; the spec's "JOIN_LINK_GENERATION SQS
// queue", iface-09).
const Queue = "join-link-generation"

// The message's fixed values (§API Contracts 2).
const (
	QueueType = "EVENT"
	SubType   = "JOIN_LINK_GENERATION"
)

// SchedulePrefix is the deterministic schedule name's prefix: a session's
// schedule is "join-link-<programSessionId>" (buildScheduleName); the
// message's correlationId is the same string.
const SchedulePrefix = "join-link-"

// MaxRoleLength bounds the optional role a consumer accepts.
const MaxRoleLength = 64

// timestampLayout is what our encoder writes: RFC 3339, UTC, milliseconds.
const timestampLayout = "2006-01-02T15:04:05.000Z"

// ScheduleName returns the deterministic schedule name of a session,
// "join-link-<id>": create, update and delete of one session's schedule
// address the same schedule.
func ScheduleName(programSessionID int64) string {
	return SchedulePrefix + strconv.FormatInt(programSessionID, 10)
}

// Data is the message's data object. ProgramSessionID is required; the
// others are optional (zero = absent).
type Data struct {
	ProgramSessionID int64
	// Role passed to bulkRegister, e.g. "attendee"; "" = the generator's
	// default.
	Role string
	// BatchSize passed to bulkRegister; 0 = the generator's default.
	BatchSize int
	// ActorUserID is the admin who scheduled the generation; 0 = none (the
	// system).
	ActorUserID int64
}

// Message is the JOIN_LINK_GENERATION message (event-01, v1.0.0):
//
//	{"queueType":"EVENT","subType":"JOIN_LINK_GENERATION","timestamp":"…",
//	 "correlationId":"join-link-<id>","data":{"programSessionId":0,"role":"attendee","batchSize":0,"actorUserId":0}}
type Message struct {
	QueueType     string
	SubType       string
	Timestamp     time.Time
	CorrelationID string
	Data          Data
}

// NewMessage returns the message a session's schedule delivers at fireAt.
func NewMessage(d Data, fireAt time.Time) Message {
	return Message{QueueType: QueueType, SubType: SubType, Timestamp: fireAt.UTC(), CorrelationID: ScheduleName(d.ProgramSessionID), Data: d}
}

type wireData struct {
	ProgramSessionID int64  `json:"programSessionId"`
	Role             string `json:"role,omitempty"`
	BatchSize        int    `json:"batchSize,omitempty"`
	ActorUserID      int64  `json:"actorUserId,omitempty"`
}

type wireMessage struct {
	QueueType     string   `json:"queueType"`
	SubType       string   `json:"subType"`
	Timestamp     string   `json:"timestamp"`
	CorrelationID string   `json:"correlationId"`
	Data          wireData `json:"data"`
}

var (
	messageFields = []string{"queueType", "subType", "timestamp", "correlationId", "data"}
	dataFields    = []string{"programSessionId", "role", "batchSize", "actorUserId"}
)

// ErrInvalidMessage is wrapped by every decode and validation error: the
// processor's non-retryable class.
var ErrInvalidMessage = errors.New("invalid JOIN_LINK_GENERATION message")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidMessage, fmt.Sprintf(format, args...))
}

// Encode returns m as JSON, strictly: queueType EVENT, subType
// JOIN_LINK_GENERATION, a timestamp, correlationId = ScheduleName of the
// session, a positive programSessionId, no negative optional numbers and a
// role of at most MaxRoleLength bytes. The timestamp is written in UTC with
// milliseconds; zero optional fields are left out.
func Encode(m Message) ([]byte, error) {
	if err := checkStrict(m); err != nil {
		return nil, err
	}
	b, err := json.Marshal(wireMessage{
		QueueType: m.QueueType, SubType: m.SubType, Timestamp: m.Timestamp.UTC().Format(timestampLayout),
		CorrelationID: m.CorrelationID,
		Data:          wireData{ProgramSessionID: m.Data.ProgramSessionID, Role: m.Data.Role, BatchSize: m.Data.BatchSize, ActorUserID: m.Data.ActorUserID},
	})
	if err != nil {
		return nil, invalid("encode: %v", err)
	}
	return b, nil
}

func checkStrict(m Message) error {
	if m.QueueType != QueueType {
		return invalid("queueType %q is not %s", jsonfields.Truncate(m.QueueType, 64), QueueType)
	}
	if m.SubType != SubType {
		return invalid("subType %q is not %s", jsonfields.Truncate(m.SubType, 64), SubType)
	}
	if m.Timestamp.IsZero() {
		return invalid("timestamp is required")
	}
	if m.Data.ProgramSessionID <= 0 {
		return invalid("data.programSessionId must be a positive integer")
	}
	if want := ScheduleName(m.Data.ProgramSessionID); m.CorrelationID != want {
		return invalid("correlationId %q is not %q", jsonfields.Truncate(m.CorrelationID, 64), want)
	}
	return checkOptional(m.Data)
}

func checkOptional(d Data) error {
	if d.BatchSize < 0 {
		return invalid("data.batchSize must not be negative")
	}
	if d.ActorUserID < 0 {
		return invalid("data.actorUserId must not be negative")
	}
	if len(d.Role) > MaxRoleLength {
		return invalid("data.role longer than %d bytes", MaxRoleLength)
	}
	return nil
}

// Decode decodes a message leniently: unknown fields (of the message and of
// data) are ignored and never kept. subType must be JOIN_LINK_GENERATION and
// queueType, when present, EVENT ("invalid type"); data.programSessionId is
// required (a positive integer); timestamp (RFC 3339), correlationId, role,
// batchSize and actorUserId are optional but must have their types when
// present. Errors wrap ErrInvalidMessage.
func Decode(body []byte) (Message, error) {
	fields, err := object(body, "body")
	if err != nil {
		return Message{}, err
	}
	var m Message
	if m.SubType, err = str(fields, "subType", true); err != nil {
		return Message{}, err
	}
	if m.SubType != SubType {
		return Message{}, invalid("subType %q is not %s", jsonfields.Truncate(m.SubType, 64), SubType)
	}
	if m.QueueType, err = str(fields, "queueType", false); err != nil {
		return Message{}, err
	}
	if m.QueueType != "" && m.QueueType != QueueType {
		return Message{}, invalid("queueType %q is not %s", jsonfields.Truncate(m.QueueType, 64), QueueType)
	}
	ts, err := str(fields, "timestamp", false)
	if err != nil {
		return Message{}, err
	}
	if ts != "" {
		t, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			return Message{}, invalid("timestamp %q is not an RFC 3339 time", jsonfields.Truncate(ts, 64))
		}
		m.Timestamp = t.UTC()
	}
	if m.CorrelationID, err = str(fields, "correlationId", false); err != nil {
		return Message{}, err
	}
	if len(m.CorrelationID) > 128 {
		return Message{}, invalid("correlationId longer than 128 bytes")
	}
	raw, ok := fields["data"]
	if !ok {
		return Message{}, invalid("data is required")
	}
	data, err := object(raw, "data")
	if err != nil {
		return Message{}, err
	}
	if _, ok := data["programSessionId"]; !ok {
		return Message{}, invalid("data.programSessionId is required")
	}
	if m.Data.ProgramSessionID, err = integer(data, "programSessionId"); err != nil {
		return Message{}, err
	}
	if m.Data.ProgramSessionID <= 0 {
		return Message{}, invalid("data.programSessionId must be a positive integer")
	}
	if m.Data.Role, err = str(data, "role", false); err != nil {
		return Message{}, err
	}
	bs, err := integer(data, "batchSize")
	if err != nil {
		return Message{}, err
	}
	if bs > math.MaxInt32 {
		return Message{}, invalid("data.batchSize too large")
	}
	m.Data.BatchSize = int(bs)
	if m.Data.ActorUserID, err = integer(data, "actorUserId"); err != nil {
		return Message{}, err
	}
	if err := checkOptional(m.Data); err != nil {
		return Message{}, err
	}
	return m, nil
}

// Validate is the strict check `eventpipe publish` runs for the queue: what
// Encode requires, on a body (no unknown fields, every field present).
func Validate(body []byte) error {
	m, err := Decode(body)
	if err != nil {
		return err
	}
	if err := strictObject(body, "body", messageFields...); err != nil {
		return err
	}
	fields, _ := object(body, "body")
	if err := strictObject(fields["data"], "data", dataFields...); err != nil {
		return err
	}
	for _, k := range []string{"queueType", "timestamp", "correlationId"} {
		if _, ok := fields[k]; !ok {
			return invalid("%s is required", k)
		}
	}
	return checkStrict(m)
}

// NewWatermillMessage returns m encoded (strictly) as a message with a new
// UUID and the correlationId as x-correlation-id metadata.
func NewWatermillMessage(m Message) (*message.Message, error) {
	body, err := Encode(m)
	if err != nil {
		return nil, err
	}
	msg := message.NewMessage(watermill.NewUUID(), body)
	msg.Metadata.Set(CorrelationIDKey, m.CorrelationID)
	return msg, nil
}

// CorrelationIDKey is the metadata key carrying the message's correlationId.
const CorrelationIDKey = "correlation_id"

// --- JSON helpers ---------------------------------------------------------

// object splits a JSON object into its fields; anything else is invalid.
func object(b []byte, what string) (map[string]json.RawMessage, error) {
	fields, err := jsonfields.Object(b, what)
	if err != nil {
		return nil, invalid("%s", err)
	}
	return fields, nil
}

func str(fields map[string]json.RawMessage, key string, required bool) (string, error) {
	s, err := jsonfields.String(fields, key, required)
	if err != nil {
		return "", invalid("%s", err)
	}
	return s, nil
}

// integer reads an optional JSON integer (absent = 0). 12.0 is accepted,
// 12.5, strings and null are not.
func integer(fields map[string]json.RawMessage, key string) (int64, error) {
	raw, ok := fields[key]
	if !ok {
		return 0, nil
	}
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || (t[0] != '-' && (t[0] < '0' || t[0] > '9')) {
		return 0, invalid("data.%s must be an integer", key)
	}
	var n json.Number
	dec := json.NewDecoder(bytes.NewReader(t))
	dec.UseNumber()
	if err := dec.Decode(&n); err != nil || jsonfields.IsNull(raw) {
		return 0, invalid("data.%s must be an integer", key)
	}
	if i, err := n.Int64(); err == nil {
		return i, nil
	}
	f, err := n.Float64()
	if err != nil || f != math.Trunc(f) || f > math.MaxInt64/2 || f < math.MinInt64/2 {
		return 0, invalid("data.%s must be an integer", key)
	}
	return int64(f), nil
}

// strictObject refuses keys other than allowed: our publishers are strict
// (eventpipe's rule: strict on publish, lenient on consume).
func strictObject(b []byte, what string, allowed ...string) error {
	fields, err := object(b, what)
	if err != nil {
		return err
	}
	if k, ok := jsonfields.Unknown(fields, allowed...); ok {
		return invalid("%s: unknown field %q", what, jsonfields.Truncate(k, 64))
	}
	return nil
}
