package config_test

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/config"
)

func TestDefaultsAreValid(t *testing.T) {
	t.Parallel()
	require.NoError(t, config.Defaults().Validate())

	cfg, err := config.Load("", nil)
	require.NoError(t, err)
	assert.Equal(t, config.Defaults(), cfg)
}

// TestExampleFileEqualsDefaults keeps config/example.yaml from drifting: its
// values are the defaults, it names every key's variable, and its keys are
// all known (Load rejects unknown ones).
func TestExampleFileEqualsDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load("example.yaml", nil)
	require.NoError(t, err)
	assert.Equal(t, config.Defaults(), cfg)

	data, err := os.ReadFile("example.yaml")
	require.NoError(t, err)
	for _, v := range config.EnvVars() {
		assert.Contains(t, string(data), v.Name, "example.yaml does not mention %s", v.Path)
		leaf := v.Path[strings.LastIndex(v.Path, ".")+1:]
		assert.Regexp(t, regexp.MustCompile(`(?m)^\s+`+regexp.QuoteMeta(leaf)+`:`), string(data), "example.yaml does not set %s", v.Path)
		if v.Alias != "" {
			assert.Contains(t, string(data), v.Alias, "example.yaml does not mention the alias of %s", v.Path)
		}
	}
}

// TestEveryKeyHasEnvVarAndDoc walks Config's fields independently of the
// package's own walk, so a new field without tags cannot go unnoticed.
func TestEveryKeyHasEnvVarAndDoc(t *testing.T) {
	t.Parallel()
	byPath := map[string]config.EnvVar{}
	for _, v := range config.EnvVars() {
		_, dup := byPath[v.Path]
		require.False(t, dup, "key %s listed twice", v.Path)
		byPath[v.Path] = v
	}

	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	leaves := 0
	ct := reflect.TypeFor[config.Config]()
	for i := range ct.NumField() {
		section := ct.Field(i)
		sname := section.Tag.Get("yaml")
		require.Regexp(t, snake, sname, "section %s: yaml tag", section.Name)
		require.Equal(t, reflect.Struct, section.Type.Kind(), "Config.%s must be a section struct", section.Name)
		assert.Equal(t, strings.ToUpper(sname)+"_", section.Tag.Get("envPrefix"), "section %s: envPrefix tag", sname)

		for j := range section.Type.NumField() {
			f := section.Type.Field(j)
			leaves++
			name := f.Tag.Get("yaml")
			path := sname + "." + name
			require.Regexp(t, snake, name, "%s.%s: yaml tag", section.Name, f.Name)
			assert.Equal(t, strings.ToUpper(name), f.Tag.Get("env"), "%s: env tag", path)
			assert.NotEmpty(t, f.Tag.Get("doc"), "%s: doc tag", path)

			v, ok := byPath[path]
			if !assert.True(t, ok, "EnvVars lacks %s", path) {
				continue
			}
			assert.Equal(t, "EVENTPIPE_"+strings.ToUpper(strings.ReplaceAll(path, ".", "_")), v.Name, path)
			assert.NotEmpty(t, v.Doc, path)
			assert.Contains(t, []string{"string", "int", "bool", "duration", "number"}, v.Type, path)
		}
	}
	assert.Len(t, byPath, leaves)
}

func TestEnvVars(t *testing.T) {
	t.Parallel()
	want := map[string]config.EnvVar{
		"broker.kind":                 {Name: "EVENTPIPE_BROKER_KIND", Alias: "EVENTPIPE_BROKER", Type: "string", Default: "memory"},
		"sqs.batch_size":              {Name: "EVENTPIPE_SQS_BATCH_SIZE", Type: "int", Default: "10"},
		"sqs.wait_time":               {Name: "EVENTPIPE_SQS_WAIT_TIME", Type: "duration", Default: "20s"},
		"sqs.endpoint":                {Name: "EVENTPIPE_SQS_ENDPOINT", Type: "string", Default: ""},
		"rabbitmq.publisher_confirms": {Name: "EVENTPIPE_RABBITMQ_PUBLISHER_CONFIRMS", Type: "bool", Default: "true"},
		"postgres.poll_interval":      {Name: "EVENTPIPE_POSTGRES_POLL_INTERVAL", Type: "duration", Default: "250ms"},
		"admin.addr":                  {Name: "EVENTPIPE_ADMIN_ADDR", Type: "string", Default: "127.0.0.1:9090"},
	}
	got := map[string]config.EnvVar{}
	for _, v := range config.EnvVars() {
		got[v.Path] = v
	}
	for path, w := range want {
		g := got[path]
		assert.Equal(t, w.Name, g.Name, path)
		assert.Equal(t, w.Alias, g.Alias, path)
		assert.Equal(t, w.Type, g.Type, path)
		assert.Equal(t, w.Default, g.Default, path)
	}
	assert.Equal(t, "broker.kind", config.EnvVars()[0].Path, "EnvVars follows Config's field order")
}

// writeConfig writes a config file into a fresh directory and returns its path.
func writeConfig(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "eventpipe.yaml")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}
