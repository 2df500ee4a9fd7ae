package cli_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/eventpipe/eventpipe/app/cli"
	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/app/testenv"
)

func TestDLQUsageErrors(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		environ []string
		args    []string
		want    string
	}{
		"no queue":      {[]string{"EVENTPIPE_BROKER=sqs"}, []string{"dlq", "peek"}, "--queue is required"},
		"memory broker": {nil, []string{"dlq", "redrive", "--queue", "x-dlq"}, "memory broker"},
	} {
		r := run(t, c.environ, c.args...)
		assert.Equal(t, cli.ExitUsage, r.code, name)
		assert.Contains(t, r.stderr, c.want, name)
	}
}

// The §9 smoke message: published with the ids its envelope carries, so the
// transport's message_id and x-trace-id agree with messageId and traceId.
func TestPublishTakesTheIDsFromTheBody(t *testing.T) {
	t.Parallel()
	body := `{"messageId":"smoke-1","messageType":"analyze.resume","version":"v1","traceId":"local-test","publishedAt":"2026-04-27T15:00:00Z","publisher":"manual","payload":{"resumeId":1,"filePath":"resumes/raw/1/test.pdf","analyzedDocumentId":1},"context":{"userId":1}}`
	// On a real broker (a schema of its own): publish refuses the memory one.
	environ := []string{"EVENTPIPE_BROKER=postgres", "EVENTPIPE_POSTGRES_DSN=" + testenv.PostgresDSN(t), "EVENTPIPE_POSTGRES_SCHEMA=" + testbrokers.Scope(t, "postgres")}
	r := run(t, append(environ, "EVENTPIPE_STACKUP_ENABLED=true", "EVENTPIPE_ADMIN_ADDR="), "publish", "--topic", "stackup.core-to-ai/analyze.resume", "--body", body)
	assert.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "published smoke-1 to stackup.core-to-ai/analyze.resume")
	assert.Contains(t, r.stdout, "(trace local-test)")
}
