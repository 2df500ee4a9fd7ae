package jsonfields_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/jsonfields"
)

func TestObject(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{``, `null`, `[]`, `"x"`, `{`} {
		_, err := jsonfields.Object([]byte(bad), "body")
		assert.ErrorContains(t, err, "body is not a JSON object", bad)
	}
	f, err := jsonfields.Object([]byte(` {"a":1,"b":null} `), "body")
	require.NoError(t, err)
	assert.True(t, jsonfields.IsNull(f["b"]))
	assert.False(t, jsonfields.IsNull(f["a"]))
	k, ok := jsonfields.Unknown(f, "a")
	assert.True(t, ok)
	assert.Equal(t, "b", k)
	_, ok = jsonfields.Unknown(map[string]json.RawMessage{"a": nil}, "a", "b")
	assert.False(t, ok)
}

func TestTruncate(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "short", jsonfields.Truncate("short", 10))
	assert.Equal(t, "éé…", jsonfields.Truncate("ééé", 2), "characters, not bytes")
}

func TestString(t *testing.T) {
	t.Parallel()
	f := map[string]json.RawMessage{"s": json.RawMessage(`"x"`), "empty": json.RawMessage(`""`), "null": json.RawMessage(`null`), "n": json.RawMessage(`1`)}
	s, err := jsonfields.String(f, "s", true)
	require.NoError(t, err)
	assert.Equal(t, "x", s)
	s, err = jsonfields.String(f, "absent", false)
	require.NoError(t, err)
	assert.Empty(t, s)
	for key, want := range map[string]string{"absent": "absent is required", "empty": "must not be empty", "null": "must be a string", "n": "must be a string"} {
		_, err := jsonfields.String(f, key, true)
		assert.ErrorContains(t, err, want, key)
	}
}
