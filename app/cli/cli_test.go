package cli_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/cli"
)

type result struct {
	code           int
	stdout, stderr string
}

func run(t *testing.T, environ []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	code := cli.Run(ctx, args, strings.NewReader(""), &out, &errOut, environ)
	return result{code, out.String(), errOut.String()}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := run(t, nil, "version")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "eventpipe dev")
	assert.Contains(t, r.stdout, "go1.")
}

func TestHelpOnEveryCommand(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--help"}, {"serve", "--help"}, {"publish", "--help"}, {"version", "--help"}} {
		r := run(t, nil, args...)
		assert.Equal(t, cli.ExitOK, r.code, "%v: %s", args, r.stderr)
		assert.Contains(t, r.stdout, "Usage:", "%v", args)
	}
}

func TestUnknownCommandIsUsageError(t *testing.T) {
	t.Parallel()
	r := run(t, nil, "frobnicate")
	assert.Equal(t, cli.ExitUsage, r.code)
	assert.Contains(t, r.stderr, "unknown command")
}

func TestInvalidConfigListsEveryProblem(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(path, []byte("broker:\n  kind: kafka\nsqs:\n  batch_size: 11\nlog:\n  level: loud\n"), 0o600))
	r := run(t, nil, "serve", "--config", path)
	assert.Equal(t, cli.ExitUsage, r.code)
	for _, want := range []string{"broker.kind", "memory, rabbitmq, sqs, postgres", "sqs.batch_size", "log.level"} {
		assert.Contains(t, r.stderr, want)
	}
}

func TestUnknownKeyIsUsageError(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "typo.yaml")
	require.NoError(t, os.WriteFile(path, []byte("rabbitmq:\n  prefecth: 10\n"), 0o600))
	r := run(t, nil, "serve", "--config", path)
	assert.Equal(t, cli.ExitUsage, r.code)
	assert.Contains(t, r.stderr, "prefecth")
}

func TestUnknownBrokerKindFromEnvironment(t *testing.T) {
	t.Parallel()
	r := run(t, []string{"EVENTPIPE_BROKER=kafka"}, "serve")
	assert.Equal(t, cli.ExitUsage, r.code)
	assert.Contains(t, r.stderr, `"kafka"`)
	assert.Contains(t, r.stderr, "memory, rabbitmq, sqs, postgres")
}

// A body the route would reject is refused before any broker is contacted:
// the broker here is unreachable, and the command still fails at once with the
// body's problem.
func TestPublishRefusesInvalidBodyBeforeConnecting(t *testing.T) {
	t.Parallel()
	environ := []string{"EVENTPIPE_BROKER=rabbitmq", "EVENTPIPE_RABBITMQ_URL=amqp://guest:guest@127.0.0.1:1/"}
	for name, body := range map[string]string{
		"not json":      `{"name":`,
		"missing name":  `{}`,
		"unknown field": `{"name":"Ada","password":"hunter2"}`,
		"wrong type":    `{"name":42}`,
	} {
		start := time.Now()
		r := run(t, environ, "publish", "--topic", "demo.greetings", "--body", body)
		assert.Equal(t, cli.ExitUsage, r.code, name)
		assert.Contains(t, r.stderr, "nothing sent", name)
		assert.Less(t, time.Since(start), 5*time.Second, "%s: publish must not try the broker", name)
	}
}

func TestPublishUnknownQueueNeedsRaw(t *testing.T) {
	t.Parallel()
	r := run(t, nil, "publish", "--topic", "no.such.queue", "--body", "{}")
	assert.Equal(t, cli.ExitUsage, r.code)
	assert.Contains(t, r.stderr, "--raw")
	assert.Contains(t, r.stderr, "demo.greetings")
}

func TestPublishArgumentErrors(t *testing.T) {
	t.Parallel()
	cases := map[string][]string{
		"no topic":        {"publish", "--body", "{}"},
		"no body":         {"publish", "--topic", "demo.greetings"},
		"body and file":   {"publish", "--topic", "demo.greetings", "--body", "{}", "--file", "x.json"},
		"bad metadata":    {"publish", "--topic", "demo.greetings", "--body", `{"name":"Ada"}`, "-m", "novalue"},
		"missing file":    {"publish", "--topic", "demo.greetings", "--file", "/nonexistent/body.json"},
		"bad flag":        {"publish", "--nope"},
		"serve with args": {"serve", "extra"},
	}
	for name, args := range cases {
		r := run(t, nil, args...)
		assert.Equal(t, cli.ExitUsage, r.code, "%s: %s", name, r.stderr)
	}
}

