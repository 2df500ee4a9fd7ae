// Package config is eventpipe's configuration: one Config value, its defaults
// (Defaults, the only place they live), a loader that layers a YAML file and
// EVENTPIPE_* environment variables over those defaults (Load), and the rules
// a usable configuration obeys (Config.Validate).
//
// # Precedence
//
// From weakest to strongest: Defaults, the YAML file, the environment. For
// broker.kind the environment has two names: EVENTPIPE_BROKER_KIND wins over
// its short alias EVENTPIPE_BROKER when both are set.
//
// # Environment variables
//
// Every key has an override named EVENTPIPE_ followed by its YAML path in upper
// case with dots turned into underscores: sqs.batch_size is
// EVENTPIPE_SQS_BATCH_SIZE. Values are written as in YAML without quotes
// (durations as "20s", booleans as true or false). An empty variable counts as
// unset, so a string key cannot be emptied from the environment (use the file,
// e.g. `admin.addr: ""`). EnvVars lists every variable with its key, default
// and documentation; the README's configuration reference and the CLI's help
// are generated from it. Other EVENTPIPE_* variables (such as the tests'
// EVENTPIPE_TEST_*) are not configuration keys and are ignored here.
//
// The AWS SDK's own variables (AWS_REGION, AWS_ENDPOINT_URL_SQS, AWS_PROFILE,
// AWS_ACCESS_KEY_ID, …) are not read by this package: the SDK reads them
// itself when sqs.region or sqs.endpoint is empty, so they work as they do
// everywhere, and credentials always come from the SDK's default chain.
//
// # Errors
//
// Every problem with a configuration's content (a YAML syntax error, an
// unknown key, a value of the wrong type, a rule broken) is reported in one
// *ValidationError that lists them all, each with its YAML path and where the
// value came from. Only I/O errors, such as a missing file, are reported
// otherwise.
//
// The package is a leaf: it imports nothing else of eventpipe, and the broker
// adapters do not import it (the composition root translates).
package config

import "time"

// The broker kinds that broker.kind accepts.
const (
	// KindMemory is the embedded in-process broker (app/broker/memory); no
	// service needed. The default.
	KindMemory = "memory"
	// KindRabbitMQ is RabbitMQ over AMQP 0-9-1.
	KindRabbitMQ = "rabbitmq"
	// KindSQS is Amazon SQS, or an emulator at sqs.endpoint.
	KindSQS = "sqs"
	// KindPostgres is PostgreSQL used as a queue.
	KindPostgres = "postgres"
)

// Kinds returns every broker kind broker.kind accepts, in the order error
// messages and help texts list them.
func Kinds() []string {
	return []string{KindMemory, KindRabbitMQ, KindSQS, KindPostgres}
}

// Log levels and formats that log.level and log.format accept.
const (
	LevelDebug = "debug"
	LevelInfo  = "info"
	LevelWarn  = "warn"
	LevelError = "error"

	FormatText = "text"
	FormatJSON = "json"
)

// Config is eventpipe's whole configuration. Each field is one YAML section;
// the struct tags give each key its YAML name (yaml), its environment variable
// (envPrefix and env, under EVENTPIPE_) and its one-line documentation (doc),
// which EnvVars reports. Start from Defaults, never from the zero value.
type Config struct {
	// Broker selects the message broker.
	Broker Broker `yaml:"broker" envPrefix:"BROKER_"`
	// Memory configures the embedded broker (broker.kind memory).
	Memory Memory `yaml:"memory" envPrefix:"MEMORY_"`
	// RabbitMQ configures the RabbitMQ broker (broker.kind rabbitmq).
	RabbitMQ RabbitMQ `yaml:"rabbitmq" envPrefix:"RABBITMQ_"`
	// SQS configures the Amazon SQS broker (broker.kind sqs).
	SQS SQS `yaml:"sqs" envPrefix:"SQS_"`
	// Postgres configures the PostgreSQL broker (broker.kind postgres).
	Postgres Postgres `yaml:"postgres" envPrefix:"POSTGRES_"`
	// Admin configures the admin HTTP server (/healthz, /readyz, /metrics).
	Admin Admin `yaml:"admin" envPrefix:"ADMIN_"`
	// Log configures the structured logger.
	Log Log `yaml:"log" envPrefix:"LOG_"`
	// Serve configures the serve command's start and stop.
	Serve Serve `yaml:"serve" envPrefix:"SERVE_"`
	// Demo configures the demo route that `make run` shows.
	Demo Demo `yaml:"demo" envPrefix:"DEMO_"`
	// Telemetry configures OpenTelemetry tracing. Off by default.
	Telemetry Telemetry `yaml:"telemetry" envPrefix:"TELEMETRY_"`
	// Outbox configures the transactional outbox's relay.
	Outbox Outbox `yaml:"outbox" envPrefix:"OUTBOX_"`
	// Inbox configures the processed-messages table.
	Inbox Inbox `yaml:"inbox" envPrefix:"INBOX_"`
	// Interviews configures the interviews spec (credit settlement and
	// report generation).
	Interviews Interviews `yaml:"interviews" envPrefix:"INTERVIEWS_"`
	// LLM configures the OpenAI-compatible chat-completions client.
	LLM LLM `yaml:"llm" envPrefix:"LLM_"`
	// StackUp configures the StackUp Core ↔ AI contract.
	StackUp StackUp `yaml:"stackup" envPrefix:"STACKUP_"`
	// Realtime configures the StackUp RealTime server (SSE), run with the
	// stackup role realtime.
	Realtime Realtime `yaml:"realtime" envPrefix:"REALTIME_"`
	// Disputes configures the disputes spec (domain events through the
	// transactional outbox).
	Disputes Disputes `yaml:"disputes" envPrefix:"DISPUTES_"`
	// JoinLink configures the join-link spec (scheduled join-link generation).
	JoinLink JoinLink `yaml:"joinlink" envPrefix:"JOINLINK_"`
	// Booking configures the booking spec (booking-session events on one
	// SQS FIFO queue).
	Booking Booking `yaml:"booking" envPrefix:"BOOKING_"`
}

// Booking configures the booking session FIFO pipeline spec
// (handlers/booking): the booking-session-processor on
// booking-session-events.fifo, idempotent on the body's eventId. Its store and
// inbox are PostgreSQL when postgres.dsn is set, in memory otherwise.
type Booking struct {
	// Enabled turns the spec's route on.
	Enabled bool `yaml:"enabled" env:"ENABLED" doc:"Run the booking spec: the booking-session processor on booking-session-events.fifo (topology config/topology/booking.yaml)."`
	// SampleTraffic enqueues one booking session's events over both
	// transports (one event twice) when serve starts (make run).
	SampleTraffic bool `yaml:"sample_traffic" env:"SAMPLE_TRAFFIC" doc:"At start, enqueue a sample booking session's events over HTTP and Socket.IO, one of them on both (make run)."`
	// GatewayAddr is the host:port of the widget's gateway: the HTTP
	// controller (POST /booking-session/events) and the Socket.IO v4 server
	// (namespace /booking-session, event session-event), both enqueueing
	// through the one producer. Default "": off, since the gateway is the
	// spec's public entry path and where it listens is the operator's choice
	// (a loopback default would also collide between instances and tests
	// that enable the spec on one machine). Port 0 picks a free port.
	GatewayAddr string `yaml:"gateway_addr" env:"GATEWAY_ADDR" doc:"host:port of the widget's gateway (POST /booking-session/events; Socket.IO v4 namespace /booking-session, event session-event); empty turns it off."`
}

