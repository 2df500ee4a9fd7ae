package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/cli"
)

const specs = "../../config/topology/"

func TestTopologyExportRabbitMQDefinitions(t *testing.T) {
	t.Parallel()
	r := run(t, nil, "topology", "export", "-f", specs+"stackup.yaml", "--format", "rabbitmq-definitions")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	var defs struct {
		Exchanges []map[string]any `json:"exchanges"`
		Queues    []map[string]any `json:"queues"`
		Bindings  []map[string]any `json:"bindings"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &defs))
	assert.Len(t, defs.Exchanges, 4)
	assert.Len(t, defs.Queues, 30)
	assert.Len(t, defs.Bindings, 32, "17 declared + 15 dead-letter bindings")
}

// With rabbitmq.queue_type quorum, export declares every queue and dead-letter
// queue quorum, a delivery limit where the topology gives max_receives, as
// serve and apply do; the default keeps what the file says.
func TestTopologyExportWithQueueType(t *testing.T) {
	t.Parallel()
	queues := func(environ []string) map[string]map[string]any {
		r := run(t, environ, "topology", "export", "-f", specs+"booking.yaml", "-f", specs+"stackup.yaml")
		require.Equal(t, cli.ExitOK, r.code, r.stderr)
		var defs struct {
			Queues []struct {
				Name      string         `json:"name"`
				Arguments map[string]any `json:"arguments"`
			} `json:"queues"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &defs))
		out := map[string]map[string]any{}
		for _, q := range defs.Queues {
			out[q.Name] = q.Arguments
		}
		return out
	}

	quorum := queues([]string{"EVENTPIPE_RABBITMQ_QUEUE_TYPE=quorum"})
	require.Len(t, quorum, 32)
	for name, args := range quorum {
		assert.Equal(t, "quorum", args["x-queue-type"], name)
	}
	assert.Equal(t, map[string]any{
		"x-queue-type": "quorum", "x-delivery-limit": float64(5), "x-single-active-consumer": true,
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "booking-session-events-dlq.fifo",
	}, quorum["booking-session-events.fifo"])
	assert.Equal(t, "stackup.dlx", quorum["ai.generate.questions"]["x-dead-letter-exchange"])
	assert.NotContains(t, quorum["ai.generate.questions"], "x-delivery-limit", "no max_receives in the contract")

	for _, environ := range [][]string{nil, {"EVENTPIPE_RABBITMQ_QUEUE_TYPE=as-declared"}} {
		for name, args := range queues(environ) {
			assert.NotContains(t, args, "x-queue-type", "%s is classic, as its file says", name)
		}
	}
	r := run(t, []string{"EVENTPIPE_RABBITMQ_QUEUE_TYPE=stream"}, "topology", "export", "-f", specs+"booking.yaml")
	assert.Equal(t, cli.ExitUsage, r.code)
	assert.Contains(t, r.stderr, "rabbitmq.queue_type")
}

func TestTopologyUsageErrors(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("name: x\nqueues:\n  - name: q\n    max_receives: 3\n"), 0o600))
	for name, args := range map[string][]string{
		"no file":        {"topology", "plan"},
		"invalid file":   {"topology", "apply", "-f", bad},
		"missing file":   {"topology", "plan", "-f", "/nonexistent.yaml"},
		"unknown format": {"topology", "export", "-f", specs + "interviews.yaml", "--format", "terraform"},
	} {
		r := run(t, nil, args...)
		assert.Equal(t, cli.ExitUsage, r.code, "%s: %s", name, r.stderr)
	}
	r := run(t, nil, "topology", "apply", "-f", bad)
	assert.True(t, strings.Contains(r.stderr, "queues[0].max_receives"), r.stderr)
}

// On the memory broker there is nothing to provision: plan says so and
// exits 0, apply initializes each queue.
func TestTopologyOnMemory(t *testing.T) {
	t.Parallel()
	r := run(t, nil, "topology", "plan", "-f", specs+"interviews.yaml")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "nothing to plan")
	r = run(t, nil, "topology", "apply", "-f", specs+"interviews.yaml")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "interviews applied (4 queues)")
}
