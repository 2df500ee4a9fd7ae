package cli_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/app/cli"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/config"
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

// dlq peek prints the dead letters and their groups and leaves them; dlq
// redrive --dry-run --group prints what would move and moves nothing; the
// redrive itself, off a terminal, reports its progress as JSON lines.
func TestDLQPeekGroupDryRunAndProgress(t *testing.T) {
	t.Parallel()
	const dlq = "booking-session-events-dlq.fifo"
	kind := config.KindPostgres
	scope := testbrokers.Scope(t, kind)
	environ := []string{"EVENTPIPE_BROKER=" + kind, "EVENTPIPE_BOOKING_ENABLED=true", "EVENTPIPE_ADMIN_ADDR=",
		"EVENTPIPE_POSTGRES_DSN=" + testenv.PostgresDSN(t), "EVENTPIPE_POSTGRES_SCHEMA=" + scope}
	ps := testbrokers.New(t, kind, scope)
	var ids []string
	for i := range 2 {
		msg := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
		msg.Metadata.Set(metadata.GroupIDKey, "session-1")
		metadata.SetDeadLetter(msg, metadata.DeadLetter{Reason: fmt.Sprintf("booking %d not found", i), Class: "permanent", Attempts: 5,
			SourceQueue: "booking-session-events.fifo", DeadLetteredAt: time.Now().UTC()})
		ids = append(ids, msg.UUID)
		require.NoError(t, ps.Publish(dlq, msg))
	}

	r := run(t, environ, "dlq", "peek", "--queue", dlq)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 3, r.stdout)
	var summary struct {
		Groups   []app.DeadLetterGroup `json:"groups"`
		Complete bool                  `json:"complete"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[2]), &summary))
	require.Len(t, summary.Groups, 1)
	assert.Equal(t, "booking <n> not found", summary.Groups[0].Reason)
	assert.Equal(t, 2, summary.Groups[0].Count)
	assert.True(t, summary.Complete)

	r = run(t, environ, "dlq", "redrive", "--queue", dlq, "--dry-run", "--group", summary.Groups[0].Key)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "2 message(s) would be redriven from "+dlq+" (dry run: nothing changed)")
	r = run(t, environ, "dlq", "peek", "--queue", dlq)
	assert.Len(t, strings.Split(strings.TrimSpace(r.stdout), "\n"), 3, "the dry run moved nothing")

	r = run(t, environ, "dlq", "redrive", "--queue", dlq, "--group", "booking <n> not found", "--rate", "20", "--wait", "2s")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "2 message(s) redriven from "+dlq)
	progress := strings.Split(strings.TrimSpace(r.stderr), "\n")
	require.Len(t, progress, 2, r.stderr)
	var last struct {
		Done  int    `json:"done"`
		Total int64  `json:"total"`
		ID    string `json:"id"`
	}
	require.NoError(t, json.Unmarshal([]byte(progress[1]), &last))
	assert.Equal(t, 2, last.Done)
	assert.EqualValues(t, 2, last.Total)
	assert.Contains(t, ids, last.ID)
}

// A script's old `dlq peek --wait 3s` still works, and stdout holds nothing
// but JSON lines: the deprecation notice goes to stderr (cobra prints it on
// stdout once Out is set, and the chaos harness choked on it).
func TestDLQPeekDeprecatedWaitKeepsStdoutJSON(t *testing.T) {
	t.Parallel()
	const dlq = "booking-session-events-dlq.fifo"
	kind := config.KindPostgres
	scope := testbrokers.Scope(t, kind)
	environ := []string{"EVENTPIPE_BROKER=" + kind, "EVENTPIPE_BOOKING_ENABLED=true", "EVENTPIPE_ADMIN_ADDR=",
		"EVENTPIPE_POSTGRES_DSN=" + testenv.PostgresDSN(t), "EVENTPIPE_POSTGRES_SCHEMA=" + scope}
	ps := testbrokers.New(t, kind, scope)
	msg := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
	msg.Metadata.Set(metadata.GroupIDKey, "session-1")
	require.NoError(t, ps.Publish(dlq, msg))

	r := run(t, environ, "dlq", "peek", "--queue", dlq, "--wait", "3s")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 2, r.stdout)
	for _, line := range lines {
		assert.True(t, json.Valid([]byte(line)), "not JSON on stdout: %q", line)
	}
	assert.Contains(t, lines[0], msg.UUID)
	assert.Contains(t, r.stderr, "--wait has been deprecated")

	help := run(t, environ, "dlq", "peek", "--help")
	assert.NotContains(t, help.stdout, "--wait", "a deprecated flag is hidden")
}