// JoinLink configures the join-link scheduled-generation spec
// (handlers/joinlink): the processor on join-link-generation, the schedules
// (EventBridge Scheduler on SQS, in process elsewhere), the fallback sweep and
// the admin API. Store and schedules are PostgreSQL when postgres.dsn is set,
// in memory otherwise. bulkRegister is an HTTP call to bulk_register_url.
type JoinLink struct {
	// Enabled turns the spec's route on.
	Enabled bool `yaml:"enabled" env:"ENABLED" doc:"Run the join-link spec: the processor on join-link-generation (topology config/topology/joinlink.yaml)."`
	// SampleTraffic schedules one session 2 s ahead and sweeps one missed
	// session when serve starts (make run).
	SampleTraffic bool `yaml:"sample_traffic" env:"SAMPLE_TRAFFIC" doc:"At start, schedule a sample session 2 s ahead and sweep a missed one (make run); needs enable_scheduler; selects the in-memory bulkRegister fake when bulk_register_url is unset."`
	// EnableScheduler is the spec's ENABLE_JOIN_LINK_SCHEDULER (which,
	// when set, decides): register per-session schedules — on EventBridge
	// Scheduler with broker.kind sqs, else in process with a dispatcher.
	EnableScheduler bool `yaml:"enable_scheduler" env:"ENABLE_SCHEDULER" doc:"Register per-session schedules and publish them when due (the spec's ENABLE_JOIN_LINK_SCHEDULER)."`
	// EnableFallbackCron is the spec's ENABLE_JOIN_LINK_FALLBACK_CRON
	// (which, when set, decides): the fallback sweep.
	EnableFallbackCron bool `yaml:"enable_fallback_cron" env:"ENABLE_FALLBACK_CRON" doc:"Run the 4-hourly fallback sweep (the spec's ENABLE_JOIN_LINK_FALLBACK_CRON)."`
	// DispatchInterval is how often due schedules are polled.
	DispatchInterval time.Duration `yaml:"dispatch_interval" env:"DISPATCH_INTERVAL" doc:"How often due schedules are published (more than 0s)."`
	// FallbackSchedule is when the fallback sweep runs, a five-field cron
	// expression on the wall clock in UTC (or a descriptor such as
	// @hourly; an @every interval counts from the zero time — from midnight
	// UTC when it divides a day — so that the replicas share its ticks). Default "0 */4 * * *", the spec's "every
	// 4h"; serve also sweeps once at start.
	FallbackSchedule string `yaml:"fallback_schedule" env:"FALLBACK_SCHEDULE" doc:"When the fallback sweep runs: a cron expression in UTC (minute hour day month weekday, or @hourly …); serve also sweeps at start."`
	// SystemActorID is the updated_by of the status writes no user asked
	// for (the sweep's, an event's without actorUserId). Default -1, an id
	// no user has; set it to the system user's id where updated_by
	// references a users table. 0 leaves those writes' updated_by NULL.
	SystemActorID int64 `yaml:"system_actor_id" env:"SYSTEM_ACTOR_ID" doc:"updated_by of the status writes no user asked for (the sweep's); 0 leaves it NULL."`
	// SchedulerTargetQueueARN is the join-link-generation queue's ARN, the
	// target of the EventBridge Scheduler schedules (broker.kind sqs). The
	// spec's AWS_SCHEDULER_TARGET_QUEUE_ARN is read when this is empty.
	SchedulerTargetQueueARN string `yaml:"scheduler_target_queue_arn" env:"SCHEDULER_TARGET_QUEUE_ARN" doc:"ARN of the join-link-generation SQS queue the EventBridge schedules target (broker sqs); AWS_SCHEDULER_TARGET_QUEUE_ARN when empty."`
	// SchedulerExecutionRoleARN is the role EventBridge Scheduler assumes
	// to send to the queue. AWS_SCHEDULER_EXECUTION_ROLE_ARN when empty.
	SchedulerExecutionRoleARN string `yaml:"scheduler_execution_role_arn" env:"SCHEDULER_EXECUTION_ROLE_ARN" doc:"Execution role EventBridge Scheduler assumes to send to the queue (broker sqs); AWS_SCHEDULER_EXECUTION_ROLE_ARN when empty."`
	// SchedulerGroupName is the schedule group; "" (and an unset
	// AWS_SCHEDULER_GROUP_NAME) is EventBridge's "default".
	SchedulerGroupName string `yaml:"scheduler_group_name" env:"SCHEDULER_GROUP_NAME" doc:"EventBridge Scheduler schedule group (broker sqs); AWS_SCHEDULER_GROUP_NAME when empty, else default."`
	// SchedulerEndpoint overrides the EventBridge Scheduler endpoint (an
	// emulator). Default "": the AWS SDK decides.
	SchedulerEndpoint string `yaml:"scheduler_endpoint" env:"SCHEDULER_ENDPOINT" doc:"EventBridge Scheduler endpoint URL; empty lets the AWS SDK decide."`
	// BulkRegisterURL is the online-session subsystem's bulkRegister
	// endpoint (POST, JSON). Required to run the spec unless
	// sample_traffic selects the in-memory fake.
	BulkRegisterURL string `yaml:"bulk_register_url" env:"BULK_REGISTER_URL" doc:"bulkRegister endpoint of the online-session subsystem (POST, JSON); required unless sample_traffic selects the in-memory fake."`
	// BulkRegisterTokenEnv names the variable holding bulkRegister's bearer
	// token; unset or empty sends none.
	BulkRegisterTokenEnv string `yaml:"bulk_register_token_env" env:"BULK_REGISTER_TOKEN_ENV" doc:"Name of the environment variable holding bulkRegister's bearer token; none is sent when it is unset."`
	// BulkRegisterTimeout bounds one bulkRegister call. Default 10s.
	BulkRegisterTimeout time.Duration `yaml:"bulk_register_timeout" env:"BULK_REGISTER_TIMEOUT" doc:"Time limit of one bulkRegister call (more than 0s)."`
}

