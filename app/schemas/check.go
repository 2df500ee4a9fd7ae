package schemas

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// Default returns the embedded catalogs (Load), compiled on the first call
// and shared after it: a consumer checks every body against schemas compiled
// once, never per message. The catalog is read-only.
var Default = sync.OnceValues(Load)

// Message returns the message type name of the spec named spec.
func (c Catalog) Message(spec, name string) (Message, bool) {
	s, ok := c.Spec(spec)
	if !ok {
		return Message{}, false
	}
	for _, m := range s.Messages {
		if m.Name == name {
			return m, true
		}
	}
	return Message{}, false
}

// Part returns a schema file of spec's directory that no message type is
// (the StackUp envelope, envelope.json), compiled like a message's: a
// consumer checks it before it knows the message's type. Its Queue is empty.
func (c Catalog) Part(spec, file string) (Message, bool) {
	for _, s := range c.specs {
		if s.Name == spec {
			m, ok := s.parts[file]
			return m, ok
		}
	}
	return Message{}, false
}

// FieldError is one objection of a schema to a body: the field, a path like
// "payload.resumeId" or "Records[0].s3.object.key" ("" for the body
// itself), and why. Values are never quoted: a body's fields may hold what
// must not be logged.
type FieldError struct {
	Field, Reason string
	// Keyword is the JSON Schema keyword that failed ("required",
	// "pattern", "format", "const", ...), for a caller that waives one.
	Keyword string
}

// String is "field X: reason".
func (e FieldError) String() string {
	if e.Field == "" {
		return "body: " + e.Reason
	}
	return "field " + e.Field + ": " + e.Reason
}

// InvalidError is a body a message type's schema refuses, with every
// objection, sorted by field.
type InvalidError struct {
	// Message is the message type ("" for a Part).
	Message  string
	Mode     Mode
	Problems []FieldError
}

// Error implements error: the objections, "field X: reason", joined by "; ".
func (e *InvalidError) Error() string {
	out := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		out[i] = p.String()
	}
	return strings.Join(out, "; ")
}

// Without returns e without the problems waive accepts, or nil when none is
// left: a consumer more lenient than the contract where its spec allows
// (each waiver named by its caller).
func (e *InvalidError) Without(waive func(FieldError) bool) error {
	var left []FieldError
	for _, p := range e.Problems {
		if !waive(p) {
			left = append(left, p)
		}
	}
	if len(left) == 0 {
		return nil
	}
	return &InvalidError{Message: e.Message, Mode: e.Mode, Problems: left}
}

// CheckWaiving is Check, less, in Lenient mode, the problems waive accepts:
// the exceptions a consumer documents for foreign producers where its spec
// takes more than the contract our producers follow. Strict checks ignore
// waive.
func (m Message) CheckWaiving(body []byte, mode Mode, waive func(FieldError) bool) error {
	return waived(m.Check(body, mode), mode, waive)
}

// CheckValueWaiving is CheckWaiving of a value decoded already.
func (m Message) CheckValueWaiving(v any, mode Mode, waive func(FieldError) bool) error {
	return waived(m.CheckValue(v, mode), mode, waive)
}

func waived(err error, mode Mode, waive func(FieldError) bool) error {
	var invalid *InvalidError
	if mode != Lenient || waive == nil || !errors.As(err, &invalid) {
		return err
	}
	return invalid.Without(waive)
}

// Check validates body against the message's schema and returns nil or an
// *InvalidError naming each field at fault: what a handler reports for a bad
// body.
func (m Message) Check(body []byte, mode Mode) error {
	v, err := decodeJSON(body)
	if err != nil {
		return &InvalidError{Message: m.Name, Mode: mode, Problems: []FieldError{{Reason: "not JSON: " + err.Error()}}}
	}
	return m.CheckValue(v, mode)
}

// CheckValue is Check of a value decoded already (Decode).
func (m Message) CheckValue(v any, mode Mode) error {
	err := m.validate(v, mode)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &InvalidError{Message: m.Name, Mode: mode, Problems: []FieldError{{Reason: err.Error()}}}
	}
	var problems []FieldError
	m.leaves(ve, &problems)
	slices.SortFunc(problems, func(a, b FieldError) int {
		if c := strings.Compare(a.Field, b.Field); c != 0 {
			return c
		}
		return strings.Compare(a.Reason, b.Reason)
	})
	// allOf branches may repeat one objection.
	return &InvalidError{Message: m.Name, Mode: mode, Problems: slices.Compact(problems)}
}

