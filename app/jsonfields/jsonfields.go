// Package jsonfields reads JSON bodies field by field, the way the spec
// codecs need to: strict about types and unknown keys when our publishers
// write, lenient when our consumers read, with error texts that name the
// field. It is a leaf: codecs wrap its errors in their own error types.
package jsonfields

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// IsNull reports whether raw is the JSON null.
func IsNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// Object splits a JSON object into its fields; anything else (an array, a
// string, null, no JSON at all) is an error naming what.
func Object(b []byte, what string) (map[string]json.RawMessage, error) {
	trimmed := bytes.TrimSpace(b)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, fmt.Errorf("%s is not a JSON object", what)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &fields); err != nil {
		return nil, fmt.Errorf("%s is not a JSON object: %w", what, err)
	}
	return fields, nil
}

// Unknown returns a key of fields that allowed does not list, if any: our
// publishers refuse them (eventpipe's rule: strict on publish, lenient on
// consume).
func Unknown(fields map[string]json.RawMessage, allowed ...string) (string, bool) {
	for k := range fields {
		known := false
		for _, a := range allowed {
			known = known || k == a
		}
		if !known {
			return k, true
		}
	}
	return "", false
}

// Truncate cuts s to n characters (not bytes) for an error message or a log
// line, marking the cut; invalid UTF-8 is dropped.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	r := []rune(s)
	if len(r) > n {
		r = r[:n]
	}
	return strings.ToValidUTF8(string(r), "") + "…"
}

// String reads the string field key: absent is "" unless required; null or
// another type is an error; a required one must not be empty.
func String(fields map[string]json.RawMessage, key string, required bool) (string, error) {
	raw, ok := fields[key]
	if !ok {
		if required {
			return "", fmt.Errorf("%s is required", key)
		}
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil || IsNull(raw) {
		return "", fmt.Errorf("%s must be a string", key)
	}
	if required && s == "" {
		return "", fmt.Errorf("%s must not be empty", key)
	}
	return s, nil
}
