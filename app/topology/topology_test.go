package topology_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/topology"
)

func TestMatch(t *testing.T) {
	t.Parallel()
	cases := []struct {
		pattern, key string
		want         bool
	}{
		{"generate.questions", "generate.questions", true},
		{"generate.questions", "generate.feedback", false},
		{"realtime.session.*", "realtime.session.message", true},
		{"realtime.session.*", "realtime.session", false},
		{"realtime.session.*", "realtime.session.a.b", false},
		{"realtime.#", "realtime", true},
		{"realtime.#", "realtime.user.x.y", true},
		{"#", "anything.at.all", true},
		{"#", "", true},
		{"*.b.#", "a.b", true},
		{"*.b.#", "a.c", false},
		{"a.#.z", "a.z", true},
		{"a.#.z", "a.b.c.z", true},
		{"a.#.z", "a.b.c", false},
		{"*", "", true}, // one empty word
		{"*", "a.b", false},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, topology.Match(c.pattern, c.key), "%q ~ %q", c.pattern, c.key)
	}
}

const sample = `
name: sample
exchanges:
  - {name: ex.topic, type: topic}
  - {name: ex.dlx, type: direct}
  - {name: ex.fan, type: fanout}
queues:
  - name: q.work
    visibility_timeout: 180s
    batch_size: 10
    max_receives: 3
    dead_letter: {queue: q.work.dlq, exchange: ex.dlx, routing_key: dlq.q.work, retention: 336h}
  - name: q.realtime
  - name: q.events.fifo
    fifo: true
    dead_letter: {queue: q.events-dlq.fifo}
bindings:
  - {exchange: ex.topic, queue: q.work, routing_key: work.do}
  - {exchange: ex.topic, queue: q.realtime, routing_key: "realtime.session.*"}
  - {exchange: ex.topic, queue: q.realtime, routing_key: "realtime.user.*"}
  - {exchange: ex.fan, queue: q.work}
  - {exchange: ex.fan, queue: q.realtime}
`

func TestParseAndRoute(t *testing.T) {
	t.Parallel()
	top, err := topology.Parse([]byte(sample))
	require.NoError(t, err)

	all := top.AllQueues()
	require.Len(t, all, 5)
	dlq, ok := top.Queue("q.work.dlq")
	require.True(t, ok)
	assert.Equal(t, "336h0m0s", dlq.Retention.String())
	fifoDLQ, ok := top.Queue("q.events-dlq.fifo")
	require.True(t, ok)
	assert.True(t, fifoDLQ.FIFO)
	assert.Equal(t, "dlq.q.work", top.Queues[0].DeadLetter.DeadLetterRoutingKey())
	assert.Equal(t, "q.events-dlq.fifo", top.Queues[2].DeadLetter.DeadLetterRoutingKey())

	assert.Equal(t, []string{"q.work"}, top.Route("ex.topic", "work.do"))
	assert.Equal(t, []string{"q.realtime"}, top.Route("ex.topic", "realtime.session.delta"))
	assert.Empty(t, top.Route("ex.topic", "realtime.document.x"))
	// The dead-letter binding is implied by q.work's dead_letter block.
	assert.Equal(t, []string{"q.work.dlq"}, top.Route("ex.dlx", "dlq.q.work"))
	assert.Contains(t, top.AllBindings(), topology.Binding{Exchange: "ex.dlx", Queue: "q.work.dlq", Pattern: "dlq.q.work"})
	assert.Empty(t, top.Route("ex.dlx", "dlq.q.other"))
	assert.Equal(t, []string{"q.work", "q.realtime"}, top.Route("ex.fan", "ignored"))
	assert.Empty(t, top.Route("no.such.exchange", "work.do"))

	// A topic: a queue, "<exchange>/<routing-key>", or "/<queue>".
	assert.Equal(t, []string{"q.work"}, top.TopicQueues("q.work"))
	assert.Equal(t, []string{"q.work"}, top.TopicQueues("/q.work"))
	assert.Equal(t, []string{"q.work", "q.realtime"}, top.TopicQueues("ex.fan/ignored"))
	assert.Empty(t, top.TopicQueues("ex.topic/realtime.document.x"))
}

func TestValidateReportsEveryProblemWithPath(t *testing.T) {
	t.Parallel()
	_, err := topology.Parse([]byte(`
name: ""
exchanges:
  - {name: amq.mine, type: headers}
  - {name: ex, type: direct}
  - {name: ex, type: direct}
queues:
  - name: "bad name!"
    visibility_timeout: 13h
    batch_size: 11
    max_receives: 3
  - name: events
    fifo: true
    content_based_dedup: true
  - name: loop
    dead_letter: {queue: loop, exchange: nope}
bindings:
  - {exchange: missing, queue: ghost, routing_key: a.b}
  - {exchange: ex, queue: loop, routing_key: "a.*"}
`))
	require.Error(t, err)
	msg := err.Error()
	for _, want := range []string{
		"name: required",
		`exchanges[0].name: "amq.mine"`,
		`exchanges[0].type: "headers" is not one of topic, direct, fanout`,
		`exchanges[2].name: "ex" declared twice`,
		`queues[0].name: "bad name!"`,
		"queues[0].visibility_timeout: 13h0m0s is out of range",
		"queues[0].batch_size: 11 is out of range",
		"queues[0].max_receives: set without a dead_letter queue",
		`queues[1].name: "events": a queue's name ends in .fifo exactly when it is FIFO`,
		"queues[2].dead_letter.queue: a queue cannot be its own dead-letter queue",
		`queues[2].dead_letter.exchange: "nope" is not a declared exchange`,
		`bindings[0].exchange: "missing" is not a declared exchange`,
		`bindings[0].queue: "ghost" is not a declared queue`,
		`bindings[1].routing_key: "a.*": wildcards only work on topic exchanges`,
	} {
		assert.Contains(t, msg, want)
	}
	assert.GreaterOrEqual(t, strings.Count(msg, "\n")+1, 14)
}

