package schemas

import (
	"errors"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const envelopeDoc = `{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "additionalProperties": false,
  "required": ["id", "body"], "properties": {"id": {"type": "string"}, "body": {"type": "object"}}}`

func testFS(message string) fstest.MapFS {
	return fstest.MapFS{
		"s/catalog.yaml":  {Data: []byte("spec: s\ntitle: t\nmessages:\n  - {name: m, schema: m.json, queue: q}\n")},
		"s/envelope.json": {Data: []byte(envelopeDoc)},
		"s/m.json":        {Data: []byte(message)},
	}
}

// A $ref to another file of the spec is inlined: the bundled schema stands
// alone and validates like the two files together.
func TestBundleInlinesSiblingFiles(t *testing.T) {
	t.Parallel()
	c, err := load(testFS(`{"$schema": "http://json-schema.org/draft-07/schema#", "allOf": [{"$ref": "envelope.json"}],
	  "properties": {"body": {"type": "object", "additionalProperties": false, "required": ["n"], "properties": {"n": {"type": "integer"}}}}}`))
	require.NoError(t, err)
	m := c.ByQueue("q")[0]
	inlined := m.Schema()["allOf"].([]any)[0].(map[string]any)
	assert.NotContains(t, inlined, "$ref")
	assert.NotContains(t, inlined, "$schema")
	assert.Equal(t, false, inlined["additionalProperties"])
	require.NoError(t, c.ValidateQueue("q", []byte(`{"id":"a","body":{"n":1}}`), Strict))
	require.Error(t, c.ValidateQueue("q", []byte(`{"id":"a","body":{"n":"x"}}`), Strict))
	require.Error(t, c.ValidateQueue("q", []byte(`{"body":{"n":1}}`), Lenient), "lenient keeps every rule but unknown fields")
}

// Lenient ignores unknown fields at every level; strict refuses them.
func TestLenientIgnoresUnknownFields(t *testing.T) {
	t.Parallel()
	c, err := load(testFS(`{"$schema": "http://json-schema.org/draft-07/schema#", "allOf": [{"$ref": "envelope.json"}],
	  "properties": {"body": {"type": "object", "additionalProperties": false, "properties": {"n": {"type": "integer"}}}}}`))
	require.NoError(t, err)
	for _, body := range []string{`{"id":"a","body":{},"extra":1}`, `{"id":"a","body":{"extra":1}}`} {
		var ve *ValidationError
		require.ErrorAs(t, c.ValidateQueue("q", []byte(body), Strict), &ve, body)
		assert.Equal(t, Strict, ve.Mode)
		require.NoError(t, c.ValidateQueue("q", []byte(body), Lenient), body)
	}
}

// A reference the bundler cannot inline, a file without the draft-07
// $schema, or a catalog naming a missing file is refused at load.
func TestLoadRefusesWhatCannotStandAlone(t *testing.T) {
	t.Parallel()
	for name, doc := range map[string]string{
		"remote ref":   `{"$schema": "http://json-schema.org/draft-07/schema#", "allOf": [{"$ref": "https://example.com/x.json"}]}`,
		"pointer ref":  `{"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {"a": {}}, "allOf": [{"$ref": "#/definitions/a"}]}`,
		"other draft":  `{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"}`,
		"invalid JSON": `{"$schema": `,
	} {
		_, err := load(testFS(doc))
		require.Error(t, err, name)
	}
	fsys := testFS(`{"$schema": "http://json-schema.org/draft-07/schema#"}`)
	delete(fsys, "s/m.json")
	_, err := load(fsys)
	require.Error(t, err)
}

// A queue no catalog names is a NoSchemaError, not a refusal.
func TestValidateQueueWithoutSchema(t *testing.T) {
	t.Parallel()
	c, err := Load()
	require.NoError(t, err)
	var nse *NoSchemaError
	require.True(t, errors.As(c.ValidateQueue("demo.greetings", []byte(`{}`), Strict), &nse))
}

// The embedded catalogs: the five specs, every message with a schema that
// names the draft and a title, and headers where the spec has attributes.
func TestEmbeddedCatalogs(t *testing.T) {
	t.Parallel()
	c, err := Load()
	require.NoError(t, err)
	var names []string
	for _, s := range c.Specs() {
		names = append(names, s.Name)
	}
	assert.Equal(t, []string{"booking", "disputes", "interviews", "joinlink", "stackup"}, names)
	assert.Equal(t, 1+4+3+1+17, len(c.Messages()), "booking, disputes, interviews, joinlink, stackup")
	for _, m := range c.Messages() {
		assert.Equal(t, Draft, m.Schema()["$schema"], m.Name)
		assert.NotEmpty(t, m.Title(), m.Name)
		data, err := m.JSON()
		require.NoError(t, err)
		assert.NotContains(t, string(data), `"$ref"`, m.Name)
	}
	stackup, _ := c.Spec("stackup")
	assert.Contains(t, stackup.Messages[0].Headers["properties"], "x-trace-id")
}

// Check names each field at fault, "field X: reason", never its value; a
// Part is a schema file no message type names.
func TestCheckNamesTheField(t *testing.T) {
	t.Parallel()
	c, err := load(testFS(`{"$schema": "http://json-schema.org/draft-07/schema#", "allOf": [{"$ref": "envelope.json"}],
	  "properties": {"body": {"type": "object", "additionalProperties": false, "required": ["n"],
	    "properties": {"n": {"type": "integer", "minimum": 1}, "k": {"type": "string", "pattern": "\\S", "not": {"pattern": "\\.\\."}},
	      "e": {"enum": ["A", "B"]}, "l": {"type": "array", "items": {"type": "string"}}}}}}`))
	require.NoError(t, err)
	m := c.ByQueue("q")[0]
	for body, want := range map[string]string{
		`{"id":"a","body":{}}`:                   "field body.n: required",
		`{"body":{"n":1}}`:                       "field id: required",
		`{"id":"a","body":{"n":"secret-value"}}`: "field body.n: want integer, got string",
		`{"id":"a","body":{"n":0}}`:              "field body.n: must be >= 1",
		`{"id":"a","body":{"n":1,"k":" "}}`:      "field body.k: must not be empty or blank",
		`{"id":"a","body":{"n":1,"k":"a/../b"}}`: `field body.k: must not match "\\.\\."`,
		`{"id":"a","body":{"n":1,"e":"C"}}`:      "field body.e: must be one of A, B",
		`{"id":"a","body":{"n":1,"l":["x",2]}}`:  "field body.l[1]: want string, got number",
		`[]`:                                     "body: want object, got array",
		`{"id":"a","body":{"n":1},"zz":1}`:       "field zz: unknown field",
		`{`:                                      "body: not JSON: unexpected EOF",
	} {
		mode := Lenient
		if want == "field zz: unknown field" {
			mode = Strict
		}
		err := m.Check([]byte(body), mode)
		var invalid *InvalidError
		require.ErrorAs(t, err, &invalid, body)
		assert.Equal(t, want, err.Error(), body)
		assert.NotContains(t, err.Error(), "secret-value")
	}
	require.NoError(t, m.Check([]byte(`{"id":"a","body":{"n":1},"zz":1}`), Lenient))
	env, ok := c.Part("s", "envelope.json")
	require.True(t, ok)
	require.NoError(t, env.Check([]byte(`{"id":"a","body":{}}`), Strict))
	require.EqualError(t, env.Check([]byte(`{"id":"a"}`), Lenient), "field body: required")
	_, ok = c.Part("s", "m.json")
	assert.False(t, ok, "a message's file is no part")
}
