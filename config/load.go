package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"

	"github.com/caarlos0/env/v11"
	"go.yaml.in/yaml/v3"
)

// Load builds the configuration: Defaults, then the YAML file at path (none
// when path is ""), then the EVENTPIPE_* variables in environ (KEY=VALUE
// strings as os.Environ returns them; Load never reads the process
// environment itself), then Validate.
//
// A key the file does not know is an error, not ignored. Every problem found
// on the way is collected into one *ValidationError, each problem with its
// YAML path and the file line or variable the value came from; a missing or
// unreadable file is an I/O error instead (errors.Is(err, fs.ErrNotExist)
// works). On error Load returns the zero Config.
func Load(path string, environ []string) (Config, error) {
	cfg := Defaults()
	origins := map[string]string{} // YAML path → file:line or variable
	var ps problems

	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("read config: %w", err)
		}
		decodeYAML(&cfg, data, path, origins, &ps)
	}

	applyEnv(&cfg, environ, origins, &ps)

	if err := cfg.Validate(); err != nil {
		var ve *ValidationError
		if errors.As(err, &ve) {
			for _, p := range ve.Problems {
				p.Source = origins[p.Path]
				ps = append(ps, p)
			}
		}
	}
	if err := ps.err(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// decodeYAML overlays the YAML document in data on cfg. It walks the node tree
// itself, rather than decoding into the struct at once, so that every unknown
// key, duplicate and badly typed value is reported with its path and line,
// and a bad value does not stop the others from being checked.
func decodeYAML(cfg *Config, data []byte, file string, origins map[string]string, ps *problems) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if !errors.Is(err, io.EOF) { // io.EOF: empty, or only comments
			*ps = append(*ps, Problem{Message: yamlMessage(err), Source: file})
		}
		return
	}
	d := decoder{file: file, origins: origins, ps: ps}
	if len(doc.Content) == 1 {
		d.mapping(doc.Content[0], reflect.ValueOf(cfg).Elem(), "")
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		*ps = append(*ps, Problem{Message: yamlMessage(err), Source: file})
	default:
		*ps = append(*ps, Problem{Message: "a second YAML document: a config file holds one", Source: d.at(&next)})
	}
}

// yamlMessage drops the "yaml: " prefix from a yaml error, which the problem's
// context already says.
func yamlMessage(err error) string {
	return strings.TrimPrefix(err.Error(), "yaml: ")
}

type decoder struct {
	file    string
	origins map[string]string
	ps      *problems
}

func (d decoder) at(n *yaml.Node) string {
	return fmt.Sprintf("%s:%d", d.file, n.Line)
}

func (d decoder) problem(path string, n *yaml.Node, format string, args ...any) {
	*d.ps = append(*d.ps, Problem{Path: path, Message: fmt.Sprintf(format, args...), Source: d.at(n)})
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias
	}
	return n
}

// mapping decodes a YAML mapping into the struct v, at path ("" at the top).
// A null (an empty section, or one whose keys are all commented out) keeps
// the defaults.
func (d decoder) mapping(n *yaml.Node, v reflect.Value, path string) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		what := "the file"
		if path != "" {
			what = "a section"
		}
		d.problem(path, n, "%s must be a mapping of keys to values, got %s", what, describe(n))
		return
	}
	t := v.Type()
	seen := map[string]int{} // key → line of its first occurrence
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		if kn.Kind != yaml.ScalarNode {
			d.problem(path, kn, "a key must be a plain name, got %s", describe(kn))
			continue
		}
		name := kn.Value
		p := join(path, name)
		if line, dup := seen[name]; dup {
			d.problem(p, kn, "duplicate key (first at line %d)", line)
			continue
		}
		seen[name] = kn.Line
		field, ok := fieldByYAMLName(t, name)
		if !ok {
			d.problem(p, kn, "unknown key%s", suggest(t, name))
			continue
		}
		fv := v.FieldByIndex(field.Index)
		if field.Type.Kind() == reflect.Struct {
			d.mapping(vn, fv, p)
			continue
		}
		d.scalar(vn, fv, p)
	}
}