func TestUnknownKeyIsAnError(t *testing.T) {
	t.Parallel()
	_, err := topology.Parse([]byte("name: x\nqueues:\n  - name: q\n    visibilty_timeout: 30s\n"))
	require.ErrorContains(t, err, "visibilty_timeout")
}

func TestPlanString(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "in sync: nothing to change\n", topology.Plan{}.String())
	p := topology.Plan{
		{Kind: topology.Differs, Object: "queue q", Attribute: "VisibilityTimeout", Want: "180", Have: "30"},
		{Kind: topology.Missing, Object: "queue a"},
		{Kind: topology.Extra, Object: "binding ex -> q (x.y)"},
	}
	p.Sort()
	s := p.String()
	assert.Contains(t, s, "+ queue a")
	assert.Contains(t, s, "~ queue q: VisibilityTimeout: declared 180, live 30")
	assert.Contains(t, s, "- binding ex -> q (x.y) (not declared; left alone)")
	assert.Contains(t, s, "3 change(s)")
	assert.False(t, p.InSync())
}

// A deployment's queue type replaces every queue's, dead-letter queues
// included; as-declared changes nothing; the original is not modified.
func TestWithQueueType(t *testing.T) {
	t.Parallel()
	top := topology.Topology{Name: "t", Queues: []topology.Queue{
		{Name: "a", Type: topology.Classic, MaxReceives: 3, DeadLetter: &topology.DeadLetter{Queue: "a-dlq"}},
		{Name: "b.fifo", FIFO: true},
	}}
	for _, typ := range []string{"", topology.AsDeclared} {
		same, err := top.WithQueueType(typ)
		require.NoError(t, err)
		assert.Equal(t, top, same, "%q", typ)
	}

	quorum, err := top.WithQueueType(topology.Quorum)
	require.NoError(t, err)
	require.NoError(t, quorum.Validate())
	var types []string
	for _, q := range quorum.AllQueues() {
		types = append(types, q.Name+"="+q.Type)
	}
	assert.Equal(t, []string{"a=quorum", "b.fifo=quorum", "a-dlq=quorum"}, types)
	assert.Equal(t, topology.Classic, top.Queues[0].Type, "the original is left as it was")
	assert.Empty(t, top.Queues[1].Type)

	_, err = top.WithQueueType("stream")
	assert.ErrorContains(t, err, `queue type "stream" is not one of as-declared, classic, quorum`)
}

func TestWithS3Buckets(t *testing.T) {
	t.Parallel()
	top, err := topology.Parse([]byte(`
name: t
queues:
  - name: ingest
    s3_notifications: {from: disputes.s3_bucket}
  - name: other
`))
	require.NoError(t, err)
	resolve := func(bucket, account string) func(string) (string, string, error) {
		return func(from string) (string, string, error) {
			if from != "disputes.s3_bucket" {
				return "", "", fmt.Errorf("unknown setting %q", from)
			}
			return bucket, account, nil
		}
	}
	got, err := top.WithS3Buckets(resolve("kb-docs", "123456789012"))
	require.NoError(t, err)
	assert.Equal(t, &topology.S3Notifications{From: "disputes.s3_bucket", Bucket: "kb-docs", SourceAccount: "123456789012"}, got.Queues[0].S3Notifications)
	assert.Nil(t, got.Queues[1].S3Notifications)
	assert.Empty(t, top.Queues[0].S3Notifications.Bucket, "the original is left as it was")
	dlqs := got.AllQueues()
	assert.Len(t, dlqs, 2)

	unset, err := top.WithS3Buckets(resolve("", ""))
	require.NoError(t, err)
	assert.Empty(t, unset.Queues[0].S3Notifications.Bucket, "a setting left empty: no bucket, the policy is left alone")

	_, err = top.WithS3Buckets(resolve("Bad_Bucket", ""))
	assert.ErrorContains(t, err, `queues[0].s3_notifications.bucket: bucket "Bad_Bucket": only lowercase letters`)
	_, err = top.WithS3Buckets(resolve("kb-docs", "12345"))
	assert.ErrorContains(t, err, `queues[0].s3_notifications.source_account: "12345" is not a 12-digit AWS account id`)
	_, err = top.WithS3Buckets(func(string) (string, string, error) { return "", "", errors.New("unknown setting") })
	assert.ErrorContains(t, err, "queue ingest: s3_notifications.from: unknown setting")

	_, err = topology.Parse([]byte(`
name: t
queues:
  - {name: a.fifo, fifo: true, s3_notifications: {bucket: kb-docs}}
  - {name: b, s3_notifications: {}}
`))
	require.Error(t, err)
	assert.ErrorContains(t, err, "queues[0].s3_notifications: S3 event notifications cannot be sent to a FIFO queue")
	assert.ErrorContains(t, err, "queues[1].s3_notifications: names no bucket")
}

func TestValidBucketName(t *testing.T) {
	t.Parallel()
	for name, ok := range map[string]bool{
		"kb-docs": true, "a.b-c1": true, "abc": true, strings.Repeat("a", 63): true,
		"ab": false, strings.Repeat("a", 64): false, "KB": false, "-kb": false, "kb-": false,
		"a..b": false, "192.168.0.1": false, "kb_docs": false,
	} {
		assert.Equal(t, ok, topology.ValidBucketName(name) == nil, name)
	}
}
