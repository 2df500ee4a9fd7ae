package asyncapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/asyncapi"
	"github.com/eventpipe/eventpipe/app/schemas"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/config"
)

var specNames = []string{"booking", "disputes", "interviews", "joinlink", "stackup"}

func specTopologies(t *testing.T) []topology.Topology {
	t.Helper()
	var tops []topology.Topology
	for _, n := range specNames {
		data, err := config.TopologyFile(n)
		require.NoError(t, err)
		top, err := topology.Parse(data)
		require.NoError(t, err)
		tops = append(tops, top)
	}
	return tops
}

func document(t *testing.T, o asyncapi.Options) ([]byte, map[string]any) {
	t.Helper()
	cat, err := schemas.Load()
	require.NoError(t, err)
	data, err := asyncapi.Document(specTopologies(t), cat, o)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(data, &doc))
	return data, doc
}

func at(t *testing.T, v any, path ...string) any {
	t.Helper()
	for _, p := range path {
		m, ok := v.(map[string]any)
		require.True(t, ok, "at %v: not an object", path)
		v, ok = m[p]
		require.True(t, ok, "at %v: no %q", path, p)
	}
	return v
}

// The document of the five specs has a channel per queue and dead-letter
// queue with its AMQP and SQS bindings, a channel per StackUp routing key,
// and every message with its schema from the catalog as the payload.
func TestDocumentOfTheFiveSpecs(t *testing.T) {
	t.Parallel()
	_, doc := document(t, asyncapi.Options{Version: "1.2.3", SQSQueueName: func(s string) string { return "stage-" + s }})
	assert.Equal(t, "3.0.0", doc["asyncapi"])
	assert.Equal(t, "1.2.3", at(t, doc, "info", "version"))

	channels := at(t, doc, "channels").(map[string]any)
	for _, top := range specTopologies(t) {
		for _, q := range top.AllQueues() {
			ch := at(t, channels, top.Name+"."+q.Name).(map[string]any)
			assert.Equal(t, q.Name, ch["address"])
			assert.Equal(t, "queue", at(t, ch, "bindings", "amqp", "is"))
			assert.Equal(t, "stage-"+q.Name, at(t, ch, "bindings", "sqs", "queue", "name"))
			assert.NotEmpty(t, ch["messages"], q.Name)
		}
	}
	// SQS facts of the spec files: redrive after 3 receives, FIFO, no DLQ.
	ic := at(t, channels, "interviews.interview-completed")
	assert.Equal(t, map[string]any{"deadLetterQueue": map[string]any{"name": "stage-interview-completed-dlq"}, "maxReceiveCount": 3.0},
		at(t, ic, "bindings", "sqs", "queue", "redrivePolicy"))
	assert.Equal(t, 180.0, at(t, ic, "bindings", "sqs", "queue", "visibilityTimeout"))
	assert.Equal(t, 1209600.0, at(t, ic, "bindings", "sqs", "deadLetterQueue", "messageRetentionPeriod"))
	assert.Equal(t, true, at(t, channels, "booking.booking-session-events.fifo", "bindings", "sqs", "queue", "fifoQueue"))
	assert.NotContains(t, at(t, channels, "joinlink.join-link-generation", "bindings", "sqs"), "deadLetterQueue")
	// StackUp: the routing key on its exchange, sent there, received from the queue.
	rk := at(t, channels, "stackup.stackup.core-to-ai.analyze.resume")
	assert.Equal(t, "analyze.resume", at(t, rk, "address"))
	assert.Equal(t, map[string]any{"name": "stackup.core-to-ai", "type": "topic", "durable": true, "autoDelete": false, "vhost": "/"},
		at(t, rk, "bindings", "amqp", "exchange"))
	assert.Equal(t, map[string]any{"$ref": "#/channels/stackup.stackup.core-to-ai.analyze.resume"}, at(t, doc, "operations", "send.stackup.analyze.resume", "channel"))
	assert.Len(t, at(t, channels, "stackup.q.realtime.session.notify", "messages"), 3)

	cat, err := schemas.Load()
	require.NoError(t, err)
	messages := at(t, doc, "components", "messages").(map[string]any)
	require.Len(t, messages, len(cat.Messages()))
	for _, m := range cat.Messages() {
		msg := at(t, messages, m.Spec+"."+m.Name)
		assert.Equal(t, asyncapi.SchemaFormat, at(t, msg, "payload", "schemaFormat"))
		want, err := json.Marshal(m.Schema())
		require.NoError(t, err)
		got, err := json.Marshal(at(t, msg, "payload", "schema"))
		require.NoError(t, err)
		assert.JSONEq(t, string(want), string(got), m.Name)
	}
	assert.Equal(t, "$message.header#/correlation_id", at(t, messages, "stackup.callback.analysis", "correlationId", "location"))
	assert.Contains(t, at(t, messages, "interviews.report.generate", "headers", "schema", "properties"), "requestId")
}

