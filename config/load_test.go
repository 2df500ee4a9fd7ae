package config_test

import (
	"errors"
	"io/fs"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/config"
)

func TestLoadOverrides(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		yaml    string   // "" loads no file
		environ []string // KEY=VALUE
		want    func(*config.Config)
	}{
		{
			name: "yaml overrides defaults",
			yaml: `
broker:
  kind: rabbitmq
rabbitmq:
  url: amqps://user:secret@mq.example.com:5671/prod
  prefetch: 200
  publisher_confirms: false
sqs:
  batch_size: 5
  wait_time: 10s
  nack_visibility: 30s
postgres:
  poll_interval: 250ms
admin:
  addr: ""
log:
  level: debug
  format: json
demo:
  enabled: true
`,
			want: func(c *config.Config) {
				c.Broker.Kind = config.KindRabbitMQ
				c.RabbitMQ.URL = "amqps://user:secret@mq.example.com:5671/prod"
				c.RabbitMQ.Prefetch = 200
				c.RabbitMQ.PublisherConfirms = false
				c.SQS.BatchSize = 5
				c.SQS.WaitTime = 10 * time.Second
				c.SQS.NackVisibility = 30 * time.Second
				c.Postgres.PollInterval = 250 * time.Millisecond
				c.Admin.Addr = ""
				c.Log.Level = config.LevelDebug
				c.Log.Format = config.FormatJSON
				c.Demo.Enabled = true
			},
		},
		{
			name: "empty file keeps defaults",
			yaml: "# nothing but a comment\n",
			want: func(*config.Config) {},
		},
		{
			name: "empty section keeps defaults",
			yaml: "sqs:\n  # batch_size: 3\nlog:\n  level: warn\n",
			want: func(c *config.Config) { c.Log.Level = config.LevelWarn },
		},
		{
			name: "null string value is empty",
			yaml: "admin:\n  addr:\n",
			want: func(c *config.Config) { c.Admin.Addr = "" },
		},
		{
			name: "anchors and aliases",
			yaml: "sqs:\n  wait_time: &t 5s\nserve:\n  connect_timeout: *t\n",
			want: func(c *config.Config) {
				c.SQS.WaitTime = 5 * time.Second
				c.Serve.ConnectTimeout = 5 * time.Second
			},
		},
		{
			name: "env overrides defaults",
			environ: []string{
				"EVENTPIPE_BROKER_KIND=sqs",
				"EVENTPIPE_SQS_ENDPOINT=http://127.0.0.1:9324",
				"EVENTPIPE_SQS_REGION=us-east-1",
				"EVENTPIPE_SQS_BATCH_SIZE=3",
				"EVENTPIPE_SQS_WAIT_TIME=1s",
				"EVENTPIPE_SQS_CREATE_QUEUES=false",
				"EVENTPIPE_POSTGRES_DSN=postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
				"EVENTPIPE_ADMIN_ADDR=:0",
				"EVENTPIPE_DEMO_INTERVAL=250ms",
			},
			want: func(c *config.Config) {
				c.Broker.Kind = config.KindSQS
				c.SQS.Endpoint = "http://127.0.0.1:9324"
				c.SQS.Region = "us-east-1"
				c.SQS.BatchSize = 3
				c.SQS.WaitTime = time.Second
				c.SQS.CreateQueues = false
				c.Postgres.DSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
				c.Admin.Addr = ":0"
				c.Demo.Interval = 250 * time.Millisecond
			},
		},
		{
			name:    "env overrides yaml",
			yaml:    "broker:\n  kind: rabbitmq\nsqs:\n  batch_size: 4\n",
			environ: []string{"EVENTPIPE_BROKER_KIND=memory", "EVENTPIPE_SQS_BATCH_SIZE=7"},
			want: func(c *config.Config) {
				c.SQS.BatchSize = 7
			},
		},
		{
			name:    "EVENTPIPE_BROKER alias",
			yaml:    "broker:\n  kind: memory\n",
			environ: []string{"EVENTPIPE_BROKER=rabbitmq"},
			want:    func(c *config.Config) { c.Broker.Kind = config.KindRabbitMQ },
		},
		{
			name:    "EVENTPIPE_BROKER_KIND wins over the alias",
			environ: []string{"EVENTPIPE_BROKER=sqs", "EVENTPIPE_BROKER_KIND=rabbitmq"},
			want:    func(c *config.Config) { c.Broker.Kind = config.KindRabbitMQ },
		},
		{
			name:    "empty EVENTPIPE_BROKER_KIND counts as unset, so the alias applies",
			environ: []string{"EVENTPIPE_BROKER_KIND=", "EVENTPIPE_BROKER=rabbitmq"},
			want:    func(c *config.Config) { c.Broker.Kind = config.KindRabbitMQ },
		},
		{
			name:    "empty variable counts as unset",
			yaml:    "log:\n  level: warn\n",
			environ: []string{"EVENTPIPE_LOG_LEVEL=", "EVENTPIPE_ADMIN_ADDR="},
			want:    func(c *config.Config) { c.Log.Level = config.LevelWarn },
		},
		{
			name: "other variables are ignored",
			environ: []string{
				"AWS_REGION=eu-west-1", "AWS_ENDPOINT_URL_SQS=http://127.0.0.1:9324",
				"EVENTPIPE_TEST_POSTGRES_DSN=postgres://x", "EVENTPIPE_CONFIG=/nope.yaml", "NOT_A_PAIR",
			},
			want: func(*config.Config) {},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := ""
			if tt.yaml != "" {
				path = writeConfig(t, tt.yaml)
			}
			got, err := config.Load(path, tt.environ)
			require.NoError(t, err)
			want := config.Defaults()
			tt.want(&want)
			assert.Equal(t, want, got)
		})
	}
}

