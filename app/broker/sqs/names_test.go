package sqs_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/sqs"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/config"
)

// The one mapping from topology names to SQS queue names: dots become
// hyphens except a trailing .fifo, the prefix goes in front, and a name SQS
// already accepts keeps it.
func TestQueueName(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ prefix, topic, want string }{
		{"", "ai.analyze.resume", "ai-analyze-resume"},
		{"", "ai.analyze.cover_letter", "ai-analyze-cover_letter"},
		{"", "dlq.ai.analyze.cover_letter", "dlq-ai-analyze-cover_letter"},
		{"", "core.callback.analysis", "core-callback-analysis"},
		{"", "q.realtime.session.notify", "q-realtime-session-notify"},
		{"", "dlq.q.realtime.session.notify", "dlq-q-realtime-session-notify"},
		// Already valid: the interviews, disputes, booking, join-link queues.
		{"", "interview-completed", "interview-completed"},
		{"", "report-generate-dlq", "report-generate-dlq"},
		{"", "ingest-queue", "ingest-queue"},
		{"", "domain-events-dlq", "domain-events-dlq"},
		{"", "join-link-generation", "join-link-generation"},
		{"", "booking-session-events.fifo", "booking-session-events.fifo"},
		{"", "booking-session-events-dlq.fifo", "booking-session-events-dlq.fifo"},
		// .fifo only at the end is the FIFO suffix.
		{"", "a.b.fifo", "a-b.fifo"},
		{"", "a.fifo.b", "a-fifo-b"},
		{"", "x.FIFO", "x-FIFO"},
		// Case and underscores stay; other characters are left for the check.
		{"", "Mixed_Case.q", "Mixed_Case-q"},
		{"", "bad/name", "bad/name"},
		// The prefix.
		{"stage-", "ai.analyze.resume", "stage-ai-analyze-resume"},
		{"stage-", "interview-completed", "stage-interview-completed"},
		{"sophia-dev-", "interview-completed-dlq", "sophia-dev-interview-completed-dlq"},
		{"stage-", "booking-session-events.fifo", "stage-booking-session-events.fifo"},
	} {
		assert.Equal(t, c.want, sqs.QueueName(c.prefix, c.topic), "%q + %q", c.prefix, c.topic)
	}
}

// Every queue of every spec topology config ships maps to a name SQS
// accepts, with no two alike, with no prefix and with the prefix the tests
// use (ept-xxxxxxxx-): Config.Validate, which serve runs at start, passes.
func TestSpecQueueNamesAreValid(t *testing.T) {
	t.Parallel()
	for _, name := range config.TopologyNames() {
		data, err := config.TopologyFile(name)
		require.NoError(t, err)
		tp, err := topology.Parse(data)
		require.NoError(t, err)
		for _, prefix := range []string{"", "ept-12345678-", "sophia-production-"} {
			cfg := sqs.Config{QueuePrefix: prefix, Topics: queueNames(tp)}
			assert.NoError(t, cfg.Validate(), "%s with prefix %q", name, prefix)
		}
	}
}

func queueNames(tp topology.Topology) []string {
	var names []string
	for _, q := range tp.AllQueues() {
		names = append(names, q.Name)
	}
	return names
}

// Config.Validate (and so New) refuses, naming each: a topic whose queue
// name is invalid, one over 80 characters with the prefix, two topics that
// map to one queue, and a prefix SQS would refuse.
func TestConfigRefusesBadQueueNames(t *testing.T) {
	t.Parallel()
	long := "dlq." + strings.Repeat("x", 70) // 74 characters: fits alone
	for name, c := range map[string]struct {
		cfg  sqs.Config
		want []string
	}{
		"invalid character": {
			cfg:  sqs.Config{Topics: []string{"ok", "bad/name"}},
			want: []string{`topic "bad/name"`, `character '/' is not allowed`, "letters, digits, '-' and '_'"},
		},
		"too long with the prefix": {
			cfg:  sqs.Config{QueuePrefix: "stage-prod-", Topics: []string{long}},
			want: []string{long, `"stage-prod-dlq-` + strings.Repeat("x", 70) + `"`, "85 characters, more than 80"},
		},
		"collision": {
			cfg:  sqs.Config{Topics: []string{"ai.analyze.resume", "ai-analyze-resume"}},
			want: []string{`topic "ai-analyze-resume"`, `"ai-analyze-resume"`, `topic "ai.analyze.resume" maps to the same queue`},
		},
		"empty FIFO base": {
			cfg:  sqs.Config{Topics: []string{".fifo"}},
			want: []string{`".fifo"`, "empty"},
		},
		"prefix with a dot": {
			cfg:  sqs.Config{QueuePrefix: "stage.", Topics: []string{"q"}},
			want: []string{`queue prefix "stage."`, `character '.'`},
		},
	} {
		err := c.cfg.Validate()
		require.Error(t, err, name)
		for _, w := range c.want {
			assert.Contains(t, err.Error(), w, name)
		}
		_, err = sqs.New(context.Background(), withRegion(c.cfg), testLogger)
		assert.Error(t, err, "%s: New validates", name)
	}
	assert.NoError(t, sqs.Config{QueuePrefix: "stage-prod-", Topics: []string{long[:len(long)-5]}}.Validate(), "80 characters fit")
}

