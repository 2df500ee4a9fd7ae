package rabbitmq_test

import (
	"encoding/json"
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/rabbitmq"
)

func TestExportDefinitionsShape(t *testing.T) {
	out, err := rabbitmq.ExportDefinitions(sampleTopology(), "stackup")
	require.NoError(t, err)
	var defs struct {
		Vhosts    []map[string]any `json:"vhosts"`
		Exchanges []map[string]any `json:"exchanges"`
		Queues    []map[string]any `json:"queues"`
		Bindings  []map[string]any `json:"bindings"`
	}
	require.NoError(t, json.Unmarshal(out, &defs))
	assert.Equal(t, []map[string]any{{"name": "stackup"}}, defs.Vhosts)
	require.Len(t, defs.Exchanges, 2)
	assert.Equal(t, map[string]any{
		"name": "core", "vhost": "stackup", "type": "topic", "durable": true,
		"auto_delete": false, "internal": false, "arguments": map[string]any{},
	}, defs.Exchanges[0])
	require.Len(t, defs.Queues, 7)
	// Dead-letter queues come first, as Apply declares them.
	assert.Equal(t, "dlq.analyze", defs.Queues[0]["name"])
	var generate map[string]any
	for _, q := range defs.Queues {
		assert.Equal(t, "stackup", q["vhost"])
		assert.Equal(t, true, q["durable"])
		if q["name"] == "q.generate" {
			generate = q
		}
	}
	assert.Equal(t, map[string]any{
		"x-queue-type": "quorum", "x-delivery-limit": float64(2),
		"x-dead-letter-exchange": "core.dlx", "x-dead-letter-routing-key": "dlq.generate",
	}, generate["arguments"])
	require.Len(t, defs.Bindings, 6)
	assert.Equal(t, map[string]any{
		"source": "core.dlx", "vhost": "stackup", "destination": "dlq.analyze", "destination_type": "queue",
		"routing_key": "dlq.q.analyze", "arguments": map[string]any{},
	}, defs.Bindings[0])

	_, err = rabbitmq.ExportDefinitions(sampleTopology(), "")
	require.Error(t, err)
}

// importDefinitions loads a definitions document with rabbitmqctl, which runs
// as the rabbitmq user: the file goes where that user can read it.
func importDefinitions(t *testing.T, defs []byte) {
	t.Helper()
	file, err := os.CreateTemp("", "eventpipe-defs-*.json")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.Remove(file.Name()) })
	_, err = file.Write(defs)
	require.NoError(t, errors.Join(err, file.Chmod(0o644), file.Close()))
	rabbitmqctl(t, "import_definitions", file.Name())
}

// Export → import into a fresh vhost → Plan finds it in sync: the document
// holds exactly what Apply would have declared.
func TestExportDefinitionsRoundTrip(t *testing.T) {
	t.Parallel()
	amqpURL, vhost := newVhost(t)
	ps := newPubSub(t, amqpURL, nil)
	top := sampleTopology()

	defs, err := rabbitmq.ExportDefinitions(top, vhost)
	require.NoError(t, err)
	importDefinitions(t, defs)

	plan, err := ps.Plan(ctxFor(t), top)
	require.NoError(t, err)
	require.True(t, plan.InSync(), plan.String())
	// And Apply over the imported objects is a no-op, not a 406.
	unresolved, err := ps.Apply(ctxFor(t), top)
	require.NoError(t, err)
	require.Empty(t, unresolved, unresolved.String())
}