// The memory broker lives inside one process: a message `eventpipe publish`
// sent there would reach no one, so publish refuses and says what to do.
func TestPublishRefusedOnMemory(t *testing.T) {
	t.Parallel()
	for _, environ := range [][]string{nil, {"EVENTPIPE_BROKER=memory"}} {
		r := run(t, environ, "publish", "-t", "demo.greetings", "-b", `{"name":"Ada"}`, "-m", "x-trace-id=abc123", "--id", "m-1")
		assert.Equal(t, cli.ExitUsage, r.code, r.stderr)
		assert.Empty(t, r.stdout, "nothing published")
		assert.Contains(t, r.stderr, "broker.kind is memory")
		assert.Contains(t, r.stderr, "nothing sent")
		assert.Contains(t, r.stderr, "EVENTPIPE_BROKER=rabbitmq")
	}
}

// A spec that cannot be built from its configuration stops serve with the
// usage exit code and names the spec: interviews without an LLM key (and
// without sample traffic, which would stand in for it).
func TestServeSpecThatCannotBuildExitsTwo(t *testing.T) {
	t.Parallel()
	r := run(t, []string{"EVENTPIPE_INTERVIEWS_ENABLED=true", "EVENTPIPE_ADMIN_ADDR=127.0.0.1:0",
		"EVENTPIPE_LLM_API_KEY_ENV=EVENTPIPE_TEST_UNSET_LLM_KEY"}, "serve")
	assert.Equal(t, cli.ExitUsage, r.code, r.stderr)
	assert.Contains(t, r.stderr, "spec interviews:")
}

// The specs' own commands are on the command line: the StackUp module's
// `realtime token` signs with the configured secret.
func TestSpecCommandRealtimeToken(t *testing.T) {
	t.Parallel()
	env := []string{"EVENTPIPE_REALTIME_TOKEN_SECRET=cli-test-secret-of-at-least-32-bytes"}
	r := run(t, env, "realtime", "token", "--user", "7")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.NotEmpty(t, strings.TrimSpace(r.stdout))
	r = run(t, env, "realtime", "token")
	assert.Equal(t, cli.ExitUsage, r.code, "--user is required")
}

// A misspelt EVENTPIPE_* variable would silently do nothing: every command
// that reads the configuration warns about it and names the likely one.
func TestUnknownVariableWarns(t *testing.T) {
	t.Parallel()
	r := run(t, []string{"EVENTPIPE_BROKER=sqs", "EVENTPIPE_SQS_QUEUEPREFIX=stage-"}, "topology", "list", "-f", "../../config/topology/booking.yaml")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stderr, "eventpipe: warning: EVENTPIPE_SQS_QUEUEPREFIX is not a variable eventpipe reads; it is ignored; did you mean EVENTPIPE_SQS_QUEUE_PREFIX?")
	assert.NotContains(t, r.stdout, "stage-", "ignored indeed")
	r = run(t, []string{"EVENTPIPE_BROKER=sqs"}, "topology", "list", "-f", "../../config/topology/booking.yaml")
	assert.NotContains(t, r.stderr, "warning")
}

// Strict on publish: a StackUp body with a field the schema does not know is
// refused with the schema's error, which names the field's path, before any
// broker is contacted.
func TestPublishRefusesAnUnknownFieldWithTheSchemasError(t *testing.T) {
	t.Parallel()
	environ := []string{"EVENTPIPE_BROKER=rabbitmq", "EVENTPIPE_RABBITMQ_URL=amqp://guest:guest@127.0.0.1:1/", "EVENTPIPE_STACKUP_ENABLED=true"}
	body := `{"messageId":"smoke-1","messageType":"analyze.resume","version":"v1","traceId":"local-test","publishedAt":"2026-04-27T15:00:00Z","publisher":"manual","payload":{"resumeId":1,"filePath":"resumes/raw/1/test.pdf","analyzedDocumentId":1,"priority":"high"},"context":{"userId":1}}`
	r := run(t, environ, "publish", "--topic", "stackup.core-to-ai/analyze.resume", "--body", body)
	assert.Equal(t, cli.ExitUsage, r.code, r.stderr)
	assert.Contains(t, r.stderr, "nothing sent")
	assert.Contains(t, r.stderr, "schemas: body refused (strict) for queue ai.analyze.resume")
	assert.Contains(t, r.stderr, "at '/payload': additional properties 'priority' not allowed")
}