// Decode reads a body the way Check does (numbers kept exact), for a caller
// that checks one value against several schemas or reads it after.
func Decode(body []byte) (any, error) { return decodeJSON(body) }

// leaves collects the objections of the innermost errors, where a rule
// failed (allOf, if/then and the like only group them).
func (m Message) leaves(e *jsonschema.ValidationError, out *[]FieldError) {
	if len(e.Causes) > 0 {
		for _, c := range e.Causes {
			m.leaves(c, out)
		}
		return
	}
	at := fieldPath(e.InstanceLocation)
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		for _, f := range k.Missing {
			*out = append(*out, FieldError{Field: join(at, f), Reason: "required", Keyword: "required"})
		}
	case *kind.AdditionalProperties:
		for _, f := range k.Properties {
			*out = append(*out, FieldError{Field: join(at, f), Reason: "unknown field", Keyword: "additionalProperties"})
		}
	default:
		var kw string
		if path := e.ErrorKind.KeywordPath(); len(path) > 0 {
			kw = path[0]
		}
		*out = append(*out, FieldError{Field: at, Reason: m.reason(e), Keyword: kw})
	}
}

// reason says why a value fails one rule, without quoting the value.
func (m Message) reason(e *jsonschema.ValidationError) string {
	switch k := e.ErrorKind.(type) {
	case *kind.Type:
		return fmt.Sprintf("want %s, got %s", strings.Join(k.Want, " or "), k.Got)
	case *kind.Enum:
		return "must be one of " + values(k.Want)
	case *kind.Const:
		return "must be " + values([]any{k.Want})
	case *kind.Format:
		return "not a valid " + k.Want
	case *kind.Pattern:
		if k.Want == `\S` {
			return "must not be empty or blank"
		}
		return "must match " + strconv.Quote(k.Want) + m.described(e)
	case *kind.Not:
		if p, ok := m.subschema(e.SchemaURL)["not"].(map[string]any)["pattern"].(string); ok {
			return "must not match " + strconv.Quote(p) + m.described(e)
		}
		return "has a form the schema refuses" + m.described(e)
	case *kind.MinLength:
		return fmt.Sprintf("shorter than %d characters", k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("longer than %d characters", k.Want)
	case *kind.Minimum:
		return "must be >= " + k.Want.RatString()
	case *kind.Maximum:
		return "must be <= " + k.Want.RatString()
	case *kind.ExclusiveMinimum:
		return "must be > " + k.Want.RatString()
	case *kind.ExclusiveMaximum:
		return "must be < " + k.Want.RatString()
	case *kind.MinItems:
		return fmt.Sprintf("fewer than %d items", k.Want)
	case *kind.MaxItems:
		return fmt.Sprintf("more than %d items", k.Want)
	case *kind.FalseSchema:
		return "not allowed"
	default:
		return "fails " + strings.Join(e.ErrorKind.KeywordPath(), "/")
	}
}

// described is " (the schema's description)" of the failing value's
// schema, or "": it says in words what a pattern says in symbols.
func (m Message) described(e *jsonschema.ValidationError) string {
	if d, ok := m.subschema(e.SchemaURL)["description"].(string); ok && d != "" {
		return " (" + strings.TrimSuffix(d, ".") + ")"
	}
	return ""
}

// subschema returns the bundled schema's object at the JSON pointer of a
// schema location ("mem:///spec/file.json#/properties/payload"), or nil.
func (m Message) subschema(url string) map[string]any {
	_, ptr, _ := strings.Cut(url, "#")
	var cur any = m.bundled
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		if tok == "" {
			continue
		}
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		switch x := cur.(type) {
		case map[string]any:
			cur = x[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			cur = x[i]
		default:
			return nil
		}
	}
	obj, _ := cur.(map[string]any)
	return obj
}

func values(vs []any) string {
	out := make([]string, len(vs))
	for i, v := range vs {
		if s, ok := v.(string); ok {
			out[i] = s
		} else {
			out[i] = fmt.Sprint(v)
		}
	}
	return strings.Join(out, ", ")
}

// fieldPath writes an instance location as "a.b[0].c".
func fieldPath(loc []string) string {
	var b strings.Builder
	for _, tok := range loc {
		if _, err := strconv.Atoi(tok); err == nil {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

func join(at, field string) string {
	if at == "" {
		return field
	}
	return at + "." + field
}