func TestLoadProblems(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		yaml    string
		environ []string
		want    []string // Problem.String() of each problem, in order; "FILE" stands for the file's path
	}{
		{
			name: "unknown key names its path and line",
			yaml: "sqs:\n  batchsize: 5\n",
			want: []string{"sqs.batchsize: unknown key; did you mean batch_size? (FILE:2)"},
		},
		{
			name: "unknown section lists the known ones",
			yaml: "log:\n  level: info\nkafka:\n  brokers: x\n",
			want: []string{"kafka: unknown key; known keys: " + sectionNames() + " (FILE:3)"},
		},
		{
			name: "three mistakes, three problems",
			yaml: `
broker:
  kind: kafka
sqs:
  batchsize: 5
  wait_time: 30s
`,
			want: []string{
				"sqs.batchsize: unknown key; did you mean batch_size? (FILE:5)",
				`broker.kind: "kafka" is not one of memory, rabbitmq, sqs, postgres (FILE:3)`,
				"sqs.wait_time: 30s is out of range 1s..20s (FILE:6)",
			},
		},
		{
			name: "wrong types",
			yaml: `
sqs:
  batch_size: ten
  workers: 1.5
  wait_time: 20
  create_queues: maybe
  region: [eu-west-1]
`,
			want: []string{
				`sqs.batch_size: "ten" is not an integer (FILE:3)`,
				`sqs.workers: "1.5" is not an integer (FILE:4)`,
				`sqs.wait_time: "20" is not a duration such as "20s" or "100ms" (FILE:5)`,
				`sqs.create_queues: "maybe" is not true or false (FILE:6)`,
				`sqs.region: want a string, got a list (FILE:7)`,
			},
		},
		{
			name: "null for a non-string",
			yaml: "rabbitmq:\n  publisher_confirms:\n",
			want: []string{"rabbitmq.publisher_confirms: no value: want true or false (remove the key to keep the default) (FILE:2)"},
		},
		{
			name: "duplicate key",
			yaml: "log:\n  level: info\n  level: debug\n",
			want: []string{"log.level: duplicate key (first at line 2) (FILE:3)"},
		},
		{
			name: "section that is not a mapping",
			yaml: "sqs: fast\n",
			want: []string{`sqs: a section must be a mapping of keys to values, got "fast" (FILE:1)`},
		},
		{
			name: "top level that is not a mapping",
			yaml: "- broker\n",
			want: []string{"the file must be a mapping of keys to values, got a list (FILE:1)"},
		},
		{
			name: "syntax error",
			yaml: "broker:\n  kind: memory\n bad indent: x\n",
			want: []string{"line 2: did not find expected key (FILE)"},
		},
		{
			name: "two documents",
			yaml: "broker:\n  kind: memory\n---\nbroker:\n  kind: sqs\n",
			want: []string{"a second YAML document: a config file holds one (FILE:3)"},
		},
		{
			name:    "bad env values name their variables",
			environ: []string{"EVENTPIPE_SQS_BATCH_SIZE=ten", "EVENTPIPE_SERVE_SHUTDOWN_TIMEOUT=30", "EVENTPIPE_DEMO_ENABLED=yes please"},
			want: []string{
				`sqs.batch_size: "ten" is not an integer (EVENTPIPE_SQS_BATCH_SIZE)`,
				`serve.shutdown_timeout: "30" is not a duration such as "20s" or "100ms" (EVENTPIPE_SERVE_SHUTDOWN_TIMEOUT)`,
				`demo.enabled: "yes please" is not true or false (EVENTPIPE_DEMO_ENABLED)`,
			},
		},
		{
			name:    "rule broken by an env value names its variable",
			yaml:    "sqs:\n  batch_size: 11\n",
			environ: []string{"EVENTPIPE_BROKER=kafka", "EVENTPIPE_SQS_WORKERS=0"},
			want: []string{
				`broker.kind: "kafka" is not one of memory, rabbitmq, sqs, postgres (EVENTPIPE_BROKER)`,
				"sqs.batch_size: 11 is out of range 1..10 (FILE:2)",
				"sqs.workers: must be at least 1, got 0 (EVENTPIPE_SQS_WORKERS)",
			},
		},
		{
			name: "rule broken by a default has no source",
			yaml: "broker:\n  kind: postgres\n",
			want: []string{"postgres.dsn: required when broker.kind is postgres"},
		},
		{
			name:    "env fixes what the file got wrong, but the file is still reported",
			yaml:    "sqs:\n  batch_size: many\n",
			environ: []string{"EVENTPIPE_SQS_BATCH_SIZE=5"},
			want:    []string{`sqs.batch_size: "many" is not an integer (FILE:2)`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := ""
			if tt.yaml != "" {
				path = writeConfig(t, tt.yaml)
			}
			cfg, err := config.Load(path, tt.environ)
			require.Error(t, err)
			assert.Equal(t, config.Config{}, cfg, "Load returns the zero Config on error")

			var ve *config.ValidationError
			require.ErrorAs(t, err, &ve)
			var got []string
			for _, p := range ve.Problems {
				got = append(got, p.String())
			}
			want := make([]string, len(tt.want))
			for i, w := range tt.want {
				want[i] = strings.ReplaceAll(w, "FILE", path)
			}
			assert.Equal(t, want, got)
		})
	}
}