// scalar decodes one key's value into v.
func (d decoder) scalar(n *yaml.Node, v reflect.Value, path string) {
	n = resolve(n)
	want := wantText(v.Type())
	if n.Kind != yaml.ScalarNode {
		d.problem(path, n, "want %s, got %s", want, describe(n))
		return
	}
	if isNull(n) {
		if v.Kind() == reflect.String { // `region:` reads as an empty string
			v.SetString("")
			d.origins[path] = d.at(n)
			return
		}
		d.problem(path, n, "no value: want %s (remove the key to keep the default)", want)
		return
	}
	// yaml.v3 would truncate 1.5 into an int; integers must be written as such.
	if v.Kind() == reflect.Int && v.Type() != durationType && n.ShortTag() != "!!int" {
		d.problem(path, n, "%s is not %s", quoteValue(n), want)
		return
	}
	tmp := reflect.New(v.Type())
	if err := n.Decode(tmp.Interface()); err != nil {
		d.problem(path, n, "%s is not %s", quoteValue(n), want)
		return
	}
	v.Set(tmp.Elem())
	d.origins[path] = d.at(n)
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func fieldByYAMLName(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); f.Tag.Get("yaml") == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// suggest names the key the user probably meant: one that differs only in
// case, underscores or dashes ("batchSize", "batch-size" for batch_size).
func suggest(t reflect.Type, name string) string {
	norm := func(s string) string {
		return strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(s))
	}
	var names []string
	for i := range t.NumField() {
		known := t.Field(i).Tag.Get("yaml")
		if norm(known) == norm(name) {
			return fmt.Sprintf("; did you mean %s?", known)
		}
		names = append(names, known)
	}
	return "; known keys: " + strings.Join(names, ", ")
}

func wantText(t reflect.Type) string {
	switch typeName(t) {
	case "duration":
		return `a duration such as "20s" or "100ms"`
	case "int":
		return "an integer"
	case "number":
		return "a number such as 0.25"
	case "bool":
		return "true or false"
	case "string":
		return "a string"
	}
	return t.String()
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return quoteValue(n)
	case yaml.AliasNode:
		return "an alias"
	}
	return "a YAML document"
}

// quoteValue shows a scalar as the user wrote it, cut short if long.
func quoteValue(n *yaml.Node) string {
	const maxRunes = 40
	s := []rune(n.Value)
	if len(s) > maxRunes {
		return fmt.Sprintf("%q", string(s[:maxRunes])+"…")
	}
	return fmt.Sprintf("%q", n.Value)
}

// applyEnv overlays the EVENTPIPE_* variables of environ on cfg. Each section
// is parsed on its own so that a badly typed value can be traced from the
// parser's error (which names the Go field) back to its variable.
func applyEnv(cfg *Config, environ []string, origins map[string]string, ps *problems) {
	vars := env.ToMap(environ)
	kindVar := envPrefix + "BROKER_KIND"
	// The alias applies only when the full name is unset (or empty, which
	// counts as unset).
	aliasUsed := vars[brokerAlias] != "" && vars[kindVar] == ""
	if aliasUsed {
		vars[kindVar] = vars[brokerAlias]
	}
	for _, k := range keys() {
		if vars[k.env] != "" {
			origins[k.path] = k.env
		}
	}
	if aliasUsed {
		origins["broker.kind"] = brokerAlias
	}

	v := reflect.ValueOf(cfg).Elem()
	t := v.Type()
	for i := range t.NumField() {
		section := t.Field(i)
		prefix := envPrefix + section.Tag.Get("envPrefix")
		err := env.ParseWithOptions(v.Field(i).Addr().Interface(), env.Options{Environment: vars, Prefix: prefix})
		if err == nil {
			continue
		}
		var agg env.AggregateError
		if !errors.As(err, &agg) {
			agg.Errors = []error{err}
		}
		for _, e := range agg.Errors {
			*ps = append(*ps, envProblem(e, section, prefix, vars))
		}
	}
}

// envProblem turns an error of the env parser about one field of section into
// a Problem naming the key and its variable.
func envProblem(err error, section reflect.StructField, prefix string, vars map[string]string) Problem {
	var pe env.ParseError
	if !errors.As(err, &pe) {
		return Problem{Path: section.Tag.Get("yaml"), Message: err.Error()}
	}
	f, ok := section.Type.FieldByName(pe.Name)
	if !ok {
		return Problem{Path: section.Tag.Get("yaml"), Message: err.Error()}
	}
	name := prefix + f.Tag.Get("env")
	return Problem{
		Path:    section.Tag.Get("yaml") + "." + f.Tag.Get("yaml"),
		Message: fmt.Sprintf("%q is not %s", vars[name], wantText(f.Type)),
		Source:  name,
	}
}
