package config

import (
	"fmt"
	"reflect"
	"strconv"
	"time"
)

// envPrefix starts the name of every environment variable Load reads.
const envPrefix = "EVENTPIPE_"

// brokerAlias is the short name of EVENTPIPE_BROKER_KIND; the full name wins
// when both are set.
const brokerAlias = envPrefix + "BROKER"

// EnvVar documents one configuration key and the environment variable that
// overrides it.
type EnvVar struct {
	// Name is the environment variable, e.g. EVENTPIPE_SQS_BATCH_SIZE.
	Name string
	// Alias is a second, shorter variable for the same key, or "". Name wins
	// when both are set.
	Alias string
	// Path is the key's YAML path, e.g. sqs.batch_size.
	Path string
	// Type is the value's type as written: string, int, bool or duration
	// (a Go duration such as 20s or 100ms).
	Type string
	// Default is the default value as written in YAML or the environment;
	// "" for an empty string.
	Default string
	// Doc is one or two sentences on what the key does, with its unit and
	// allowed range.
	Doc string
}

// EnvVars lists every configuration key in the order of Config's fields,
// with its environment variable, type, default and documentation: the source
// of the README's configuration reference and of `eventpipe serve --help`.
func EnvVars() []EnvVar {
	defaults := reflect.ValueOf(Defaults())
	keys := keys()
	vars := make([]EnvVar, 0, len(keys))
	for _, k := range keys {
		v := EnvVar{
			Name:    k.env,
			Path:    k.path,
			Type:    typeName(k.typ),
			Default: formatValue(defaults.FieldByIndex(k.index)),
			Doc:     k.doc,
		}
		if k.path == "broker.kind" {
			v.Alias = brokerAlias
		}
		vars = append(vars, v)
	}
	return vars
}

// key is one leaf of Config, as the struct tags describe it.
type key struct {
	path  string // YAML path: "sqs.batch_size"
	env   string // environment variable: "EVENTPIPE_SQS_BATCH_SIZE"
	doc   string
	index []int // field index from Config, for reflect.Value.FieldByIndex
	typ   reflect.Type
}

// keys walks Config's struct tags. Sections are the struct-typed fields; every
// other field is a key.
func keys() []key {
	var out []key
	var walk func(t reflect.Type, index []int, path, env string)
	walk = func(t reflect.Type, index []int, path, env string) {
		for i := range t.NumField() {
			f := t.Field(i)
			idx := append(append([]int(nil), index...), i)
			name := f.Tag.Get("yaml")
			p := name
			if path != "" {
				p = path + "." + name
			}
			if f.Type.Kind() == reflect.Struct {
				walk(f.Type, idx, p, env+f.Tag.Get("envPrefix"))
				continue
			}
			out = append(out, key{path: p, env: env + f.Tag.Get("env"), doc: f.Tag.Get("doc"), index: idx, typ: f.Type})
		}
	}
	walk(reflect.TypeFor[Config](), nil, "", envPrefix)
	return out
}

var durationType = reflect.TypeFor[time.Duration]()

// typeName names a key's type for people: what to write, not the Go type.
func typeName(t reflect.Type) string {
	if t == durationType {
		return "duration"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "int"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.String:
		return "string"
	}
	return t.String()
}

// formatValue writes a key's value as YAML and the environment take it.
func formatValue(v reflect.Value) string {
	if v.Type() == durationType {
		return time.Duration(v.Int()).String()
	}
	switch v.Kind() {
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case reflect.String:
		return v.String()
	}
	return fmt.Sprint(v.Interface())
}