// Disputes configures the disputes outbox domain-events spec
// (handlers/disputes): the events-worker on domain-events, and the
// ingest-worker on ingest-queue — reading the documents of S3 ObjectCreated
// notifications from S3Bucket with the S3 adapter, or, with sample traffic
// only, from an in-memory object store. Its store and inbox are PostgreSQL
// when postgres.dsn is set — events then go through the transactional
// outbox, so a relay must run (serve's, outbox.relay) — and in memory
// otherwise (events published right after the in-memory commit).
type Disputes struct {
	// Enabled turns the spec's routes on. Default false.
	Enabled bool `yaml:"enabled" env:"ENABLED" doc:"Run the disputes spec: the events-worker on domain-events, and the ingest-worker on ingest-queue when s3_bucket (or sample_traffic) is set (topology config/topology/disputes.yaml)."`
	// SampleTraffic raises two disputes, flags two transactions and ingests
	// a document when serve starts, so a newcomer sees the outbox and the
	// effects happen (make run). Without S3Bucket the document goes through
	// an S3-style notification on ingest-queue to an ingest-worker reading
	// an in-memory object store; with it, it is recorded directly (the
	// ingest-worker reads only the real bucket). Default false.
	SampleTraffic bool `yaml:"sample_traffic" env:"SAMPLE_TRAFFIC" doc:"At start, raise sample disputes, flag sample transactions and ingest a sample document (make run); without s3_bucket, runs the ingest-worker on an in-memory object store."`
	// S3Bucket is the bucket whose ObjectCreated notifications ingest-queue
	// receives: the ingest-worker reads its documents with the S3 adapter
	// and drops events of other buckets, and `topology apply` on SQS lets
	// S3 send from it (ingest-queue's access policy). Default "": no S3 —
	// the ingest-worker runs only with sample_traffic, and is off (with a
	// log line) otherwise.
	S3Bucket string `yaml:"s3_bucket" env:"S3_BUCKET" doc:"S3 bucket whose ObjectCreated notifications ingest-queue receives: the ingest-worker reads its documents, topology apply lets it send to the queue; empty leaves the ingest-worker off (unless sample_traffic)."`
	// S3SourceAccount is the AWS account id that owns S3Bucket; when set,
	// ingest-queue's access policy requires it of the sender
	// (aws:SourceAccount), as AWS recommends. Default "": no such condition.
	S3SourceAccount string `yaml:"s3_source_account" env:"S3_SOURCE_ACCOUNT" doc:"12-digit AWS account id owning s3_bucket, required of the sender in ingest-queue's access policy (aws:SourceAccount); empty for no such condition."`
	// S3Endpoint overrides the S3 endpoint, e.g. an emulator's
	// http://127.0.0.1:9324. Default "": the AWS SDK decides
	// (AWS_ENDPOINT_URL_S3, else real AWS). The region is sqs.region's (S3
	// notifies only queues in the bucket's region), else the SDK's.
	S3Endpoint string `yaml:"s3_endpoint" env:"S3_ENDPOINT" doc:"S3 endpoint URL, e.g. an emulator's; empty lets the AWS SDK decide (AWS_ENDPOINT_URL_S3, else real AWS). The region is sqs.region's."`
	// S3PathStyle addresses objects as endpoint/bucket/key instead of
	// bucket.endpoint/key: emulators need it. Default false.
	S3PathStyle bool `yaml:"s3_path_style" env:"S3_PATH_STYLE" doc:"Address objects path-style (endpoint/bucket/key), as emulators need; false uses S3's virtual-hosted style."`
	// S3MaxObjectSize is the largest document the ingest-worker reads, in
	// bytes; a larger one is a permanent failure (ingest-dlq after
	// maxReceiveCount). Default 10485760 (10 MiB); at least 1.
	S3MaxObjectSize int `yaml:"s3_max_object_size" env:"S3_MAX_OBJECT_SIZE" doc:"Largest document the ingest-worker reads, in bytes; a larger one fails permanently (at least 1)."`
	// S3Timeout bounds one GetObject, body included. Default 30s: half the
	// ingest-worker's 60 s handler timeout (§3), leaving the rest for the
	// database; more than 0s.
	S3Timeout time.Duration `yaml:"s3_timeout" env:"S3_TIMEOUT" doc:"Time limit of one S3 GetObject, body included (more than 0s)."`
	// AMLThreshold is the risk score (0–100) at or above which a
	// TransactionFlagged review is escalated to AML. Default 80 (the spec
	// names no value); more than 0, at most 100.
	AMLThreshold float64 `yaml:"aml_threshold" env:"AML_THRESHOLD" doc:"Risk score (0-100) at or above which a flagged transaction is escalated to AML (more than 0, at most 100)."`
	// DefaultTAT is a dispute's resolution time when its DisputeRaised
	// carries no tat_due_at: occurred_at + this. Default 120h (5 days);
	// more than 0s.
	DefaultTAT time.Duration `yaml:"default_tat" env:"DEFAULT_TAT" doc:"A dispute's resolution time when its event carries no tat_due_at, from occurred_at (more than 0s)."`
	// APIAddr is the host:port of the producers' HTTP API (POST
	// /v1/disputes with an Idempotency-Key, POST
	// /v1/transactions/{txn_id}/flag). Default "127.0.0.1:8082"; "" turns it
	// off; port 0 picks a free port. Token-protected when admin JWTs are
	// verified (admin.token_*), open otherwise (decision 0022).
	APIAddr string `yaml:"api_addr" env:"API_ADDR" doc:"host:port of the disputes HTTP API (POST /v1/disputes with Idempotency-Key; POST /v1/transactions/{txn_id}/flag); empty turns it off. Bearer JWT required when admin.token_* verify tokens."`
	// ReminderSweepInterval is how often due TAT reminders are fired.
	// Default 1m; more than 0s.
	ReminderSweepInterval time.Duration `yaml:"reminder_sweep_interval" env:"REMINDER_SWEEP_INTERVAL" doc:"How often due TAT reminders are fired (each once, across replicas; more than 0s)."`
	// ReversalURL is the payment system's reversal endpoint (POST, JSON,
	// Idempotency-Key) for eligible failed_but_debited UPI disputes.
	// Default "": with sample_traffic a logging stand-in reverses nothing;
	// otherwise reversals stay pending (a warning at start) until it is set.
	ReversalURL string `yaml:"reversal_url" env:"REVERSAL_URL" doc:"Reversal endpoint of the payment system (POST, JSON, Idempotency-Key) for eligible failed_but_debited UPI disputes; empty leaves reversals pending (sample_traffic: a logging stand-in)."`
	// ReversalTokenEnv names the variable holding the reversal endpoint's
	// bearer token; unset or empty sends none.
	ReversalTokenEnv string `yaml:"reversal_token_env" env:"REVERSAL_TOKEN_ENV" doc:"Name of the environment variable holding the reversal endpoint's bearer token; none is sent when it is unset."`
	// ReversalTimeout bounds one reversal call. Default 10s; more than 0s.
	ReversalTimeout time.Duration `yaml:"reversal_timeout" env:"REVERSAL_TIMEOUT" doc:"Time limit of one reversal call (more than 0s)."`
	// ReversalInterval is how often pending reversals are polled. Default
	// 10s; more than 0s.
	ReversalInterval time.Duration `yaml:"reversal_interval" env:"REVERSAL_INTERVAL" doc:"How often pending reversals are polled (more than 0s)."`
	// ReversalMaxAttempts is how many calls a reversal gets before a
	// transient failure is recorded as failed. Default 10 (about two hours
	// of backoff); at least 1.
	ReversalMaxAttempts int `yaml:"reversal_max_attempts" env:"REVERSAL_MAX_ATTEMPTS" doc:"Calls a reversal gets before transient failures mark it failed (at least 1)."`
}

