package config

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Problem is one thing wrong with a configuration.
type Problem struct {
	// Path is the YAML path of the key concerned, e.g. sqs.batch_size; ""
	// for the file as a whole (a syntax error).
	Path string
	// Message says what is wrong, e.g. `11 is out of range 1..10`. It never
	// repeats a URL's or DSN's password.
	Message string
	// Source says where the offending value came from: "file.yaml:7" for a
	// file and line, an environment variable's name, or "" for a default.
	Source string
}

// String writes the problem on one line: path, message and source.
func (p Problem) String() string {
	var b strings.Builder
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	if p.Source != "" {
		fmt.Fprintf(&b, " (%s)", p.Source)
	}
	return b.String()
}

// ValidationError lists every problem found in a configuration. Load and
// Config.Validate return it as a *ValidationError; callers find it with
// errors.As (the CLI prints it and exits 2).
type ValidationError struct {
	// Problems holds at least one problem: file problems in file order,
	// then environment problems, then broken rules in the order of Config's
	// fields.
	Problems []Problem
}

// Error writes a summary line, then one problem per line.
func (e *ValidationError) Error() string {
	var b strings.Builder
	if len(e.Problems) == 1 {
		b.WriteString("invalid config: 1 problem")
	} else {
		fmt.Fprintf(&b, "invalid config: %d problems", len(e.Problems))
	}
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// problems collects Problems; the zero value is ready to use.
type problems []Problem

func (ps *problems) add(path, format string, args ...any) {
	*ps = append(*ps, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// err returns the problems as a *ValidationError, or nil when there are none.
func (ps problems) err() error {
	if len(ps) == 0 {
		return nil
	}
	return &ValidationError{Problems: ps}
}

// Limits of the broker APIs that the rules below enforce.
const (
	maxPrefetch        = 65535       // basic.qos prefetch-count is an AMQP short
	maxChannels        = 2047        // RabbitMQ's default channel_max
	maxAckDelay        = time.Second // longer only holds the prefetch window and redelivers more after a crash
	maxPostgresWorkers = 64          // the Postgres broker's own cap: each loop may hold a pool connection
	maxSQSBatch        = 10
	maxSQSWait         = 20 * time.Second
	maxSQSVisibility   = 12 * time.Hour
	sqsDurationDivisor = time.Second // SQS takes these durations in whole seconds
	maxSQSQueueName    = 80          // SQS queue names, .fifo included
)

// sqsQueuePrefix is what may begin an SQS queue name: the characters SQS
// allows, leaving room for at least one more. The broker checks each whole
// name (with its 80-character limit) against the enabled specs' queues.
var sqsQueuePrefix = regexp.MustCompile(`^[A-Za-z0-9_-]{0,79}$`)

// Validate reports every problem with c, each with its YAML path, as a
// *ValidationError; nil when c is usable. Connection targets (rabbitmq.url,
// sqs.endpoint, postgres.dsn) are checked only for the broker broker.kind
// selects, so a deployment may leave the others empty or stale; every other
// value is checked whatever the kind, because it is never valid.
func (c Config) Validate() error {
	var ps problems

	if !slices.Contains(Kinds(), c.Broker.Kind) {
		ps.add("broker.kind", "%q is not one of %s", c.Broker.Kind, strings.Join(Kinds(), ", "))
	}

	atLeast(&ps, "memory.output_buffer", c.Memory.OutputBuffer, 1)
	inRange(&ps, "memory.prefetch", c.Memory.Prefetch, 1, maxPrefetch)

	if c.Broker.Kind == KindRabbitMQ {
		checkURL(&ps, "rabbitmq.url", c.RabbitMQ.URL, amqpURL)
	}
	inRange(&ps, "rabbitmq.prefetch", c.RabbitMQ.Prefetch, 1, maxPrefetch)
	durationInRange(&ps, "rabbitmq.ack_delay", c.RabbitMQ.AckDelay, 0, maxAckDelay, time.Microsecond)
	inRange(&ps, "rabbitmq.channel_pool_size", c.RabbitMQ.ChannelPoolSize, 1, maxChannels)
	if c.RabbitMQ.QueueType != "" {
		oneOf(&ps, "rabbitmq.queue_type", c.RabbitMQ.QueueType, QueueTypeAsDeclared, QueueTypeClassic, QueueTypeQuorum)
	}

	if c.Broker.Kind == KindSQS && c.SQS.Endpoint != "" {
		checkURL(&ps, "sqs.endpoint", c.SQS.Endpoint, endpointURL)
	}
	inRange(&ps, "sqs.batch_size", c.SQS.BatchSize, 1, maxSQSBatch)
	atLeast(&ps, "sqs.workers", c.SQS.Workers, 1)
	durationInRange(&ps, "sqs.wait_time", c.SQS.WaitTime, time.Second, maxSQSWait, sqsDurationDivisor)
	durationInRange(&ps, "sqs.nack_visibility", c.SQS.NackVisibility, 0, maxSQSVisibility, sqsDurationDivisor)
	if !sqsQueuePrefix.MatchString(c.SQS.QueuePrefix) {
		ps.add("sqs.queue_prefix", "%q: want ASCII letters, digits, - and _ only, at most %d characters (SQS queue names allow nothing else)", c.SQS.QueuePrefix, maxSQSQueueName-1)
	}

	if c.Broker.Kind == KindPostgres {
		switch {
		case strings.TrimSpace(c.Postgres.DSN) == "":
			ps.add("postgres.dsn", "required when broker.kind is postgres")
		case strings.Contains(c.Postgres.DSN, "://"):
			checkURL(&ps, "postgres.dsn", c.Postgres.DSN, postgresURL)
		}
	}
	atLeast(&ps, "postgres.max_conns", c.Postgres.MaxConns, 1)
	inRange(&ps, "postgres.workers", c.Postgres.Workers, 1, maxPostgresWorkers)
	positive(&ps, "postgres.poll_interval", c.Postgres.PollInterval)
	if !schemaName.MatchString(c.Postgres.Schema) {
		ps.add("postgres.schema", "%q is not a plain schema name: a lowercase letter or _, then lowercase letters, digits or _, at most 56 bytes", c.Postgres.Schema)
	}
	inRange(&ps, "outbox.batch_size", c.Outbox.BatchSize, 1, 1000)
	positive(&ps, "outbox.poll_interval", c.Outbox.PollInterval)
	atLeast(&ps, "outbox.max_attempts", c.Outbox.MaxAttempts, 1)
	positive(&ps, "outbox.retention", c.Outbox.Retention)
	positive(&ps, "inbox.ttl", c.Inbox.TTL)
	positive(&ps, "interviews.stale_claim", c.Interviews.StaleClaim)
	if t := c.Disputes.AMLThreshold; !(t > 0 && t <= 100) {
		ps.add("disputes.aml_threshold", "must be more than 0 and at most 100, got %g", t)
	}
	positive(&ps, "disputes.default_tat", c.Disputes.DefaultTAT)
	if b := c.Disputes.S3Bucket; b != "" && (!bucketName.MatchString(b) || strings.Contains(b, "..") || net.ParseIP(b) != nil) {
		ps.add("disputes.s3_bucket", "%q is not an S3 bucket name: 3 to 63 lowercase letters, digits, '.' and '-', starting and ending with a letter or digit", b)
	}
	if a := c.Disputes.S3SourceAccount; a != "" && !accountID.MatchString(a) {
		ps.add("disputes.s3_source_account", "%q is not a 12-digit AWS account id", a)
	}
	if c.Disputes.S3Endpoint != "" {
		checkURL(&ps, "disputes.s3_endpoint", c.Disputes.S3Endpoint, endpointURL)
	}
	atLeast(&ps, "disputes.s3_max_object_size", c.Disputes.S3MaxObjectSize, 1)
	positive(&ps, "disputes.s3_timeout", c.Disputes.S3Timeout)
	if c.Disputes.APIAddr != "" {
		checkAddr(&ps, "disputes.api_addr", c.Disputes.APIAddr)
	}
	positive(&ps, "disputes.reminder_sweep_interval", c.Disputes.ReminderSweepInterval)
	if c.Disputes.ReversalURL != "" {
		checkURL(&ps, "disputes.reversal_url", c.Disputes.ReversalURL, endpointURL)
	}
	if e := c.Disputes.ReversalTokenEnv; e != "" && !envVarName.MatchString(e) {
		ps.add("disputes.reversal_token_env", "%q is not an environment variable name (letters, digits and _, not starting with a digit)", e)
	}
	positive(&ps, "disputes.reversal_timeout", c.Disputes.ReversalTimeout)
	positive(&ps, "disputes.reversal_interval", c.Disputes.ReversalInterval)
	atLeast(&ps, "disputes.reversal_max_attempts", c.Disputes.ReversalMaxAttempts, 1)
	positive(&ps, "joinlink.dispatch_interval", c.JoinLink.DispatchInterval)
	positive(&ps, "joinlink.bulk_register_timeout", c.JoinLink.BulkRegisterTimeout)
	if c.JoinLink.BulkRegisterURL != "" {
		checkURL(&ps, "joinlink.bulk_register_url", c.JoinLink.BulkRegisterURL, endpointURL)
	}
	if _, err := cron.ParseStandard(c.JoinLink.FallbackSchedule); err != nil {
		ps.add("joinlink.fallback_schedule", "%q is not a cron expression (minute hour day-of-month month day-of-week, or @hourly …): %v", c.JoinLink.FallbackSchedule, err)
	}
	checkURL(&ps, "llm.base_url", c.LLM.BaseURL, endpointURL)
	if strings.TrimSpace(c.LLM.Model) == "" {
		ps.add("llm.model", "must not be empty")
	}
	if !envVarName.MatchString(c.LLM.APIKeyEnv) {
		ps.add("llm.api_key_env", "%q is not an environment variable name (letters, digits and _, not starting with a digit)", c.LLM.APIKeyEnv)
	}
	positive(&ps, "llm.timeout", c.LLM.Timeout)
	for _, role := range strings.Split(c.StackUp.Roles, ",") {
		oneOf(&ps, "stackup.roles", strings.TrimSpace(role), "core", "ai-worker", "realtime")
	}
	oneOf(&ps, "stackup.processors", c.StackUp.Processors, "real", "llm", "sample")
	if c.StackUp.S3Endpoint != "" {
		checkURL(&ps, "stackup.s3_endpoint", c.StackUp.S3Endpoint, endpointURL)
	}
	if c.StackUp.InternalURL != "" {
		checkURL(&ps, "stackup.internal_url", c.StackUp.InternalURL, endpointURL)
	}
	checkURL(&ps, "stackup.github_api_url", c.StackUp.GitHubAPIURL, endpointURL)
	atLeast(&ps, "stackup.max_attempts", c.StackUp.MaxAttempts, 1)
	positive(&ps, "stackup.backoff_initial", c.StackUp.BackoffInitial)
	if c.StackUp.BackoffMax < c.StackUp.BackoffInitial {
		ps.add("stackup.backoff_max", "%s is less than backoff_initial (%s)", c.StackUp.BackoffMax, c.StackUp.BackoffInitial)
	}
	if c.StackUp.SampleInterval < 0 {
		ps.add("stackup.sample_interval", "must not be negative")
	}
	if c.StackUp.InternalAddr != "" {
		checkAddr(&ps, "stackup.internal_addr", c.StackUp.InternalAddr)
	}
	inRange(&ps, "stackup.embedding_dimension", c.StackUp.EmbeddingDimension, 1, 16000)
	r := c.Realtime
	oneOf(&ps, "realtime.fanout", r.Fanout, "auto", "none", "rabbitmq", "postgres")
	if r.Fanout == "rabbitmq" && c.Broker.Kind != KindRabbitMQ {
		ps.add("realtime.fanout", "rabbitmq needs broker.kind rabbitmq")
	}
	realtimeOn := c.StackUp.Enabled && strings.Contains(c.StackUp.Roles, "realtime")
	if realtimeOn && (r.Fanout == "postgres" || r.Fanout == "auto" && (c.Broker.Kind == KindSQS || c.Broker.Kind == KindPostgres)) && c.Postgres.DSN == "" {
		ps.add("realtime.fanout", "the fan-out between instances on %s uses PostgreSQL LISTEN/NOTIFY: set postgres.dsn, or realtime.fanout: none for one instance", c.Broker.Kind)
	}
	if r.Addr != "" {
		checkAddr(&ps, "realtime.addr", r.Addr)
	}
	atLeast(&ps, "realtime.client_buffer", r.ClientBuffer, 1)
	atLeast(&ps, "realtime.window_bytes", r.WindowBytes, 1)
	atLeast(&ps, "realtime.max_data_bytes", r.MaxDataBytes, 1)
	positive(&ps, "realtime.window_ttl", r.WindowTTL)
	positive(&ps, "realtime.heartbeat", r.Heartbeat)

	if c.Admin.Addr != "" {
		checkAddr(&ps, "admin.addr", c.Admin.Addr)
	}
	if c.Admin.TokenSecretEnv != "" && !envVarName.MatchString(c.Admin.TokenSecretEnv) {
		ps.add("admin.token_secret_env", "%q is not an environment variable name (letters, digits and _, not starting with a digit)", c.Admin.TokenSecretEnv)
	}
	if c.Admin.TokenJWKSURL != "" {
		checkURL(&ps, "admin.token_jwks_url", c.Admin.TokenJWKSURL, endpointURL)
	}
	positive(&ps, "admin.token_jwks_refresh", c.Admin.TokenJWKSRefresh)
	if l := c.Admin.TokenLeeway; l < 0 || l > 5*time.Minute {
		ps.add("admin.token_leeway", "%s is out of range 0s..5m0s", l)
	}
	if c.Booking.GatewayAddr != "" {
		checkAddr(&ps, "booking.gateway_addr", c.Booking.GatewayAddr)
	}
	if c.Interviews.APIAddr != "" {
		checkAddr(&ps, "interviews.api_addr", c.Interviews.APIAddr)
	}

	oneOf(&ps, "log.level", c.Log.Level, LevelDebug, LevelInfo, LevelWarn, LevelError)
	oneOf(&ps, "log.format", c.Log.Format, FormatText, FormatJSON)

	positive(&ps, "serve.shutdown_timeout", c.Serve.ShutdownTimeout)
	if c.Serve.ConnectTimeout < 0 {
		ps.add("serve.connect_timeout", "must not be negative, got %s (0s retries until interrupted)", c.Serve.ConnectTimeout)
	}

	atLeast(&ps, "serve.max_concurrency", c.Serve.MaxConcurrency, 0)

	positive(&ps, "demo.interval", c.Demo.Interval)

	oneOf(&ps, "telemetry.exporter", c.Telemetry.Exporter, ExporterNone, ExporterStdout, ExporterOTLP)
	if c.Telemetry.Exporter == ExporterOTLP && strings.TrimSpace(c.Telemetry.Endpoint) == "" {
		ps.add("telemetry.endpoint", "required when telemetry.exporter is otlp")
	}
	if strings.TrimSpace(c.Telemetry.ServiceName) == "" {
		ps.add("telemetry.service_name", "must not be empty")
	}
	if r := c.Telemetry.SampleRatio; !(r > 0 && r <= 1) { // also rejects NaN
		ps.add("telemetry.sample_ratio", "must be more than 0 and at most 1, got %v", r)
	}
	return ps.err()
}

// envVarName is a portable environment variable name.
var envVarName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// bucketName is the shape of an S3 bucket name (S3's rules for new
// buckets; topology.ValidBucketName, which the deployed topology runs too,
// also refuses ".." and IP addresses, as Validate does).
var bucketName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// accountID is an AWS account id.
var accountID = regexp.MustCompile(`^[0-9]{12}$`)

// schemaName is what migrations.ValidateSchema accepts.
var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,55}$`)

func inRange(ps *problems, path string, v, lo, hi int) {
	if v < lo || v > hi {
		ps.add(path, "%d is out of range %d..%d", v, lo, hi)
	}
}

func atLeast(ps *problems, path string, v, lo int) {
	if v < lo {
		ps.add(path, "must be at least %d, got %d", lo, v)
	}
}

func positive(ps *problems, path string, d time.Duration) {
	if d <= 0 {
		ps.add(path, "must be more than 0s, got %s", d)
	}
}

// durationInRange checks lo <= d <= hi and that d is a whole multiple of unit.
func durationInRange(ps *problems, path string, d, lo, hi, unit time.Duration) {
	switch {
	case d < 0:
		ps.add(path, "must not be negative, got %s", d)
	case d < lo || d > hi:
		ps.add(path, "%s is out of range %s..%s", d, lo, hi)
	case d%unit != 0:
		ps.add(path, "%s is not a whole number of %s", d, unitName(unit))
	}
}

func unitName(unit time.Duration) string {
	if unit == time.Second {
		return "seconds"
	}
	return "multiples of " + unit.String()
}

func oneOf(ps *problems, path, v string, allowed ...string) {
	if !slices.Contains(allowed, v) {
		ps.add(path, "%q is not one of %s", v, strings.Join(allowed, ", "))
	}
}

// urlRule is what checkURL asks of a URL.
type urlRule struct {
	schemes []string
	// showValue allows a URL that fails to parse to be shown. Credentials-
	// bearing URLs and DSNs must not be, since the parse error repeats them;
	// a URL that parses is shown with its password removed.
	showValue bool
	// needHost rejects a URL without a host (libpq URLs may leave it out
	// for a Unix socket; AMQP and HTTP URLs may not).
	needHost bool
}

var (
	amqpURL     = urlRule{schemes: []string{"amqp", "amqps"}, needHost: true}
	endpointURL = urlRule{schemes: []string{"http", "https"}, showValue: true, needHost: true}
	postgresURL = urlRule{schemes: []string{"postgres", "postgresql"}}
)

// checkURL checks that raw is an absolute URL that rule allows.
func checkURL(ps *problems, path, raw string, rule urlRule) {
	want := make([]string, len(rule.schemes))
	for i, s := range rule.schemes {
		want[i] = s + "://"
	}
	wantText := strings.Join(want, " or ")
	u, err := url.Parse(raw)
	switch {
	case err != nil && rule.showValue:
		ps.add(path, "%q is not a URL starting with %s", raw, wantText)
	case err != nil:
		ps.add(path, "not a URL starting with %s (value not shown: it may hold a password)", wantText)
	case !slices.Contains(rule.schemes, u.Scheme):
		ps.add(path, "%q is not a URL starting with %s", u.Redacted(), wantText)
	case rule.needHost && u.Host == "":
		ps.add(path, "%q has no host", u.Redacted())
	case u.Port() != "" && !validPort(u.Port(), 1):
		ps.add(path, "%q has an invalid port", u.Redacted())
	}
}

// validPort reports whether port is a number in min..65535.
func validPort(port string, min int) bool {
	n, err := strconv.Atoi(port)
	return err == nil && n >= min && n <= 65535
}

// checkAddr checks a listen address: host:port with a numeric port (0 picks
// a free one); the host may be empty to listen on every interface.
func checkAddr(ps *problems, path, addr string) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		ps.add(path, "%q is not host:port (e.g. 127.0.0.1:9090; \"\" turns it off)", addr)
		return
	}
	if !validPort(port, 0) {
		ps.add(path, "%q has an invalid port: want a number in 0..65535", addr)
	}
}
