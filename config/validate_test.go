package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/config"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		modify func(*config.Config)
		want   []config.Problem // nil: valid
	}{
		{
			name:   "unknown broker kind names the allowed kinds",
			modify: func(c *config.Config) { c.Broker.Kind = "kafka" },
			want:   []config.Problem{{Path: "broker.kind", Message: `"kafka" is not one of memory, rabbitmq, sqs, postgres`}},
		},
		{
			name:   "kind is case-sensitive",
			modify: func(c *config.Config) { c.Broker.Kind = "RabbitMQ" },
			want:   []config.Problem{{Path: "broker.kind", Message: `"RabbitMQ" is not one of memory, rabbitmq, sqs, postgres`}},
		},
		{
			name:   "postgres needs a dsn",
			modify: func(c *config.Config) { c.Broker.Kind = config.KindPostgres },
			want:   []config.Problem{{Path: "postgres.dsn", Message: "required when broker.kind is postgres"}},
		},
		{
			name: "postgres key=value dsn",
			modify: func(c *config.Config) {
				c.Broker.Kind = config.KindPostgres
				c.Postgres.DSN = "host=127.0.0.1 user=postgres dbname=test sslmode=disable"
			},
		},
		{
			name: "postgres url dsn with the wrong scheme hides the password",
			modify: func(c *config.Config) {
				c.Broker.Kind = config.KindPostgres
				c.Postgres.DSN = "mysql://root:hunter2@db/app"
			},
			want: []config.Problem{{Path: "postgres.dsn", Message: `"mysql://root:xxxxx@db/app" is not a URL starting with postgres:// or postgresql://`}},
		},
		{
			name: "stale dsn is not checked for another kind",
			modify: func(c *config.Config) {
				c.Postgres.DSN = "mysql://whatever"
				c.RabbitMQ.URL = "not a url at all"
			},
		},
		{
			name: "rabbitmq url must be amqp",
			modify: func(c *config.Config) {
				c.Broker.Kind = config.KindRabbitMQ
				c.RabbitMQ.URL = "http://guest:guest@127.0.0.1:15672/"
			},
			want: []config.Problem{{Path: "rabbitmq.url", Message: `"http://guest:xxxxx@127.0.0.1:15672/" is not a URL starting with amqp:// or amqps://`}},
		},
		{
			name: "unparseable rabbitmq url is not echoed",
			modify: func(c *config.Config) {
				c.Broker.Kind = config.KindRabbitMQ
				c.RabbitMQ.URL = "amqp://guest:hunter2@127.0.0.1:port/"
			},
			want: []config.Problem{{Path: "rabbitmq.url", Message: "not a URL starting with amqp:// or amqps:// (value not shown: it may hold a password)"}},
		},
		{
			name: "rabbitmq url needs a host",
			modify: func(c *config.Config) {
				c.Broker.Kind = config.KindRabbitMQ
				c.RabbitMQ.URL = "amqp:///vhost"
			},
			want: []config.Problem{{Path: "rabbitmq.url", Message: `"amqp:///vhost" has no host`}},
		},
		{
			name: "rabbitmq limits",
			modify: func(c *config.Config) {
				c.RabbitMQ.Prefetch = 0
				c.RabbitMQ.ChannelPoolSize = 5000
			},
			want: []config.Problem{
				{Path: "rabbitmq.prefetch", Message: "0 is out of range 1..65535"},
				{Path: "rabbitmq.channel_pool_size", Message: "5000 is out of range 1..2047"},
			},
		},
		{
			name: "rabbitmq queue type",
			modify: func(c *config.Config) {
				c.RabbitMQ.QueueType = "stream"
			},
			want: []config.Problem{{Path: "rabbitmq.queue_type", Message: `"stream" is not one of as-declared, classic, quorum`}},
		},
		{
			name: "rabbitmq queue type empty means as declared",
			modify: func(c *config.Config) {
				c.RabbitMQ.QueueType = ""
			},
		},
		{
			name: "sqs endpoint must be http",
			modify: func(c *config.Config) {
				c.Broker.Kind = config.KindSQS
				c.SQS.Endpoint = "127.0.0.1:9324"
			},
			want: []config.Problem{{Path: "sqs.endpoint", Message: `"127.0.0.1:9324" is not a URL starting with http:// or https://`}},
		},
		{
			name: "sqs endpoint must have a scheme it knows",
			modify: func(c *config.Config) {
				c.Broker.Kind = config.KindSQS
				c.SQS.Endpoint = "tcp://127.0.0.1:9324"
			},
			want: []config.Problem{{Path: "sqs.endpoint", Message: `"tcp://127.0.0.1:9324" is not a URL starting with http:// or https://`}},
		},
		{
			name: "sqs without endpoint or region uses the AWS default chain",
			modify: func(c *config.Config) {
				c.Broker.Kind = config.KindSQS
			},
		},
		{
			name: "sqs limits",
			modify: func(c *config.Config) {
				c.SQS.BatchSize = 11
				c.SQS.Workers = 0
				c.SQS.WaitTime = 1500 * time.Millisecond
				c.SQS.NackVisibility = -time.Second
			},
			want: []config.Problem{
				{Path: "sqs.batch_size", Message: "11 is out of range 1..10"},
				{Path: "sqs.workers", Message: "must be at least 1, got 0"},
				{Path: "sqs.wait_time", Message: "1.5s is not a whole number of seconds"},
				{Path: "sqs.nack_visibility", Message: "must not be negative, got -1s"},
			},
		},
		{
			name:   "sqs visibility over 12h",
			modify: func(c *config.Config) { c.SQS.NackVisibility = 13 * time.Hour },
			want:   []config.Problem{{Path: "sqs.nack_visibility", Message: "13h0m0s is out of range 0s..12h0m0s"}},
		},
		{
			name:   "sqs queue prefix with a dot",
			modify: func(c *config.Config) { c.SQS.QueuePrefix = "stage." },
			want: []config.Problem{{Path: "sqs.queue_prefix",
				Message: `"stage.": want ASCII letters, digits, - and _ only, at most 79 characters (SQS queue names allow nothing else)`}},
		},
		{
			name:   "sqs queue prefix filling the whole name",
			modify: func(c *config.Config) { c.SQS.QueuePrefix = strings.Repeat("p", 80) },
			want: []config.Problem{{Path: "sqs.queue_prefix",
				Message: `"` + strings.Repeat("p", 80) + `": want ASCII letters, digits, - and _ only, at most 79 characters (SQS queue names allow nothing else)`}},
		},
		{
			name:   "sqs queue prefix like the interviews spec's stage names",
			modify: func(c *config.Config) { c.SQS.QueuePrefix = "sophia-dev-" },
		},
		{
			name: "admin addr",
			modify: func(c *config.Config) {
				c.Admin.Addr = "localhost"
			},
			want: []config.Problem{{Path: "admin.addr", Message: `"localhost" is not host:port (e.g. 127.0.0.1:9090; "" turns it off)`}},
		},
		{
			name:   "admin port out of range",
			modify: func(c *config.Config) { c.Admin.Addr = ":99999" },
			want:   []config.Problem{{Path: "admin.addr", Message: `":99999" has an invalid port: want a number in 0..65535`}},
		},
		{
			name:   "booking gateway addr",
			modify: func(c *config.Config) { c.Booking.GatewayAddr = "8081" },
			want:   []config.Problem{{Path: "booking.gateway_addr", Message: `"8081" is not host:port (e.g. 127.0.0.1:9090; "" turns it off)`}},
		},
		{
			name:   "booking gateway on loopback, any free port",
			modify: func(c *config.Config) { c.Booking.Enabled, c.Booking.GatewayAddr = true, "127.0.0.1:0" },
		},
		{
			name:   "interviews api addr",
			modify: func(c *config.Config) { c.Interviews.APIAddr = "127.0.0.1:http-alt" },
			want:   []config.Problem{{Path: "interviews.api_addr", Message: `"127.0.0.1:http-alt" has an invalid port: want a number in 0..65535`}},
		},
		{
			name:   "interviews api off",
			modify: func(c *config.Config) { c.Interviews.Enabled, c.Interviews.APIAddr = true, "" },
		},
		{
			name:   "admin off, or on every interface",
			modify: func(c *config.Config) { c.Admin.Addr = "" },
		},
		{
			name:   "admin on every interface, any free port",
			modify: func(c *config.Config) { c.Admin.Addr = ":0" },
		},
		{
			name: "admin tokens from a key set, with issuer and audience",
			modify: func(c *config.Config) {
				c.Admin.TokenJWKSURL = "https://idp.example/.well-known/jwks.json"
				c.Admin.TokenIssuer, c.Admin.TokenAudience, c.Admin.TokenLeeway = "https://idp.example", "eventpipe", 0
			},
		},
		{
			name: "admin token settings",
			modify: func(c *config.Config) {
				c.Admin.TokenSecretEnv = "1SECRET"
				c.Admin.TokenJWKSURL = "idp.example/jwks.json"
				c.Admin.TokenJWKSRefresh = 0
				c.Admin.TokenLeeway = 10 * time.Minute
			},
			want: []config.Problem{
				{Path: "admin.token_secret_env", Message: `"1SECRET" is not an environment variable name (letters, digits and _, not starting with a digit)`},
				{Path: "admin.token_jwks_url", Message: `"idp.example/jwks.json" is not a URL starting with http:// or https://`},
				{Path: "admin.token_jwks_refresh", Message: "must be more than 0s, got 0s"},
				{Path: "admin.token_leeway", Message: "10m0s is out of range 0s..5m0s"},
			},
		},
		{
			name: "every duration and count at once",
			modify: func(c *config.Config) {
				c.Memory.OutputBuffer = 0
				c.Memory.Prefetch = 0
				c.Postgres.MaxConns = -1
				c.Postgres.PollInterval = 0
				c.Log.Level = "verbose"
				c.Log.Format = "logfmt"
				c.Serve.ShutdownTimeout = -time.Second
				c.Serve.ConnectTimeout = -time.Second
				c.Demo.Interval = 0
			},
			want: []config.Problem{
				{Path: "memory.output_buffer", Message: "must be at least 1, got 0"},
				{Path: "memory.prefetch", Message: "0 is out of range 1..65535"},
				{Path: "postgres.max_conns", Message: "must be at least 1, got -1"},
				{Path: "postgres.poll_interval", Message: "must be more than 0s, got 0s"},
				{Path: "log.level", Message: `"verbose" is not one of debug, info, warn, error`},
				{Path: "log.format", Message: `"logfmt" is not one of text, json`},
				{Path: "serve.shutdown_timeout", Message: "must be more than 0s, got -1s"},
				{Path: "serve.connect_timeout", Message: "must not be negative, got -1s (0s retries until interrupted)"},
				{Path: "demo.interval", Message: "must be more than 0s, got 0s"},
			},
		},
		{
			name: "disputes S3 settings",
			modify: func(c *config.Config) {
				c.Disputes.S3Bucket, c.Disputes.S3SourceAccount = "kb-docs.prod", "123456789012"
				c.Disputes.S3Endpoint, c.Disputes.S3PathStyle = "http://127.0.0.1:9324", true
			},
		},
		{
			name: "disputes S3 settings out of shape",
			modify: func(c *config.Config) {
				c.Disputes.S3Bucket, c.Disputes.S3SourceAccount, c.Disputes.S3Endpoint = "KB_Docs", "1234", "127.0.0.1:9324"
				c.Disputes.S3MaxObjectSize, c.Disputes.S3Timeout = 0, 0
			},
			want: []config.Problem{
				{Path: "disputes.s3_bucket", Message: `"KB_Docs" is not an S3 bucket name: 3 to 63 lowercase letters, digits, '.' and '-', starting and ending with a letter or digit`},
				{Path: "disputes.s3_source_account", Message: `"1234" is not a 12-digit AWS account id`},
				{Path: "disputes.s3_endpoint", Message: `"127.0.0.1:9324" is not a URL starting with http:// or https://`},
				{Path: "disputes.s3_max_object_size", Message: "must be at least 1, got 0"},
				{Path: "disputes.s3_timeout", Message: "must be more than 0s, got 0s"},
			},
		},
		{
			name: "disputes API and reversal settings",
			modify: func(c *config.Config) {
				c.Disputes.APIAddr, c.Disputes.ReversalURL, c.Disputes.ReversalTokenEnv = "0.0.0.0:8082", "https://payments.internal/v1/reversals", "PAYMENTS_TOKEN"
			},
		},
		{
			name:   "disputes API off",
			modify: func(c *config.Config) { c.Disputes.APIAddr = "" },
		},
		{
			name: "disputes API and reversal settings out of shape",
			modify: func(c *config.Config) {
				c.Disputes.APIAddr, c.Disputes.ReminderSweepInterval = "8082", 0
				c.Disputes.ReversalURL, c.Disputes.ReversalTokenEnv = "payments.internal/reverse", "1TOKEN"
				c.Disputes.ReversalTimeout, c.Disputes.ReversalInterval, c.Disputes.ReversalMaxAttempts = 0, -time.Second, 0
			},
			want: []config.Problem{
				{Path: "disputes.api_addr", Message: `"8082" is not host:port (e.g. 127.0.0.1:9090; "" turns it off)`},
				{Path: "disputes.reminder_sweep_interval", Message: "must be more than 0s, got 0s"},
				{Path: "disputes.reversal_url", Message: `"payments.internal/reverse" is not a URL starting with http:// or https://`},
				{Path: "disputes.reversal_token_env", Message: `"1TOKEN" is not an environment variable name (letters, digits and _, not starting with a digit)`},
				{Path: "disputes.reversal_timeout", Message: "must be more than 0s, got 0s"},
				{Path: "disputes.reversal_interval", Message: "must be more than 0s, got -1s"},
				{Path: "disputes.reversal_max_attempts", Message: "must be at least 1, got 0"},
			},
		},
		{
			name:   "an IP address is no bucket name",
			modify: func(c *config.Config) { c.Disputes.S3Bucket = "192.168.0.1" },
			want:   []config.Problem{{Path: "disputes.s3_bucket", Message: `"192.168.0.1" is not an S3 bucket name: 3 to 63 lowercase letters, digits, '.' and '-', starting and ending with a letter or digit`}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := config.Defaults()
			tt.modify(&cfg)
			err := cfg.Validate()
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			var ve *config.ValidationError
			require.True(t, errors.As(err, &ve), "want a *ValidationError, got %v", err)
			assert.Equal(t, tt.want, ve.Problems)
			assert.NotContains(t, err.Error(), "hunter2")
		})
	}
}

func TestValidateReturnsUntypedNil(t *testing.T) {
	t.Parallel()
	// A typed nil *ValidationError in an error would make `err != nil` true.
	err := config.Defaults().Validate()
	assert.True(t, err == nil)
}