// Interviews configures the interviews SQS report-queues spec
// (handlers/interviews): the interview-completed and
// report-generate routes. Its store is PostgreSQL when postgres.dsn is set —
// report requests then go through the transactional outbox, so a relay must
// run (serve's, outbox.relay, by default) — and the in-memory store otherwise.
type Interviews struct {
	// Enabled turns the spec's two routes on. Default false.
	Enabled bool `yaml:"enabled" env:"ENABLED" doc:"Run the interviews spec: interview-completed (credit settlement) and report-generate (reports)."`
	// SampleTraffic seeds a sample organisation, credit lots and interviews
	// when serve starts and publishes their completions, so a newcomer sees
	// a settlement and a report happen (make run). Without an LLM API key the
	// reports come from a built-in sample generator. Default false.
	SampleTraffic bool `yaml:"sample_traffic" env:"SAMPLE_TRAFFIC" doc:"At start, seed a sample organisation and publish a few interview completions (make run); without an LLM key, reports come from a built-in sample generator."`
	// StaleClaim is how long a report's PROCESSING claim is honoured before
	// another worker may take it over (a worker that died mid-generation).
	// Default 10m: longer than a generation (llm.timeout), shorter than the
	// report queue's 1800 s visibility; more than 0.
	StaleClaim time.Duration `yaml:"stale_claim" env:"STALE_CLAIM" doc:"How long a report's PROCESSING claim is honoured before another worker may take it over (more than 0s)."`
	// APIAddr is the host:port of the bot callbacks API, the spec's
	// producer as HTTP endpoints (POST /interviews/{interviewId}/bot/complete
	// and /bot/fail publish interview.completed / interview.failed). Default
	// "127.0.0.1:8083", loopback only; "" turns it off; port 0 picks a free
	// port. With admin JWTs verified (admin.token_secret_env or
	// admin.token_jwks_url) a call needs a token with the interview-bot or
	// admin role, else the API is open (decision 0023).
	APIAddr string `yaml:"api_addr" env:"API_ADDR" doc:"host:port of the bot callbacks API (POST /interviews/{interviewId}/bot/complete and /bot/fail); empty turns it off."`
}

// StackUp configures the StackUp RabbitMQ messaging contract
// (handlers/stackup): the roles this process runs, the AI worker's processors,
// the §6 in-process retry and the embedded mode's sample traffic. The llm
// processors use the llm section.
type StackUp struct {
	// Enabled runs the contract (topology config/topology/stackup.yaml).
	Enabled bool `yaml:"enabled" env:"ENABLED" doc:"Run the StackUp Core/AI contract (topology config/topology/stackup.yaml)."`
	// Roles is a comma-separated list of core, ai-worker, realtime: the
	// whole round trip in one process by default.
	Roles string `yaml:"roles" env:"ROLES" doc:"Comma-separated roles: core (callback consumers, outbox requests), ai-worker (request consumers), realtime (notification fan-out)."`
	// AIQueues limits the ai-worker to these request queues
	// (comma-separated); empty means all nine, each needing its processor.
	AIQueues string `yaml:"ai_queues" env:"AI_QUEUES" doc:"Comma-separated request queues the ai-worker consumes; empty for all nine (each needs its processor)."`
	// Processors is real (every queue on real services: the llm section's
	// API, the S3 bucket S3Bucket, Core's internal API at InternalURL;
	// decision 0032), llm (generate.* on the llm section's API; set
	// ai_queues to the three ai.generate.* queues) or sample
	// (deterministic stand-ins, no services: make run selects them
	// explicitly). Default real: a missing credential fails start-up.
	Processors string `yaml:"processors" env:"PROCESSORS" doc:"AI worker processors: real (all nine queues on the llm API, S3 and Core's internal API; missing credentials fail start-up), llm (generate.* queues only) or sample (stand-ins, no services)."`
	// S3Bucket is the bucket of the real processors' objects (resumes,
	// answer audio, analysis documents, reports, TTS audio), keys as the
	// spec names them.
	S3Bucket string `yaml:"s3_bucket" env:"S3_BUCKET" doc:"S3 bucket of the real processors' objects (resumes, audio, analysis documents, reports, TTS audio); required with processors real."`
	// S3Endpoint overrides the S3 endpoint (an emulator); empty lets the
	// AWS SDK decide. The region is sqs.region's.
	S3Endpoint string `yaml:"s3_endpoint" env:"S3_ENDPOINT" doc:"S3 endpoint URL, e.g. an emulator's; empty lets the AWS SDK decide (AWS_ENDPOINT_URL_S3, else real AWS). The region is sqs.region's."`
	// S3PathStyle addresses objects path-style, as emulators need.
	S3PathStyle bool `yaml:"s3_path_style" env:"S3_PATH_STYLE" doc:"Address objects path-style (endpoint/bucket/key), as emulators need."`
	// InternalURL is the base URL the ai-worker calls Core's internal API
	// at (§10: GitHub token, embeddings), with the key internal_api_key_env
	// names; empty = http://internal_addr.
	InternalURL string `yaml:"internal_url" env:"INTERNAL_URL" doc:"Base URL of Core's internal API for the ai-worker's real processors (GitHub token, embeddings); empty = http:// plus internal_addr."`
	// GitHubAPIURL is GitHub's REST API root (GitHub Enterprise: its
	// /api/v3).
	GitHubAPIURL string `yaml:"github_api_url" env:"GITHUB_API_URL" doc:"GitHub REST API root used by analyze.repository (GitHub Enterprise: https://host/api/v3)."`
	// MaxAttempts is §6's in-process attempts per message.
	MaxAttempts int `yaml:"max_attempts" env:"MAX_ATTEMPTS" doc:"In-process attempts per message before the FAILED callback or the DLQ (§6: 3; at least 1)."`
	// BackoffInitial is the first retry wait, doubled per attempt up to
	// BackoffMax.
	BackoffInitial time.Duration `yaml:"backoff_initial" env:"BACKOFF_INITIAL" doc:"First retry wait, doubled per attempt (more than 0s)."`
	// BackoffMax caps the retry wait.
	BackoffMax time.Duration `yaml:"backoff_max" env:"BACKOFF_MAX" doc:"Longest retry wait (at least backoff_initial)."`
	// SampleInterval makes the core role send a sample request every
	// interval (the make run demo); 0s turns it off.
	SampleInterval time.Duration `yaml:"sample_interval" env:"SAMPLE_INTERVAL" doc:"Send a sample StackUp request every interval (core role; 0s = off)."`
	// InternalAddr is the host:port of Core's internal API (§10: GitHub
	// token, embeddings, search, AI logs), served with the core role when
	// the variable InternalAPIKeyEnv names is set; "" turns it off.
	InternalAddr string `yaml:"internal_addr" env:"INTERNAL_ADDR" doc:"host:port of Core's internal API (§10: /api/internal/...), served with the core role when the API key variable is set; empty turns it off."`
	// InternalAPIKeyEnv names the variable holding the X-Internal-API-Key
	// secret (at least 16 bytes); unset = the internal API is off.
	InternalAPIKeyEnv string `yaml:"internal_api_key_env" env:"INTERNAL_API_KEY_ENV" doc:"Name of the environment variable holding the internal API's X-Internal-API-Key secret, at least 16 bytes; unset turns the API off (never put in configuration)."`
	// TokenKeyEnv names the variable holding the AES-256 key (base64 of 32
	// bytes) that encrypts users' GitHub tokens at rest; unset = the token
	// endpoints answer 503.
	TokenKeyEnv string `yaml:"token_key_env" env:"TOKEN_KEY_ENV" doc:"Name of the environment variable holding the AES-256-GCM key (base64 of 32 bytes) encrypting GitHub tokens at rest; unset = token endpoints off (503)."`
	// EmbeddingDimension is the length of every embedding the internal API
	// stores or searches with (1536: OpenAI's text-embedding-3-small).
	EmbeddingDimension int `yaml:"embedding_dimension" env:"EMBEDDING_DIMENSION" doc:"Length of every embedding the internal API stores and searches with; another length is a 400 (1..16000)."`
}

