package cli_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/cli"
)

// listed runs `topology list` and returns its rows by topology queue name:
// the name on the broker and the kind.
func listed(t *testing.T, environ []string, args ...string) map[string][2]string {
	t.Helper()
	r := run(t, environ, append([]string{"topology", "list"}, args...)...)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	rows := map[string][2]string{}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Greater(t, len(lines), 1, r.stdout)
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		require.GreaterOrEqual(t, len(f), 4, line)
		rows[f[1]] = [2]string{f[2], strings.Join(f[3:], " ")}
	}
	return rows
}

// `topology list` prints the name each queue really has on the configured
// broker, from the adapters' own mappings, without connecting to it.
func TestTopologyListNamesOnEachBroker(t *testing.T) {
	t.Parallel()
	stackup := []string{"-f", specs + "stackup.yaml"}

	sqs := listed(t, []string{"EVENTPIPE_BROKER=sqs", "EVENTPIPE_SQS_QUEUE_PREFIX=stage-", "EVENTPIPE_SQS_ENDPOINT=http://127.0.0.1:1"}, stackup...)
	assert.Equal(t, [2]string{"stage-ai-analyze-resume", "queue"}, sqs["ai.analyze.resume"])
	assert.Equal(t, [2]string{"stage-dlq-ai-analyze-cover_letter", "dead-letter queue of ai.analyze.cover_letter"}, sqs["dlq.ai.analyze.cover_letter"])
	assert.Len(t, sqs, 30, "15 queues and their 15 dead-letter queues")

	fifo := listed(t, []string{"EVENTPIPE_BROKER=sqs"}, "-f", specs+"booking.yaml")
	assert.Equal(t, [2]string{"booking-session-events.fifo", "queue, FIFO"}, fifo["booking-session-events.fifo"])

	rabbit := listed(t, []string{"EVENTPIPE_BROKER=rabbitmq", "EVENTPIPE_RABBITMQ_QUEUE_TYPE=quorum"}, stackup...)
	assert.Equal(t, [2]string{"ai.analyze.resume", "queue, quorum"}, rabbit["ai.analyze.resume"], "after rabbitmq.queue_type")

	pg := listed(t, []string{"EVENTPIPE_BROKER=postgres", "EVENTPIPE_POSTGRES_DSN=postgres://nobody@127.0.0.1:1/none", "EVENTPIPE_POSTGRES_SCHEMA=ops"}, "-f", specs+"interviews.yaml")
	assert.Equal(t, `"ops"."queue_interview-completed"`, pg["interview-completed"][0])

	mem := listed(t, nil, stackup...)
	assert.Equal(t, "ai.analyze.resume", mem["ai.analyze.resume"][0])

	// Without --file: every spec the binary ships.
	all := listed(t, []string{"EVENTPIPE_BROKER=sqs"})
	for _, q := range []string{"interview-completed", "domain-events", "ai-analyze-resume", "booking-session-events.fifo", "join-link-generation"} {
		found := false
		for _, row := range all {
			found = found || row[0] == q
		}
		assert.True(t, found, "%s listed", q)
	}
}
