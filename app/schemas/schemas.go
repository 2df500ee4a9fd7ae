// Package schemas is every spec's message catalog as data: one JSON Schema
// (draft-07) per message type — the StackUp envelope and payloads, the
// interviews bodies, the disputes envelope and events and the S3 event
// notification, the booking-session event, the join-link event — and, per
// spec, a catalog.yaml naming each message type's schema, queue (exchange and
// routing key where there is one), headers and correlation id. The files are
// embedded; `eventpipe catalog schemas --out DIR` writes them for other teams
// and `eventpipe topology export --format asyncapi` puts them in an AsyncAPI
// document (package asyncapi).
//
// The files are the contract, strict: what a publisher must write (unknown
// fields refused). Lenient, the view a consumer checks with, is the same
// schema with every "additionalProperties": false dropped (the StackUp
// contract's section 7: consumers ignore unknown fields). Rules a schema
// cannot state — cross-field arithmetic, derived ids, the secrets rule —
// stay in the spec packages' Go (docs/decisions/0030).
//
// A schema may $ref another file of its spec's directory (the StackUp and
// disputes envelopes); Bundled inlines those, so every schema handed out is
// self-contained. The package is a leaf: it imports nothing of eventpipe.
package schemas

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

//go:embed */*.json */catalog.yaml
var files embed.FS

// Draft is the JSON Schema dialect of every schema.
const Draft = "http://json-schema.org/draft-07/schema#"

// Mode is how strictly a body is checked.
type Mode int

const (
	// Strict is the contract as written: what our publishers must send
	// (eventpipe's rule: strict on publish).
	Strict Mode = iota
	// Lenient ignores unknown fields: what a consumer accepts (lenient on
	// consume).
	Lenient
)

// String names the mode.
func (m Mode) String() string {
	if m == Lenient {
		return "lenient"
	}
	return "strict"
}

// Catalog is every spec's messages, with their schemas compiled.
type Catalog struct {
	specs []Spec
}

// Spec is one spec's catalog (its catalog.yaml).
type Spec struct {
	// Name is the spec's, as its topology file names it (e.g. "stackup").
	Name        string `yaml:"spec"`
	Title       string `yaml:"title"`
	Description string `yaml:"description"`
	// Headers is the JSON Schema of the headers every message of the spec
	// carries, unless a message names its own.
	Headers  map[string]any `yaml:"headers,omitempty"`
	Messages []Message      `yaml:"messages"`

	// parts are the schema files no message type names (Catalog.Part).
	parts map[string]Message
}

// Message is one message type.
type Message struct {
	// Spec is the spec's name.
	Spec string `yaml:"-"`
	// Name is the message type (StackUp's messageType, the disputes
	// event_type, the interviews eventType attribute, ...).
	Name string `yaml:"name"`
	// File is the schema's file name in the spec's directory.
	File string `yaml:"schema"`
	// Queue is the queue the message is consumed from.
	Queue string `yaml:"queue"`
	// Exchange and RoutingKey are where it is published, for a spec with
	// exchanges; empty when producers send straight to Queue.
	Exchange   string `yaml:"exchange,omitempty"`
	RoutingKey string `yaml:"routing_key,omitempty"`
	Summary    string `yaml:"summary"`
	Producer   string `yaml:"producer"`
	Consumer   string `yaml:"consumer"`
	// Headers is the JSON Schema of the message's headers (AMQP properties,
	// SQS message attributes, metadata); the spec's when empty.
	Headers map[string]any `yaml:"headers,omitempty"`
	// CorrelationID is an AsyncAPI runtime expression locating the id that
	// correlates the message with its request, e.g.
	// "$message.header#/correlation_id"; empty when there is none.
	CorrelationID string `yaml:"correlation_id,omitempty"`

	bundled          map[string]any
	strict, lenient  *jsonschema.Schema
	title, describes string
}

// Load reads and compiles the embedded catalogs.
func Load() (Catalog, error) {
	return load(files)
}

func load(fsys fs.FS) (Catalog, error) {
	dirs, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return Catalog{}, fmt.Errorf("schemas: %w", err)
	}
	var c Catalog
	var errs []error
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		s, err := loadSpec(fsys, d.Name())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.specs = append(c.specs, s)
	}
	if err := errors.Join(errs...); err != nil {
		return Catalog{}, err
	}
	return c, nil
}