// Realtime configures the StackUp RealTime server (handlers/realtime): SSE
// streams of q.realtime.session.notify, their bearer tokens and the fan-out
// between serve instances (decision 0012). It runs when stackup.enabled and
// stackup.roles includes realtime.
type Realtime struct {
	// Addr is the host:port of the SSE server; port 0 picks a free port.
	Addr string `yaml:"addr" env:"ADDR" doc:"host:port of the SSE server (GET /realtime/{sessions,users,documents}/{id}, /realtime/demo)."`
	// TokenSecretEnv names the variable holding the HS256 secret of the
	// realtime JWTs (at least 32 bytes); the secret is never in
	// configuration.
	TokenSecretEnv string `yaml:"token_secret_env" env:"TOKEN_SECRET_ENV" doc:"Name of the environment variable holding the HS256 secret of the realtime bearer JWTs, at least 32 bytes (never put in configuration)."`
	// Fanout is how events reach every instance: auto, none, rabbitmq or
	// postgres.
	Fanout string `yaml:"fanout" env:"FANOUT" doc:"How events reach every serve instance: auto (rabbitmq: fanout exchange + a queue per instance; sqs, postgres: PostgreSQL LISTEN/NOTIFY on postgres.dsn; memory: none needed), rabbitmq, postgres, or none (one instance)."`
	// Instance names this instance's RabbitMQ fan-out queue; empty = host
	// name plus a random suffix.
	Instance string `yaml:"instance" env:"INSTANCE" doc:"This instance's name in its RabbitMQ fan-out queue eventpipe.realtime.fanout.<instance>; empty = host name plus a random suffix."`
	// NotifyChannel is the LISTEN/NOTIFY channel of the postgres fan-out.
	NotifyChannel string `yaml:"notify_channel" env:"NOTIFY_CHANNEL" doc:"PostgreSQL LISTEN/NOTIFY channel of the postgres fan-out; the same on every instance."`
	// Window is how many recent events per channel a client can resume from.
	Window int `yaml:"window" env:"WINDOW" doc:"Recent events per channel kept for Last-Event-ID resume and duplicate detection (negative = none)."`
	// WindowBytes caps the data kept per channel.
	WindowBytes int `yaml:"window_bytes" env:"WINDOW_BYTES" doc:"Cap on the payload.data bytes one channel's window keeps (at least 1)."`
	// WindowTTL is how long an event stays resumable.
	WindowTTL time.Duration `yaml:"window_ttl" env:"WINDOW_TTL" doc:"How long an event stays resumable (more than 0s)."`
	// ClientBuffer is how many events may wait for one client.
	ClientBuffer int `yaml:"client_buffer" env:"CLIENT_BUFFER" doc:"Events waiting for one client before it is disconnected as too slow (at least 1)."`
	// Heartbeat is the interval of the keep-alive comment.
	Heartbeat time.Duration `yaml:"heartbeat" env:"HEARTBEAT" doc:"Interval of the SSE comment line that keeps idle streams open (more than 0s)."`
	// MaxDataBytes bounds payload.data.
	MaxDataBytes int `yaml:"max_data_bytes" env:"MAX_DATA_BYTES" doc:"Largest payload.data forwarded; larger notifications are dead-lettered (at least 1)."`
	// AllowedOrigins are comma-separated origins allowed cross-origin.
	AllowedOrigins string `yaml:"allowed_origins" env:"ALLOWED_ORIGINS" doc:"Comma-separated browser origins allowed to open streams cross-origin (CORS); empty = same origin only."`
}

// LLM configures the OpenAI-compatible chat-completions client (app/llm),
// used by the interviews spec's report generator.
type LLM struct {
	// BaseURL is the API's base URL, up to and excluding /chat/completions.
	// Default https://api.openai.com/v1.
	BaseURL string `yaml:"base_url" env:"BASE_URL" doc:"Base URL of the OpenAI-compatible API, up to and excluding /chat/completions."`
	// Model is the chat model. Default gpt-4.1-mini.
	Model string `yaml:"model" env:"MODEL" doc:"Chat model asked (must support json_schema structured output)."`
	// APIKeyEnv names the environment variable that holds the API key; the
	// key itself is never written in configuration. Default OPENAI_API_KEY.
	APIKeyEnv string `yaml:"api_key_env" env:"API_KEY_ENV" doc:"Name of the environment variable holding the API key (the key is never put in configuration)."`
	// Timeout bounds one request, response included. Default 120s; more
	// than 0.
	Timeout time.Duration `yaml:"timeout" env:"TIMEOUT" doc:"Bound on one chat-completion request, response included (more than 0s)."`
}

// Outbox configures the relay that publishes the transactional outbox
// (postgres.dsn required) to the broker.
type Outbox struct {
	// Relay runs the relay inside serve when postgres.dsn is set. Any number
	// of relays may run at once (serve instances, `eventpipe relay`).
	Relay bool `yaml:"relay" env:"RELAY" doc:"Run the outbox relay inside serve when postgres.dsn is set."`
	// BatchSize is how many rows one claim takes (1..1000). Default 50.
	BatchSize int `yaml:"batch_size" env:"BATCH_SIZE" doc:"Outbox rows one relay claim takes and publishes (1..1000)."`
	// PollInterval is how often the relay looks for rows without a
	// notification; a retry after backoff starts at most this late.
	PollInterval time.Duration `yaml:"poll_interval" env:"POLL_INTERVAL" doc:"How often the relay polls without a NOTIFY (more than 0s)."`
	// MaxAttempts is how many times a row is tried before a permanent
	// refusal (payload too large, unroutable) parks it for an operator
	// (eventpipe outbox requeue). A broker that is down never parks a row:
	// the relay retries it forever, at least once a minute.
	MaxAttempts int `yaml:"max_attempts" env:"MAX_ATTEMPTS" doc:"Tries a row gets before a permanent refusal (payload too large, unroutable) parks it; an unavailable broker never parks a row (at least 1)."`
	// Retention is how long published rows are kept.
	Retention time.Duration `yaml:"retention" env:"RETENTION" doc:"How long published outbox rows are kept (more than 0s)."`
}

// Inbox configures the processed-messages table that makes effects happen
// once.
type Inbox struct {
	// TTL is how long a processed message's marker is kept: a duplicate
	// arriving later has its effect again. Default 24h (StackUp §6).
	TTL time.Duration `yaml:"ttl" env:"TTL" doc:"How long processed-message markers are kept; duplicates older than this are not recognised (more than 0s)."`
}

