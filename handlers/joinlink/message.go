package joinlink

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/jsonfields"
	"github.com/eventpipe/eventpipe/app/schemas"
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

// ErrInvalidMessage is wrapped by every decode and validation error: the
// processor's non-retryable class.
var ErrInvalidMessage = errors.New("invalid JOIN_LINK_GENERATION message")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidMessage, fmt.Sprintf(format, args...))
}

// Encode returns m as JSON, strictly: the message's strict schema (queueType
// EVENT, subType JOIN_LINK_GENERATION, a timestamp, a positive
// programSessionId, no negative optional numbers, a role of at most
// MaxRoleLength characters, no unknown field) and correlationId = ScheduleName
// of the session, a cross-field rule that stays in Go. The timestamp is
// written in UTC with milliseconds; zero optional fields are left out.
func Encode(m Message) ([]byte, error) {
	if m.Timestamp.IsZero() {
		return nil, invalid("field timestamp: required")
	}
	b, err := json.Marshal(wireMessage{
		QueueType: m.QueueType, SubType: m.SubType, Timestamp: m.Timestamp.UTC().Format(timestampLayout),
		CorrelationID: m.CorrelationID,
		Data:          wireData{ProgramSessionID: m.Data.ProgramSessionID, Role: m.Data.Role, BatchSize: m.Data.BatchSize, ActorUserID: m.Data.ActorUserID},
	})
	if err != nil {
		return nil, invalid("encode: %v", err)
	}
	if err := Validate(b); err != nil {
		return nil, err
	}
	return b, nil
}

// Decode decodes a message leniently against its lenient schema: unknown
// fields (of the message and of data) are ignored and never kept. subType
// must be JOIN_LINK_GENERATION and queueType, when present, EVENT ("invalid
// type"); data.programSessionId is required (a positive integer); timestamp
// (RFC 3339), correlationId, role, batchSize and actorUserId are optional
// but must have their types when present (the spec: "programSessionId
// required; others optional", so the schema's other requirements, and
// correlationId's shape, are waived). Errors wrap ErrInvalidMessage and name
// the field.
func Decode(body []byte) (Message, error) { return decode(body, schemas.Lenient) }

func decode(body []byte, mode schemas.Mode) (Message, error) {
	cat, err := schemas.Default()
	if err != nil {
		return Message{}, invalid("schemas: %v", err)
	}
	sch, ok := cat.Message("joinlink", SubType)
	if !ok {
		return Message{}, invalid("schemas: no %s", SubType)
	}
	if err := sch.CheckWaiving(body, mode, consumerWaives); err != nil {
		return Message{}, invalid("%v", err)
	}
	var w struct {
		QueueType     string `json:"queueType"`
		SubType       string `json:"subType"`
		Timestamp     string `json:"timestamp"`
		CorrelationID string `json:"correlationId"`
		Data          struct {
			ProgramSessionID json.Number `json:"programSessionId"`
			Role             string      `json:"role"`
			BatchSize        json.Number `json:"batchSize"`
			ActorUserID      json.Number `json:"actorUserId"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &w); err != nil {
		return Message{}, invalid("%v", err)
	}
	m := Message{QueueType: w.QueueType, SubType: w.SubType, CorrelationID: w.CorrelationID, Data: Data{Role: w.Data.Role}}
	if w.Timestamp != "" {
		t, err := time.Parse(time.RFC3339Nano, w.Timestamp)
		if err != nil {
			return Message{}, invalid("field timestamp: not an RFC 3339 time")
		}
		m.Timestamp = t.UTC()
	}
	// The schema said they are integers in range; 12.0 is one.
	m.Data.ProgramSessionID = integer(w.Data.ProgramSessionID)
	m.Data.BatchSize = int(integer(w.Data.BatchSize))
	m.Data.ActorUserID = integer(w.Data.ActorUserID)
	return m, nil
}

// consumerWaives reports whether the consumer takes what the contract
// refuses: queueType, timestamp and correlationId may be absent, and
// correlationId of any shape (the spec: "programSessionId required; others
// optional").
func consumerWaives(p schemas.FieldError) bool {
	switch p.Field {
	case "queueType", "timestamp":
		return p.Keyword == "required"
	case "correlationId":
		return p.Keyword == "required" || p.Keyword == "pattern"
	}
	return false
}

// Validate is the strict check `eventpipe publish` runs for the queue and
// Encode runs on every message of ours: the strict schema (no unknown
// fields, every field present) and correlationId = ScheduleName of the
// session.
func Validate(body []byte) error {
	m, err := decode(body, schemas.Strict)
	if err != nil {
		return err
	}
	if want := ScheduleName(m.Data.ProgramSessionID); m.CorrelationID != want {
		return invalid("correlationId %q is not %q", jsonfields.Truncate(m.CorrelationID, 64), want)
	}
	return nil
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

// integer is n, an integer the schema checked (absent = 0; 12.0 is 12).
func integer(n json.Number) int64 {
	if n == "" {
		return 0
	}
	if i, err := n.Int64(); err == nil {
		return i
	}
	f, _ := n.Float64()
	return int64(f)
}