func loadSpec(fsys fs.FS, dir string) (Spec, error) {
	raw, err := fs.ReadFile(fsys, path.Join(dir, "catalog.yaml"))
	if err != nil {
		return Spec{}, fmt.Errorf("schemas: %s: %w", dir, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	var s Spec
	if err := dec.Decode(&s); err != nil {
		return Spec{}, fmt.Errorf("schemas: %s/catalog.yaml: %w", dir, err)
	}
	if s.Name != dir {
		return Spec{}, fmt.Errorf("schemas: %s/catalog.yaml names spec %q", dir, s.Name)
	}
	docs := map[string]map[string]any{}
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return Spec{}, fmt.Errorf("schemas: %w", err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		data, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return Spec{}, fmt.Errorf("schemas: %w", err)
		}
		doc, err := decodeJSON(data)
		if err != nil {
			return Spec{}, fmt.Errorf("schemas: %s/%s: %w", dir, e.Name(), err)
		}
		obj, ok := doc.(map[string]any)
		if !ok || obj["$schema"] != Draft {
			return Spec{}, fmt.Errorf("schemas: %s/%s: want an object with \"$schema\": %q", dir, e.Name(), Draft)
		}
		docs[e.Name()] = obj
	}
	seen := map[string]bool{}
	var errs []error
	for i := range s.Messages {
		m := &s.Messages[i]
		m.Spec = s.Name
		if m.Headers == nil {
			m.Headers = s.Headers
		}
		if seen[m.Name] {
			errs = append(errs, fmt.Errorf("schemas: %s: message %q listed twice", dir, m.Name))
		}
		seen[m.Name] = true
		if m.Name == "" || m.Queue == "" || m.File == "" {
			errs = append(errs, fmt.Errorf("schemas: %s: a message needs name, schema and queue (got %q)", dir, m.Name))
			continue
		}
		if (m.Exchange == "") != (m.RoutingKey == "") {
			errs = append(errs, fmt.Errorf("schemas: %s: %s: exchange and routing_key go together", dir, m.Name))
		}
		if err := m.compile(docs); err != nil {
			errs = append(errs, fmt.Errorf("schemas: %s/%s: %w", dir, m.File, err))
		}
	}
	s.parts = map[string]Message{}
	for _, file := range slices.Sorted(maps.Keys(docs)) {
		if slices.ContainsFunc(s.Messages, func(m Message) bool { return m.File == file }) {
			continue
		}
		p := Message{Spec: s.Name, File: file}
		if err := p.compile(docs); err != nil {
			errs = append(errs, fmt.Errorf("schemas: %s/%s: %w", dir, file, err))
		}
		s.parts[file] = p
	}
	return s, errors.Join(errs...)
}

func (m *Message) compile(docs map[string]map[string]any) error {
	root, ok := docs[m.File]
	if !ok {
		return errors.New("no such file")
	}
	b, err := bundle(root, docs, nil)
	if err != nil {
		return err
	}
	m.bundled = b.(map[string]any)
	m.title, _ = m.bundled["title"].(string)
	m.describes, _ = m.bundled["description"].(string)
	if m.strict, err = compile(m.Spec+"/"+m.File, m.bundled); err != nil {
		return err
	}
	m.lenient, err = compile(m.Spec+"/"+m.File, lenient(m.bundled))
	return err
}

func compile(name string, doc map[string]any) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	c.AssertFormat()
	url := "mem:///" + name
	if err := c.AddResource(url, deepCopy(doc)); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// bundle returns v with every {"$ref": "<file>.json"} replaced by that file
// of the spec's directory (without its $schema), recursively. Any other $ref
// is an error: a schema handed out must stand alone.
func bundle(v any, docs map[string]map[string]any, stack []string) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		if ref, ok := x["$ref"].(string); ok {
			target, found := docs[ref]
			if !found || len(x) != 1 {
				return nil, fmt.Errorf("$ref %q: only a bare reference to another file of the spec is allowed", ref)
			}
			if slices.Contains(stack, ref) {
				return nil, fmt.Errorf("$ref %q: a cycle", ref)
			}
			inlined, err := bundle(target, docs, append(stack, ref))
			if err != nil {
				return nil, err
			}
			out := inlined.(map[string]any)
			delete(out, "$schema")
			return out, nil
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			b, err := bundle(e, docs, stack)
			if err != nil {
				return nil, err
			}
			out[k] = b
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			b, err := bundle(e, docs, stack)
			if err != nil {
				return nil, err
			}
			out[i] = b
		}
		return out, nil
	default:
		return x, nil
	}
}