// Broker selects the message broker.
type Broker struct {
	// Kind is the broker eventpipe runs on: memory, rabbitmq, sqs or
	// postgres. Default memory. Env EVENTPIPE_BROKER_KIND, or its alias
	// EVENTPIPE_BROKER (EVENTPIPE_BROKER_KIND wins when both are set).
	Kind string `yaml:"kind" env:"KIND" doc:"Broker to run on: memory, rabbitmq, sqs or postgres. Alias EVENTPIPE_BROKER; EVENTPIPE_BROKER_KIND wins when both are set."`
}

// Memory configures the embedded broker.
type Memory struct {
	// OutputBuffer is the number of messages each subscription has room for
	// before its queue grows; publishing never blocks. Default 256; at least
	// 1.
	OutputBuffer int `yaml:"output_buffer" env:"OUTPUT_BUFFER" doc:"Messages each subscription has room for before its queue grows; publishing never blocks (at least 1)."`
	// Prefetch is the most messages each subscription hands out before the
	// first of them is settled: a route's concurrency unless the route, its
	// queue's batch_size in the topology or serve.max_concurrency says
	// less. FIFO queues are handled one message at a time. Default 16;
	// 1..65535.
	Prefetch int `yaml:"prefetch" env:"PREFETCH" doc:"Messages each subscription hands out before the first is settled (a route's default concurrency; a queue's topology batch_size overrides it; FIFO queues one at a time), 1..65535."`
}

// RabbitMQ configures the RabbitMQ broker.
type RabbitMQ struct {
	// URL is the AMQP URL, amqp:// or amqps://, with credentials and virtual
	// host. Default amqp://guest:guest@127.0.0.1:5672/. Checked only when
	// broker.kind is rabbitmq.
	URL string `yaml:"url" env:"URL" doc:"AMQP URL (amqp:// or amqps://) with credentials and virtual host."`
	// Prefetch is the number of unacknowledged messages each consumer may
	// hold (AMQP basic.qos prefetch-count). Default 100; 1..65535.
	Prefetch int `yaml:"prefetch" env:"PREFETCH" doc:"Unacknowledged messages each consumer may hold (basic.qos prefetch-count, 1..65535)."`
	// AckDelay is how long a consumer may hold an ack back so that the
	// acks after it go out with it as one multiple ack, which costs
	// RabbitMQ one frame instead of one per message (decision 0040). An ack
	// goes at once when half the prefetch is due; a stopping consumer sends
	// what it holds. Default 1ms; 0s..1s; 0s sends every ack at once.
	AckDelay time.Duration `yaml:"ack_delay" env:"ACK_DELAY" doc:"Longest a consumer holds an ack back so that the acks after it share its frame (one multiple ack); 0s sends each at once (0s..1s)."`
	// ChannelPoolSize is the number of AMQP channels kept open for
	// publishing. Default 16; 1..2047 (RabbitMQ's default channel_max).
	ChannelPoolSize int `yaml:"channel_pool_size" env:"CHANNEL_POOL_SIZE" doc:"AMQP channels kept open for publishing (1..2047)."`
	// PublisherConfirms makes every publish wait for the broker's
	// confirmation. Default true.
	PublisherConfirms bool `yaml:"publisher_confirms" env:"PUBLISHER_CONFIRMS" doc:"Wait for the broker to confirm every publish."`
	// QueueType is the RabbitMQ type of every spec queue and its
	// dead-letter queue: as-declared (what each topology file says, classic
	// today), classic, or quorum (x-queue-type=quorum, x-delivery-limit =
	// max_receives; recommended in production, decision 0015). serve,
	// `topology plan/apply` and `topology export` all apply it. RabbitMQ
	// cannot change a live queue's type: switching means draining and
	// deleting the queues first. Default as-declared ("" means the same).
	QueueType string `yaml:"queue_type" env:"QUEUE_TYPE" doc:"RabbitMQ type of every spec queue and its DLQ: as-declared (each topology file's, classic today), classic, or quorum (x-delivery-limit = max_receives; recommended in production, decision 0015). A live queue's type cannot change: drain and delete it first."`
}

// Values rabbitmq.queue_type accepts ("" means QueueTypeAsDeclared).
const (
	QueueTypeAsDeclared = "as-declared"
	QueueTypeClassic    = "classic"
	QueueTypeQuorum     = "quorum"
)

// SQS configures the Amazon SQS broker. Credentials always come from the AWS
// SDK's default chain (AWS_ACCESS_KEY_ID, AWS_PROFILE, an instance role, …).
type SQS struct {
	// Region is the AWS region. Default "": the SDK's default chain decides
	// (AWS_REGION, AWS_DEFAULT_REGION, the shared config file).
	Region string `yaml:"region" env:"REGION" doc:"AWS region; empty lets the AWS SDK decide (AWS_REGION, shared config)."`
	// Endpoint is the SQS endpoint URL, e.g. an emulator's
	// http://127.0.0.1:9324. Default "": the SDK decides, so
	// AWS_ENDPOINT_URL_SQS works, and without it the SDK targets real AWS.
	Endpoint string `yaml:"endpoint" env:"ENDPOINT" doc:"SQS endpoint URL, e.g. an emulator's; empty lets the AWS SDK decide (AWS_ENDPOINT_URL_SQS, else real AWS)."`
	// BatchSize is the number of messages one receive call asks for.
	// Default 10; 1..10 (SQS's limit).
	BatchSize int `yaml:"batch_size" env:"BATCH_SIZE" doc:"Messages one receive call asks for (1..10)."`
	// Workers is the number of concurrent receive loops per subscribed
	// queue while it has messages; an idle queue is long-polled by one of
	// them only, the others waiting for the next message. Default 2; at
	// least 1.
	Workers int `yaml:"workers" env:"WORKERS" doc:"Concurrent receive loops per subscribed queue while it has messages; one polls an idle queue (at least 1)."`
	// WaitTime is how long a receive call long-polls for messages. Default
	// 20s; 1s..20s in whole seconds (short polling would spin on an empty
	// queue).
	WaitTime time.Duration `yaml:"wait_time" env:"WAIT_TIME" doc:"Long-poll time of one receive call (1s..20s, whole seconds)."`
	// NackVisibility, when more than 0s, is the visibility timeout a nacked
	// message gets (how long until it is redelivered) unless its route
	// asks for its own backoff. Default 0s: the visibility is left as it
	// is, so a failed message comes back after the queue's visibility
	// timeout (the SQS specs' retry timing); 0s..12h in whole seconds.
	NackVisibility time.Duration `yaml:"nack_visibility" env:"NACK_VISIBILITY" doc:"Delay before a nacked message is redelivered, unless its route sets its own backoff; 0s leaves the queue's visibility timeout (0s..12h, whole seconds)."`
	// CreateQueues creates missing queues on subscribe and publish. Default
	// true.
	CreateQueues bool `yaml:"create_queues" env:"CREATE_QUEUES" doc:"Create missing queues on subscribe and publish."`
	// QueuePrefix is put in front of every SQS queue name, after the
	// topology name is mapped to one (dots become hyphens except a trailing
	// .fifo: ai.analyze.resume is ai-analyze-resume), e.g. "stage-" or
	// "sophia-dev-". Default "". ASCII letters, digits, - and _ only; every
	// queue name of the enabled specs must still fit SQS's 80 characters,
	// which the broker checks at start.
	QueuePrefix string `yaml:"queue_prefix" env:"QUEUE_PREFIX" doc:"Put in front of every SQS queue name, after dots in the topology name become hyphens (ai.analyze.resume → <prefix>ai-analyze-resume; a trailing .fifo stays); letters, digits, - and _; every name must fit 80 characters."`
}