// A topology and a catalog that disagree are refused: a queue no message
// type is consumed from, a message on a queue the topology lacks, a routing
// key the bindings do not take to the message's queue.
func TestDocumentRefusesDisagreement(t *testing.T) {
	t.Parallel()
	cat, err := schemas.Load()
	require.NoError(t, err)
	tops := specTopologies(t)
	_, err = asyncapi.Document([]topology.Topology{{Name: "unknown"}}, cat, asyncapi.Options{})
	require.ErrorContains(t, err, "no message catalog")

	interviews := tops[2]
	extra := interviews
	extra.Queues = append(append([]topology.Queue(nil), interviews.Queues...), topology.Queue{Name: "orphan"})
	_, err = asyncapi.Document([]topology.Topology{extra}, cat, asyncapi.Options{})
	require.ErrorContains(t, err, "queue orphan")

	missing := interviews
	missing.Queues = interviews.Queues[:1]
	_, err = asyncapi.Document([]topology.Topology{missing}, cat, asyncapi.Options{})
	require.ErrorContains(t, err, "report-generate is not in the topology")

	stackup := tops[4]
	rebound := stackup
	rebound.Bindings = nil
	_, err = asyncapi.Document([]topology.Topology{rebound}, cat, asyncapi.Options{})
	require.ErrorContains(t, err, "does not route")
}

// The document passes the reference parser, @asyncapi/parser (pinned in
// testdata/node, installed by .ci/asyncapi-parser, which make test runs
// first), with no error and no warning, and every message it reads has a
// payload. A missing parser fails the test, here as under CI: it is never
// skipped.
func TestReferenceParserAcceptsTheDocument(t *testing.T) {
	t.Parallel()
	data, doc := document(t, asyncapi.Options{})
	res := parse(t, data)
	require.Empty(t, res.Errors, "parser errors")
	require.Empty(t, res.Warnings, "parser warnings")
	require.Len(t, res.Messages, len(at(t, doc, "components", "messages").(map[string]any)))
	for _, m := range res.Messages {
		assert.True(t, m.Payload, "%s has no payload", m.ID)
		assert.Equal(t, asyncapi.SchemaFormat, m.SchemaFormat, m.ID)
	}
	assert.Len(t, res.Channels, len(at(t, doc, "channels").(map[string]any)))
	assert.Len(t, res.Operations, len(at(t, doc, "operations").(map[string]any)))

	// The parser is not a rubber stamp: a document it must refuse.
	broken := bytes.Replace(data, []byte(`"action": "receive"`), []byte(`"action": "consume"`), 1)
	require.NotEmpty(t, parse(t, broken).Errors)
}

type parserResult struct {
	Errors   []map[string]any `json:"errors"`
	Warnings []map[string]any `json:"warnings"`
	Messages []struct {
		ID           string `json:"id"`
		Payload      bool   `json:"payload"`
		SchemaFormat string `json:"schemaFormat"`
	} `json:"messages"`
	Channels   []string `json:"channels"`
	Operations []string `json:"operations"`
}

// parse runs testdata/node/validate.js on doc.
func parse(t *testing.T, doc []byte) parserResult {
	t.Helper()
	dir := filepath.Join("testdata", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@asyncapi", "parser", "package.json")); err != nil {
		require.FailNow(t, "the npm @asyncapi/parser is not installed", "run .ci/asyncapi-parser (make test does): %v", err)
	}
	node, err := exec.LookPath("node")
	require.NoError(t, err, "node is needed for the AsyncAPI reference parser")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "validate.js")
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(doc)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "validate.js: %s", stderr.String())
	var res parserResult
	require.NoError(t, json.Unmarshal(out, &res), "validate.js printed %q", out)
	return res
}