// lenient returns a copy of doc without any "additionalProperties": false:
// unknown fields are ignored, every other rule stays.
func lenient(doc map[string]any) map[string]any {
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			out := make(map[string]any, len(x))
			for k, e := range x {
				if k == "additionalProperties" && e == false {
					continue
				}
				out[k] = walk(e)
			}
			return out
		case []any:
			out := make([]any, len(x))
			for i, e := range x {
				out[i] = walk(e)
			}
			return out
		default:
			return x
		}
	}
	return walk(doc).(map[string]any)
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopy(e)
		}
		return out
	default:
		return x
	}
}

// decodeJSON decodes one JSON value, numbers kept exact (json.Number);
// trailing data is an error.
func decodeJSON(data []byte) (any, error) {
	return jsonschema.UnmarshalJSON(bytes.NewReader(data))
}

// Specs returns every spec's catalog, sorted by name.
func (c Catalog) Specs() []Spec {
	out := slices.Clone(c.specs)
	slices.SortFunc(out, func(a, b Spec) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Spec returns the catalog of the spec named name.
func (c Catalog) Spec(name string) (Spec, bool) {
	for _, s := range c.specs {
		if s.Name == name {
			return s, true
		}
	}
	return Spec{}, false
}

// Messages returns every spec's messages, by spec then in catalog order.
func (c Catalog) Messages() []Message {
	var out []Message
	for _, s := range c.Specs() {
		out = append(out, s.Messages...)
	}
	return out
}

// ByQueue returns the messages consumed from queue.
func (c Catalog) ByQueue(queue string) []Message {
	var out []Message
	for _, m := range c.Messages() {
		if m.Queue == queue {
			out = append(out, m)
		}
	}
	return out
}

// NoSchemaError is a queue no catalog has a message for.
type NoSchemaError struct{ Queue string }

// Error implements error.
func (e *NoSchemaError) Error() string {
	return fmt.Sprintf("schemas: no message type of any catalog is consumed from queue %q", e.Queue)
}

// ValidateQueue checks body against the messages consumed from queue: it is
// valid when one of them accepts it (a queue that carries several types, like
// interview-completed or core.callback.analysis's, takes any of them). The
// error names each type's objection.
func (c Catalog) ValidateQueue(queue string, body []byte, mode Mode) error {
	ms := c.ByQueue(queue)
	if len(ms) == 0 {
		return &NoSchemaError{Queue: queue}
	}
	v, err := decodeJSON(body)
	if err != nil {
		return &ValidationError{Queue: queue, Mode: mode, Err: fmt.Errorf("not JSON: %w", err)}
	}
	var errs []error
	for _, m := range ms {
		err := m.validate(v, mode)
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("as %s: %w", m.Name, err))
	}
	return &ValidationError{Queue: queue, Mode: mode, Err: errors.Join(errs...)}
}

// ValidationError is a body no schema of its queue accepts.
type ValidationError struct {
	Queue string
	Mode  Mode
	Err   error
}

// Error implements error.
func (e *ValidationError) Error() string {
	return fmt.Sprintf("schemas: body refused (%s) for queue %s: %v", e.Mode, e.Queue, e.Err)
}

// Unwrap returns the schemas' objections.
func (e *ValidationError) Unwrap() error { return e.Err }

// Validate checks body against the message's schema.
func (m Message) Validate(body []byte, mode Mode) error {
	v, err := decodeJSON(body)
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return m.validate(v, mode)
}

func (m Message) validate(v any, mode Mode) error {
	s := m.strict
	if mode == Lenient {
		s = m.lenient
	}
	return s.Validate(v)
}

// Title is the schema's title.
func (m Message) Title() string { return m.title }

// Description is the schema's description.
func (m Message) Description() string { return m.describes }

// Schema returns the message's schema, bundled (self-contained), as a fresh
// copy the caller may change.
func (m Message) Schema() map[string]any {
	return deepCopy(m.bundled).(map[string]any)
}

// JSON returns the bundled schema as indented JSON, ending in a newline: the
// file `eventpipe catalog schemas` writes.
func (m Message) JSON() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m.bundled); err != nil {
		return nil, fmt.Errorf("schemas: %s: %w", m.File, err)
	}
	return buf.Bytes(), nil
}