func TestLoadErrorListsOneProblemPerLine(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, "log:\n  level: loud\n  format: xml\n")
	_, err := config.Load(path, nil)
	require.Error(t, err)
	assert.Equal(t, `invalid config: 2 problems
  log.level: "loud" is not one of debug, info, warn, error (`+path+`:2)
  log.format: "xml" is not one of text, json (`+path+`:3)`, err.Error())
}

func TestLoadMissingFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := config.Load(path, nil)
	require.Error(t, err)
	assert.True(t, errors.Is(err, fs.ErrNotExist), "errors.Is(err, fs.ErrNotExist): %v", err)
	assert.Contains(t, err.Error(), path)
	assert.Contains(t, err.Error(), "read config")
	var ve *config.ValidationError
	assert.False(t, errors.As(err, &ve), "a missing file is an I/O error, not a problem with the content")
}

// TestLoadIgnoresProcessEnvironment: only the environ argument counts. Not
// parallel, since it sets the process environment.
func TestLoadIgnoresProcessEnvironment(t *testing.T) {
	t.Setenv("EVENTPIPE_BROKER", "kafka")
	t.Setenv("EVENTPIPE_SQS_BATCH_SIZE", "ten")
	cfg, err := config.Load("", nil)
	require.NoError(t, err)
	assert.Equal(t, config.Defaults(), cfg)
}

// sectionNames lists Config's YAML sections in declaration order, as the
// unknown-key problem does.
func sectionNames() string {
	t := reflect.TypeFor[config.Config]()
	names := make([]string, t.NumField())
	for i := range t.NumField() {
		names[i] = t.Field(i).Tag.Get("yaml")
	}
	return strings.Join(names, ", ")
}
