package joinlink_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/handlers/joinlink"
)

// specExample is §API Contracts 2's message with its placeholders filled.
const specExample = `{ "queueType": "EVENT", "subType": "JOIN_LINK_GENERATION", "timestamp": "2026-12-01T10:00:00.000Z", "correlationId": "join-link-42", "data": { "programSessionId": 42, "role": "attendee", "batchSize": 100, "actorUserId": 7 } }`

func TestEncodeDecode(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	m := joinlink.NewMessage(joinlink.Data{ProgramSessionID: 42, Role: "attendee", BatchSize: 100, ActorUserID: 7}, at)
	body, err := joinlink.Encode(m)
	require.NoError(t, err)
	assert.JSONEq(t, specExample, string(body))
	require.NoError(t, joinlink.Validate(body))
	got, err := joinlink.Decode(body)
	require.NoError(t, err)
	assert.Equal(t, m, got)
	assert.Equal(t, "join-link-42", joinlink.ScheduleName(42))

	minimal, err := joinlink.Encode(joinlink.NewMessage(joinlink.Data{ProgramSessionID: 1}, at))
	require.NoError(t, err)
	assert.JSONEq(t, `{"queueType":"EVENT","subType":"JOIN_LINK_GENERATION","timestamp":"2026-12-01T10:00:00.000Z","correlationId":"join-link-1","data":{"programSessionId":1}}`, string(minimal), "optional fields left out")
}

func TestEncodeIsStrict(t *testing.T) {
	t.Parallel()
	ok := joinlink.NewMessage(joinlink.Data{ProgramSessionID: 3}, time.Now())
	for name, mut := range map[string]func(*joinlink.Message){
		"queueType":      func(m *joinlink.Message) { m.QueueType = "COMMAND" },
		"subType":        func(m *joinlink.Message) { m.SubType = "OTHER" },
		"no timestamp":   func(m *joinlink.Message) { m.Timestamp = time.Time{} },
		"correlationId":  func(m *joinlink.Message) { m.CorrelationID = "join-link-4" },
		"no session":     func(m *joinlink.Message) { m.Data.ProgramSessionID = 0; m.CorrelationID = "join-link-0" },
		"negative batch": func(m *joinlink.Message) { m.Data.BatchSize = -1 },
		"negative actor": func(m *joinlink.Message) { m.Data.ActorUserID = -1 },
		"role too long":  func(m *joinlink.Message) { m.Data.Role = string(make([]byte, 65)) },
	} {
		m := ok
		mut(&m)
		_, err := joinlink.Encode(m)
		require.ErrorIs(t, err, joinlink.ErrInvalidMessage, name)
	}
}

func TestDecodeIsLenient(t *testing.T) {
	t.Parallel()
	m, err := joinlink.Decode([]byte(`{"subType":"JOIN_LINK_GENERATION","data":{"programSessionId":9,"secret":"x"},"extra":{"a":1}}`))
	require.NoError(t, err, "unknown fields ignored; queueType, timestamp, correlationId optional")
	assert.Equal(t, joinlink.Data{ProgramSessionID: 9}, m.Data)
	assert.True(t, m.Timestamp.IsZero())
	m, err = joinlink.Decode([]byte(`{"subType":"JOIN_LINK_GENERATION","timestamp":"2026-12-01T10:00:00+05:30","data":{"programSessionId":9.0,"batchSize":0}}`))
	require.NoError(t, err)
	assert.Equal(t, time.Date(2026, 12, 1, 4, 30, 0, 0, time.UTC), m.Timestamp)
	assert.Equal(t, int64(9), m.Data.ProgramSessionID)
	require.Error(t, joinlink.Validate([]byte(`{"subType":"JOIN_LINK_GENERATION","data":{"programSessionId":9,"secret":"x"}}`)), "publish is strict")

	for name, body := range map[string]string{
		"not an object":        `[1]`,
		"null":                 `null`,
		"no subType":           `{"data":{"programSessionId":1}}`,
		"wrong subType":        `{"subType":"OTHER","data":{"programSessionId":1}}`,
		"wrong queueType":      `{"queueType":"CMD","subType":"JOIN_LINK_GENERATION","data":{"programSessionId":1}}`,
		"no data":              `{"subType":"JOIN_LINK_GENERATION"}`,
		"data not object":      `{"subType":"JOIN_LINK_GENERATION","data":"x"}`,
		"no programSessionId":  `{"subType":"JOIN_LINK_GENERATION","data":{}}`,
		"string id":            `{"subType":"JOIN_LINK_GENERATION","data":{"programSessionId":"1"}}`,
		"null id":              `{"subType":"JOIN_LINK_GENERATION","data":{"programSessionId":null}}`,
		"fractional id":        `{"subType":"JOIN_LINK_GENERATION","data":{"programSessionId":1.5}}`,
		"zero id":              `{"subType":"JOIN_LINK_GENERATION","data":{"programSessionId":0}}`,
		"bad timestamp":        `{"subType":"JOIN_LINK_GENERATION","timestamp":"yesterday","data":{"programSessionId":1}}`,
		"role not string":      `{"subType":"JOIN_LINK_GENERATION","data":{"programSessionId":1,"role":3}}`,
		"negative batchSize":   `{"subType":"JOIN_LINK_GENERATION","data":{"programSessionId":1,"batchSize":-2}}`,
		"batchSize not number": `{"subType":"JOIN_LINK_GENERATION","data":{"programSessionId":1,"batchSize":true}}`,
	} {
		_, err := joinlink.Decode([]byte(body))
		require.ErrorIs(t, err, joinlink.ErrInvalidMessage, name)
	}
	// The error names the field at fault.
	for body, want := range map[string]string{
		`{"data":{"programSessionId":1}}`:                                                               "field subType: required",
		`{"subType":"OTHER","data":{"programSessionId":1}}`:                                             "field subType: must be JOIN_LINK_GENERATION",
		`{"subType":"JOIN_LINK_GENERATION","data":{}}`:                                                  "field data.programSessionId: required",
		`{"subType":"JOIN_LINK_GENERATION","data":{"programSessionId":"1"}}`:                            "field data.programSessionId: want integer, got string",
		`{"subType":"JOIN_LINK_GENERATION","data":{"programSessionId":1,"batchSize":-2}}`:               "field data.batchSize: must be >= 0",
		`{"subType":"JOIN_LINK_GENERATION","correlationId":"x","data":{"programSessionId":1,"role":3}}`: "field data.role: want string, got number",
	} {
		_, err := joinlink.Decode([]byte(body))
		assert.EqualError(t, err, "invalid JOIN_LINK_GENERATION message: "+want, body)
	}
}