func withRegion(c sqs.Config) sqs.Config {
	c.Region = "us-east-1"
	return c
}

// On the emulator, which takes names SQS refuses, the adapter refuses them
// itself: publish, subscribe and stats of a topic whose queue name breaks the
// rule fail with a *QueueNameError (a broker.Refusal: the outbox parks the
// row instead of retrying for ever), and nothing is created.
func TestInvalidQueueNameRefusedOnTheEmulator(t *testing.T) {
	t.Parallel()
	ps := newPubSub(t, func() sqs.Config { c := testConfig(t); c.CreateQueues = true; return c }())
	topic := brokertest.Topic(t) + "/name"

	err := ps.Publish(topic, newMessages(1)...)
	var nameErr *sqs.QueueNameError
	require.ErrorAs(t, err, &nameErr)
	assert.Equal(t, topic, nameErr.Topic)
	assert.Contains(t, err.Error(), "SQS queue names are 1 to 80 characters")
	var refusal broker.Refusal
	require.ErrorAs(t, err, &refusal)
	assert.True(t, refusal.Refused())

	_, err = ps.Subscribe(context.Background(), topic)
	require.ErrorAs(t, err, &nameErr)
	require.ErrorAs(t, ps.SubscribeInitialize(topic), &nameErr)
	_, err = ps.QueueStats(context.Background(), topic)
	require.ErrorAs(t, err, &nameErr)

	_, err = rawClient(t).GetQueueUrl(context.Background(), &awssqs.GetQueueUrlInput{QueueName: aws.String(topic)})
	var missing *types.QueueDoesNotExist
	assert.ErrorAs(t, err, &missing, "the emulator never saw the name")

	over := brokertest.Topic(t)
	over += strings.Repeat("x", 81-len(over))
	assert.ErrorAs(t, ps.Publish(over, newMessages(1)...), &nameErr, "longer than 80")
}

// Two topics that map to one queue are refused at first use of the second:
// one queue name maps back to one topic.
func TestTopicsSharingAQueueNameRefused(t *testing.T) {
	t.Parallel()
	ps := newPubSub(t, func() sqs.Config { c := testConfig(t); c.CreateQueues = true; return c }())
	base := brokertest.Topic(t)
	dotted, hyphened := base+".x", base+"-x"
	require.NoError(t, ps.Publish(dotted, newMessages(1)...))
	t.Cleanup(func() { deleteQueue(t, hyphened) })

	err := ps.Publish(hyphened, newMessages(1)...)
	var nameErr *sqs.QueueNameError
	require.ErrorAs(t, err, &nameErr)
	assert.Contains(t, err.Error(), `topic "`+dotted+`" maps to the same queue`)
	got, ok := ps.TopicOf(hyphened)
	assert.True(t, ok)
	assert.Equal(t, dotted, got, "the queue name maps back to the topic that has it")

	tp := topology.Topology{Name: "clash", Queues: []topology.Queue{{Name: base + ".y"}, {Name: base + "-y"}}}
	_, err = ps.Plan(context.Background(), tp)
	require.ErrorAs(t, err, &nameErr, "a topology whose two queues share an SQS name")
	assert.Contains(t, err.Error(), base+"-y")
}

func deleteQueue(t *testing.T, name string) {
	c := rawClient(t)
	out, err := c.GetQueueUrl(context.Background(), &awssqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err == nil {
		_, _ = c.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: out.QueueUrl})
	}
}