// Postgres configures the PostgreSQL broker.
type Postgres struct {
	// DSN is the connection string, a postgres:// URL or key=value pairs.
	// Default "". Required when broker.kind is postgres.
	DSN string `yaml:"dsn" env:"DSN" doc:"Connection string (postgres:// URL or key=value pairs); required when broker.kind is postgres."`
	// MaxConns is the size of the consuming connection pool: a subscription
	// holds one connection while it works through a batch. Default 16; at
	// least 1.
	MaxConns int `yaml:"max_conns" env:"MAX_CONNS" doc:"Connections in the consuming pool; a subscription holds one while it works through a batch (at least 1)."`
	// Workers is the number of concurrent claim loops per subscribed queue
	// while it has messages, each holding at most one claim batch; an idle
	// queue is polled by one of them only. Default 2; 1..64.
	Workers int `yaml:"workers" env:"WORKERS" doc:"Concurrent claim loops per subscribed queue while it has messages, each holding at most one claim batch; one polls an idle queue (1..64)."`
	// PollInterval is how often a subscriber polls for new messages.
	// Default 250ms; more than 0.
	PollInterval time.Duration `yaml:"poll_interval" env:"POLL_INTERVAL" doc:"How often a subscriber polls for new messages (more than 0s)."`
	// CreateTables creates the schema and a queue's table on first publish or
	// subscribe. Default true (until `eventpipe migrate` provisions them).
	CreateTables bool `yaml:"create_tables" env:"CREATE_TABLES" doc:"Create missing queue tables on publish and subscribe."`
	// Schema is the PostgreSQL schema of eventpipe's own tables: the
	// migrations' (inbox, outbox, spec stores) and the Postgres broker's
	// queue tables. Default eventpipe.
	Schema string `yaml:"schema" env:"SCHEMA" doc:"Schema of eventpipe's tables (migrations, inbox, outbox, the postgres broker's queues)."`
	// Migrate applies the embedded migrations when serve starts (as
	// `eventpipe migrate up` does). Default true.
	Migrate bool `yaml:"migrate" env:"MIGRATE" doc:"Apply the embedded migrations when serve starts (as eventpipe migrate up)."`
}

// Admin configures the admin HTTP server, which serves /healthz, /readyz and
// /metrics (open) and the specs' admin endpoints, and the verification of
// the JWTs those endpoints take (decision 0017): HS256 with the secret in the
// variable TokenSecretEnv names, or RS256/ES256 with the keys at
// TokenJWKSURL — one of the two; neither leaves the token-protected
// endpoints off.
type Admin struct {
	// Addr is the host:port the admin server listens on. Default
	// 127.0.0.1:9090; "" turns the server off; port 0 picks a free port.
	Addr string `yaml:"addr" env:"ADDR" doc:"host:port of the admin HTTP server (/healthz, /readyz, /metrics); empty turns it off."`
	// TokenSecretEnv names the variable holding the HS256 secret (at least
	// 32 bytes) admin tokens are signed with, by `eventpipe admin token` or
	// the caller's own JWT library. Default EVENTPIPE_ADMIN_TOKEN_SECRET;
	// an unset variable means no secret. serve refuses a secret together
	// with TokenJWKSURL.
	TokenSecretEnv string `yaml:"token_secret_env" env:"TOKEN_SECRET_ENV" doc:"Name of the environment variable holding the HS256 secret (at least 32 bytes) of admin JWTs; unset, and without token_jwks_url, the token-protected endpoints (join-link admin API) are off."`
	// TokenJWKSURL is the http(s) URL of the JSON Web Key Set whose keys
	// verify RS256 and ES256 admin tokens (an identity provider's). It is
	// fetched at start, every TokenJWKSRefresh and when a token names an
	// unknown key id (at most once a minute). Default "": none.
	TokenJWKSURL string `yaml:"token_jwks_url" env:"TOKEN_JWKS_URL" doc:"URL of the JSON Web Key Set verifying RS256/ES256 admin JWTs (fetched at start, refreshed, and on an unknown key id); empty for none; not together with a secret."`
	// TokenJWKSRefresh is how often the key set is fetched again. Default
	// 1h; more than 0s.
	TokenJWKSRefresh time.Duration `yaml:"token_jwks_refresh" env:"TOKEN_JWKS_REFRESH" doc:"How often the key set at token_jwks_url is fetched again (more than 0s)."`
	// TokenIssuer, when set, is the "iss" every admin token must carry.
	// Default "": not checked.
	TokenIssuer string `yaml:"token_issuer" env:"TOKEN_ISSUER" doc:"Required iss of admin JWTs; empty skips the check."`
	// TokenAudience, when set, must be one of every admin token's "aud".
	// Default "": not checked.
	TokenAudience string `yaml:"token_audience" env:"TOKEN_AUDIENCE" doc:"Required aud of admin JWTs; empty skips the check."`
	// TokenLeeway is the clock skew tolerated on a token's exp, nbf and
	// iat. Default 30s; 0s..5m.
	TokenLeeway time.Duration `yaml:"token_leeway" env:"TOKEN_LEEWAY" doc:"Clock skew tolerated on an admin JWT's exp, nbf and iat (0s..5m)."`
}

// Log configures the structured logger.
type Log struct {
	// Level is the least severe level logged: debug, info, warn or error.
	// Default info.
	Level string `yaml:"level" env:"LEVEL" doc:"Least severe level logged: debug, info, warn or error."`
	// Format is the line format: text or json. Default text.
	Format string `yaml:"format" env:"FORMAT" doc:"Log line format: text or json."`
}

// Serve configures how the serve command starts and stops.
type Serve struct {
	// ShutdownTimeout is how long serve waits for in-flight messages after
	// an interrupt before it gives up. Default 30s; more than 0.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout" env:"SHUTDOWN_TIMEOUT" doc:"How long serve drains in-flight work after an interrupt (more than 0s)."`
	// ConnectTimeout is how long serve keeps retrying an unreachable broker
	// at start. Default 0s: retry until interrupted.
	ConnectTimeout time.Duration `yaml:"connect_timeout" env:"CONNECT_TIMEOUT" doc:"How long serve retries an unreachable broker at start; 0s retries until interrupted."`
	// MaxConcurrency caps how many messages one route handles at once.
	// Default 0: no cap, each route handles as many as its broker holds
	// unsettled for it (the queue's batch_size in its topology, else
	// memory.prefetch, rabbitmq.prefetch, sqs.batch_size × sqs.workers,
	// postgres' claim batch), or fewer where the route's code says so. Ordered (FIFO)
	// queues handle one message at a time per group whatever it says; 1
	// handles every queue one message at a time. At least 0.
	MaxConcurrency int `yaml:"max_concurrency" env:"MAX_CONCURRENCY" doc:"Most messages one route handles at once; 0 lets each route take as many as its broker holds for it (the queue's topology batch_size, else the broker's prefetch/batch). FIFO queues stay one at a time per group."`
}

// Demo configures the demo route: a publisher and a handler that show
// messages flowing (what `make run` turns on).
type Demo struct {
	// Enabled turns the demo route on. Default false.
	Enabled bool `yaml:"enabled" env:"ENABLED" doc:"Run the demo route: publish a message every interval and log its handling."`
	// Interval is the time between two demo messages. Default 1s; more than
	// 0.
	Interval time.Duration `yaml:"interval" env:"INTERVAL" doc:"Time between two demo messages (more than 0s)."`
}

// Defaults returns the default configuration: the embedded memory broker,
// the admin server on 127.0.0.1:9090, info logs as text. It is valid, and it
// is the one place defaults are written down.
// Exporters telemetry.exporter accepts.
const (
	ExporterNone   = "none"
	ExporterStdout = "stdout"
	ExporterOTLP   = "otlp"
)

// Telemetry configures OpenTelemetry tracing: spans from publish to consume,
// with the W3C trace context (traceparent) in every message's metadata.
type Telemetry struct {
	// Exporter is where spans go: none, stdout or otlp (OTLP/HTTP). Default
	// none: no spans are recorded and no traceparent is added.
	Exporter string `yaml:"exporter" env:"EXPORTER" doc:"Where spans go: none, stdout or otlp (OTLP/HTTP); none records nothing unless OTEL_TRACES_EXPORTER is set (the OTEL_* variables then configure the exporter)."`
	// Endpoint is the OTLP/HTTP endpoint: host:port, spoken to in plain HTTP
	// (a local collector), or an http(s):// URL. Required when exporter is otlp.
	Endpoint string `yaml:"endpoint" env:"ENDPOINT" doc:"OTLP/HTTP endpoint: host:port (plain HTTP, e.g. localhost:4318) or an http(s):// URL; required when exporter is otlp."`
	// ServiceName is the service.name of every span.
	ServiceName string `yaml:"service_name" env:"SERVICE_NAME" doc:"service.name resource attribute of every span; OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win."`
	// SampleRatio is the fraction of new traces recorded; a trace continued
	// from a traceparent follows its parent.
	SampleRatio float64 `yaml:"sample_ratio" env:"SAMPLE_RATIO" doc:"Fraction of new traces recorded (more than 0, at most 1); continued traces follow their parent."`
}

func Defaults() Config {
	return Config{
		Broker: Broker{Kind: KindMemory},
		Memory: Memory{OutputBuffer: 256, Prefetch: 16},
		RabbitMQ: RabbitMQ{
			URL:               "amqp://guest:guest@127.0.0.1:5672/",
			Prefetch:          100,
			AckDelay:          time.Millisecond,
			ChannelPoolSize:   16,
			PublisherConfirms: true,
			QueueType:         QueueTypeAsDeclared,
		},
		SQS: SQS{
			Region:         "",
			Endpoint:       "",
			BatchSize:      10,
			Workers:        2,
			WaitTime:       20 * time.Second,
			NackVisibility: 0,
			CreateQueues:   true,
			QueuePrefix:    "",
		},
		Postgres: Postgres{
			DSN:          "",
			MaxConns:     16,
			Workers:      2,
			PollInterval: 250 * time.Millisecond,
			CreateTables: true,
			Schema:       "eventpipe",
			Migrate:      true,
		},
		Admin: Admin{Addr: "127.0.0.1:9090", TokenSecretEnv: "EVENTPIPE_ADMIN_TOKEN_SECRET", TokenJWKSRefresh: time.Hour,
			TokenLeeway: 30 * time.Second},
		Log:        Log{Level: LevelInfo, Format: FormatText},
		Serve:      Serve{ShutdownTimeout: 30 * time.Second, ConnectTimeout: 0},
		Demo:       Demo{Enabled: false, Interval: time.Second},
		Interviews: Interviews{Enabled: false, SampleTraffic: false, StaleClaim: 10 * time.Minute, APIAddr: "127.0.0.1:8083"},
		Disputes: Disputes{
			Enabled: false, SampleTraffic: false, AMLThreshold: 80, DefaultTAT: 5 * 24 * time.Hour,
			S3MaxObjectSize: 10 << 20, S3Timeout: 30 * time.Second,
			APIAddr: "127.0.0.1:8082", ReminderSweepInterval: time.Minute,
			ReversalTokenEnv: "EVENTPIPE_DISPUTES_REVERSAL_TOKEN", ReversalTimeout: 10 * time.Second,
			ReversalInterval: 10 * time.Second, ReversalMaxAttempts: 10,
		},
		JoinLink: JoinLink{Enabled: false, SampleTraffic: false, EnableScheduler: false, EnableFallbackCron: false, DispatchInterval: time.Second, FallbackSchedule: "0 */4 * * *", SystemActorID: -1,
			BulkRegisterTokenEnv: "EVENTPIPE_JOINLINK_BULK_REGISTER_TOKEN", BulkRegisterTimeout: 10 * time.Second},
		LLM: LLM{BaseURL: "https://api.openai.com/v1", Model: "gpt-4.1-mini", APIKeyEnv: "OPENAI_API_KEY", Timeout: 120 * time.Second},
		Realtime: Realtime{
			Addr:           "127.0.0.1:8080",
			TokenSecretEnv: "EVENTPIPE_REALTIME_TOKEN_SECRET",
			Fanout:         "auto",
			NotifyChannel:  "eventpipe_realtime",
			Window:         256,
			WindowBytes:    256 << 10,
			WindowTTL:      5 * time.Minute,
			ClientBuffer:   64,
			Heartbeat:      15 * time.Second,
			MaxDataBytes:   64 << 10,
		},
		StackUp: StackUp{
			Enabled:        false,
			Roles:          "core,ai-worker,realtime",
			Processors:     "real",
			MaxAttempts:    3,
			BackoffInitial: 200 * time.Millisecond,
			BackoffMax:     5 * time.Second,
			SampleInterval: 0,

			InternalAddr:       "127.0.0.1:8081",
			InternalAPIKeyEnv:  "EVENTPIPE_STACKUP_INTERNAL_API_KEY",
			TokenKeyEnv:        "EVENTPIPE_STACKUP_TOKEN_KEY",
			EmbeddingDimension: 1536,
			GitHubAPIURL:       "https://api.github.com",
		},
		Telemetry: Telemetry{Exporter: ExporterNone, ServiceName: "eventpipe", SampleRatio: 1},
		Outbox: Outbox{
			Relay:        true,
			BatchSize:    50,
			PollInterval: 10 * time.Second,
			MaxAttempts:  1,
			Retention:    7 * 24 * time.Hour,
		},
		Inbox: Inbox{TTL: 24 * time.Hour},
	}
}