// The StackUp topology on the emulator, under a prefix of the test's own
// (also what keeps it apart from every other test): each queue is created
// under its mapped name, never its dotted one, with its DLQ and a redrive
// policy naming the mapped DLQ's ARN; a message published to the topology
// name arrives through Subscribe of the topology name, moves to the mapped
// DLQ after max receives, and DeadLetterSources and TopicOf name its source
// by the topology name. The shipped stackup.yaml sets no max_receives (its
// spec leaves the delivery limit to a later phase), so SQS would get no
// redrive policy for it: the test declares 3, the Phase-2 proposal's limit.
func TestStackUpQueuesUnderTheirSQSNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const queue, dlq = "ai.analyze.resume", "dlq.ai.analyze.resume"
	data, err := config.TopologyFile("stackup")
	require.NoError(t, err)
	tp, err := topology.Parse(data)
	require.NoError(t, err)
	for i := range tp.Queues {
		if tp.Queues[i].Name == queue {
			tp.Queues[i].MaxReceives = 3
		}
	}
	prefix := brokertest.Topic(t)[:12] + "-"
	sqsQueue, sqsDLQ := prefix+"ai-analyze-resume", prefix+"dlq-ai-analyze-resume"
	t.Cleanup(func() {
		for _, q := range tp.AllQueues() {
			deleteQueue(t, sqs.QueueName(prefix, q.Name))
		}
	})
	cfg := testConfig(t)
	cfg.QueuePrefix, cfg.Topics = prefix, queueNames(tp)
	ps := newPubSub(t, cfg)

	plan, err := ps.Plan(ctx, tp)
	require.NoError(t, err)
	assert.Contains(t, plan, topology.Change{Kind: topology.Missing, Object: "queue " + queue + " (SQS " + sqsQueue + ")"},
		"a plan names the queue by both names")
	applyInSync(t, ps, tp)

	c := rawClient(t)
	attrs := attributes(t, c, sqsQueue)
	dlqAttrs := attributes(t, c, sqsDLQ)
	assert.True(t, strings.HasSuffix(dlqAttrs["QueueArn"], ":"+sqsDLQ), dlqAttrs["QueueArn"])
	assert.JSONEq(t, `{"deadLetterTargetArn":"`+dlqAttrs["QueueArn"]+`","maxReceiveCount":3}`, attrs["RedrivePolicy"])
	for _, dotted := range []string{prefix + queue, prefix + dlq} {
		_, err := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(dotted)})
		var missing *types.QueueDoesNotExist
		assert.ErrorAs(t, err, &missing, "no queue under the dotted name %s", dotted)
	}

	sent := newMessages(1)[0]
	require.NoError(t, ps.Publish(queue, sent))
	visible, _ := depth(t, c, queueURL(t, c, sqsQueue))
	assert.Equal(t, 1, visible, "the message is in the mapped queue")
	st, err := ps.QueueStats(ctx, queue)
	require.NoError(t, err)
	assert.Equal(t, queue, st.Queue)

	subCtx, cancel := context.WithCancel(ctx)
	msgs, err := ps.Subscribe(subCtx, queue)
	require.NoError(t, err)
	for i := 1; i <= 3; i++ {
		m := brokertest.Next(t, msgs, 15*time.Second)
		require.Equal(t, sent.UUID, m.UUID)
		assert.Equal(t, strconv.Itoa(i), m.Metadata.Get(sqs.ReceiveCountKey))
		nackAtOnce(t, m)
	}
	nothing(t, msgs, 2*time.Second) // the next receive moves it instead
	cancel()

	dead, err := ps.Subscribe(ctx, dlq)
	require.NoError(t, err)
	m := brokertest.Next(t, dead, 15*time.Second)
	assert.Equal(t, sent.UUID, m.UUID)
	m.Ack()

	sources, err := ps.DeadLetterSources(ctx, dlq)
	require.NoError(t, err)
	assert.Equal(t, []string{queue}, sources, "named by its topology name, looked up")
	got, ok := ps.TopicOf(sqsQueue)
	assert.True(t, ok)
	assert.Equal(t, queue, got)

	// A PubSub that knows no StackUp topic can only strip the prefix: a name
	// that maps to the same queue, though not the topology's.
	stranger := newPubSub(t, func() sqs.Config { c := testConfig(t); c.QueuePrefix = prefix; return c }())
	sources, err = stranger.DeadLetterSources(ctx, dlq)
	require.NoError(t, err)
	assert.Equal(t, []string{"ai-analyze-resume"}, sources)
	_, ok = stranger.TopicOf(sqsQueue)
	assert.False(t, ok, "TopicOf answers only for known topics")

	// With another prefix the same topology names other queues.
	other := newPubSub(t, func() sqs.Config { c := testConfig(t); c.QueuePrefix = prefix + "x-"; return c }())
	_, err = other.QueueStats(ctx, queue)
	var notFound *sqs.QueueNotFoundError
	require.ErrorAs(t, err, &notFound)
	assert.Equal(t, prefix+"x-ai-analyze-resume", notFound.Queue)
	assert.True(t, errors.Is(err, broker.ErrQueueNotFound))
}
