package sqs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
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
	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/config"
)

var _ broker.Provisioner = (*sqs.PubSub)(nil)

const day = 24 * time.Hour

// interviewsLike has the shape and values of the interviews spec (two queues
// with DLQs: visibility 180 s / 1800 s, 3 receives, DLQ retention 14 days,
// batch 10 / 1), plus a FIFO queue with its FIFO DLQ like the booking spec,
// encrypted, long-polling and delayed to cover every attribute.
func interviewsLike() topology.Topology {
	return topology.Topology{
		Name: "interviews",
		Queues: []topology.Queue{
			{
				Name: "interview-completed", VisibilityTimeout: 180 * time.Second, BatchSize: 10, MaxReceives: 3,
				DeadLetter: &topology.DeadLetter{Queue: "interview-completed-dlq", Retention: 14 * day},
			},
			{
				Name: "report-generate", VisibilityTimeout: 1800 * time.Second, BatchSize: 1, MaxReceives: 3,
				DeadLetter: &topology.DeadLetter{Queue: "report-generate-dlq", Retention: 14 * day},
			},
			{
				Name: "booking-session.fifo", FIFO: true, ContentBasedDedup: true, VisibilityTimeout: 60 * time.Second,
				Retention: 7 * day, ReceiveWait: 20 * time.Second, DeliveryDelay: 5 * time.Second, Encryption: "sse-sqs",
				MaxReceives: 5, DeadLetter: &topology.DeadLetter{Queue: "booking-session-dlq.fifo", Retention: 14 * day},
			},
		},
	}
}

// prefixed returns a deep copy of t with every queue and exchange name
// prefixed, so that tests never share queues.
func prefixed(t topology.Topology, prefix string) topology.Topology {
	out := topology.Topology{Name: t.Name}
	for _, e := range t.Exchanges {
		e.Name = prefix + e.Name
		out.Exchanges = append(out.Exchanges, e)
	}
	for _, q := range t.Queues {
		q.Name = prefix + q.Name
		if q.DeadLetter != nil {
			d := *q.DeadLetter
			d.Queue = prefix + d.Queue
			if d.Exchange != "" {
				d.Exchange = prefix + d.Exchange
			}
			q.DeadLetter = &d
		}
		out.Queues = append(out.Queues, q)
	}
	for _, b := range t.Bindings {
		b.Exchange, b.Queue = prefix+b.Exchange, prefix+b.Queue
		out.Bindings = append(out.Bindings, b)
	}
	return out
}

// uniqueTopology prefixes t for this test and deletes its queues afterwards
// (the test's own queues; Apply itself never deletes).
func uniqueTopology(t *testing.T, tp topology.Topology) topology.Topology {
	t.Helper()
	// ept-xxxxxxxx-: short enough for the long StackUp names (80-char limit).
	tp = prefixed(tp, brokertest.Topic(t)[:12]+"-")
	require.NoError(t, tp.Validate())
	c := rawClient(t)
	t.Cleanup(func() {
		for _, q := range tp.AllQueues() {
			out, err := c.GetQueueUrl(context.Background(), &awssqs.GetQueueUrlInput{QueueName: aws.String(sqs.QueueName("", q.Name))})
			if err == nil {
				_, _ = c.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: out.QueueUrl})
			}
		}
	})
	return tp
}

func attributes(t *testing.T, c *awssqs.Client, name string) map[string]string {
	t.Helper()
	out, err := c.GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(queueURL(t, c, name)),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
	})
	require.NoError(t, err)
	return out.Attributes
}

func secs(d time.Duration) string { return strconv.Itoa(int(d / time.Second)) }

func applyInSync(t *testing.T, ps *sqs.PubSub, tp topology.Topology) {
	t.Helper()
	ctx := context.Background()
	unresolved, err := ps.Apply(ctx, tp)
	require.NoError(t, err)
	require.True(t, unresolved.InSync(), "unresolved:\n%s", unresolved)
	plan, err := ps.Plan(ctx, tp)
	require.NoError(t, err)
	require.True(t, plan.InSync(), "plan after apply:\n%s", plan)
}

func TestApplyCreatesQueuesWithAttributes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tp := uniqueTopology(t, interviewsLike())
	ps := newPubSub(t, testConfig(t))

	plan, err := ps.Plan(ctx, tp)
	require.NoError(t, err)
	require.Len(t, plan, 6, "every queue and DLQ missing:\n%s", plan)
	for _, c := range plan {
		assert.Equal(t, topology.Missing, c.Kind, c.String())
	}
	c := rawClient(t)
	_, err = c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(tp.Queues[0].Name)})
	var missing *types.QueueDoesNotExist
	require.ErrorAs(t, err, &missing, "Plan creates nothing")

	applyInSync(t, ps, tp)

	for _, q := range tp.Queues {
		dlq := attributes(t, c, q.DeadLetter.Queue)
		assert.Equal(t, secs(14*day), dlq["MessageRetentionPeriod"], q.DeadLetter.Queue)
		assert.Empty(t, dlq["RedrivePolicy"], "a DLQ has no DLQ")

		got := attributes(t, c, q.Name)
		assert.Equal(t, secs(q.VisibilityTimeout), got["VisibilityTimeout"], q.Name)
		var redrive struct {
			DeadLetterTargetArn string `json:"deadLetterTargetArn"`
			MaxReceiveCount     json.Number
		}
		require.NoError(t, json.Unmarshal([]byte(got["RedrivePolicy"]), &redrive), got["RedrivePolicy"])
		assert.Equal(t, dlq["QueueArn"], redrive.DeadLetterTargetArn, q.Name)
		assert.Equal(t, strconv.Itoa(q.MaxReceives), redrive.MaxReceiveCount.String(), q.Name)
		assert.Equal(t, "1048576", got["MaximumMessageSize"], q.Name)
	}

	std := attributes(t, c, tp.Queues[0].Name)
	assert.Equal(t, secs(4*day), std["MessageRetentionPeriod"], "undeclared retention: SQS's default")
	assert.Equal(t, "0", std["ReceiveMessageWaitTimeSeconds"])
	assert.Equal(t, "0", std["DelaySeconds"])
	assert.Empty(t, std["FifoQueue"])

	fifo := attributes(t, c, tp.Queues[2].Name)
	assert.Equal(t, "true", fifo["FifoQueue"])
	assert.Equal(t, "true", fifo["ContentBasedDeduplication"])
	assert.Equal(t, "true", fifo["SqsManagedSseEnabled"])
	assert.Equal(t, secs(7*day), fifo["MessageRetentionPeriod"])
	assert.Equal(t, "20", fifo["ReceiveMessageWaitTimeSeconds"])
	assert.Equal(t, "5", fifo["DelaySeconds"])
	fifoDLQ := attributes(t, c, tp.Queues[2].DeadLetter.Queue)
	assert.Equal(t, "true", fifoDLQ["FifoQueue"], "a FIFO queue's DLQ is FIFO")
	assert.Equal(t, "true", fifoDLQ["SqsManagedSseEnabled"], "the DLQ is encrypted like its source")

	// Apply twice: nothing left to do, nothing changed.
	before := attributes(t, c, tp.Queues[1].Name)
	applyInSync(t, ps, tp)
	after := attributes(t, c, tp.Queues[1].Name)
	assert.Equal(t, before["LastModifiedTimestamp"], after["LastModifiedTimestamp"], "the second Apply sets nothing")
}

func TestPlanFindsDriftApplyFixesIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tp := uniqueTopology(t, interviewsLike())
	ps := newPubSub(t, testConfig(t))
	applyInSync(t, ps, tp)

	// Behind its back: visibility, retention of a DLQ, the redrive count and
	// encryption of the FIFO queue.
	c := rawClient(t)
	set := func(name string, attrs map[string]string) {
		_, err := c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: aws.String(queueURL(t, c, name)), Attributes: attrs})
		require.NoError(t, err)
	}
	q0, fifo := tp.Queues[0], tp.Queues[2]
	dlqArn := attributes(t, c, q0.DeadLetter.Queue)["QueueArn"]
	set(q0.Name, map[string]string{
		"VisibilityTimeout": "30",
		"RedrivePolicy":     `{"deadLetterTargetArn":"` + dlqArn + `","maxReceiveCount":10}`,
	})
	set(q0.DeadLetter.Queue, map[string]string{"MessageRetentionPeriod": "86400"})
	set(fifo.Name, map[string]string{"SqsManagedSseEnabled": "false", "ContentBasedDeduplication": "false"})

	plan, err := ps.Plan(ctx, tp)
	require.NoError(t, err)
	t.Logf("plan:\n%s", plan)
	want := topology.Plan{
		{Kind: topology.Differs, Object: "queue " + fifo.Name, Attribute: "ContentBasedDeduplication", Want: "true", Have: "false"},
		{Kind: topology.Differs, Object: "queue " + fifo.Name, Attribute: "SqsManagedSseEnabled", Want: "true", Have: "false"},
		{Kind: topology.Differs, Object: "queue " + q0.Name, Attribute: "RedrivePolicy.maxReceiveCount", Want: "3", Have: "10"},
		{Kind: topology.Differs, Object: "queue " + q0.Name, Attribute: "VisibilityTimeout", Want: "180", Have: "30"},
		{Kind: topology.Differs, Object: "queue " + q0.DeadLetter.Queue, Attribute: "MessageRetentionPeriod", Want: secs(14 * day), Have: "86400"},
	}
	want.Sort()
	assert.Equal(t, want, plan)
	assert.Contains(t, plan.String(), "VisibilityTimeout: declared 180, live 30")

	applyInSync(t, ps, tp)
	assert.Equal(t, "180", attributes(t, c, q0.Name)["VisibilityTimeout"])
}

// CreateMissing (serve with create_queues) creates the declared queues that
// are missing with their attributes and redrive policy, and only reports a
// queue that exists and differs: changing a live queue is topology apply's.
func TestCreateMissingCreatesAsDeclaredAndLeavesLiveQueues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tp := uniqueTopology(t, interviewsLike())
	ps := newPubSub(t, testConfig(t))
	c := rawClient(t)

	q0, fifo := tp.Queues[0], tp.Queues[2]
	drift, err := ps.CreateMissing(ctx, tp)
	require.NoError(t, err)
	assert.True(t, drift.InSync(), "nothing existed, so nothing drifted:\n%s", drift)
	got := attributes(t, c, q0.Name)
	assert.Equal(t, secs(q0.VisibilityTimeout), got["VisibilityTimeout"])
	assert.Contains(t, got["RedrivePolicy"], attributes(t, c, q0.DeadLetter.Queue)["QueueArn"])
	assert.Equal(t, "true", attributes(t, c, fifo.Name)["FifoQueue"])
	plan, err := ps.Plan(ctx, tp)
	require.NoError(t, err)
	assert.True(t, plan.InSync(), "created exactly as declared:\n%s", plan)

	_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{
		QueueUrl: aws.String(queueURL(t, c, q0.Name)), Attributes: map[string]string{"VisibilityTimeout": "30"},
	})
	require.NoError(t, err)
	drift, err = ps.CreateMissing(ctx, tp)
	require.NoError(t, err)
	assert.Equal(t, topology.Plan{{Kind: topology.Differs, Object: "queue " + q0.Name, Attribute: "VisibilityTimeout",
		Want: secs(q0.VisibilityTimeout), Have: "30"}}, drift)
	assert.Equal(t, "30", attributes(t, c, q0.Name)["VisibilityTimeout"], "a live queue is left as it is")
}

// A queue that exists with SQS's defaults (CreateQueue with the declared
// attributes would fail with QueueAlreadyExists on SQS) is adopted: its
// attributes are set in place, its messages kept.
func TestApplyAdoptsExistingQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tp := uniqueTopology(t, interviewsLike())
	ps := newPubSub(t, testConfig(t))
	q := tp.Queues[0]

	c := rawClient(t)
	created, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(q.Name)})
	require.NoError(t, err)
	require.NoError(t, ps.Publish(q.Name, newMessages(1)...))

	plan, err := ps.Plan(ctx, tp)
	require.NoError(t, err)
	t.Logf("plan:\n%s", plan)
	assert.Contains(t, plan.String(), "~ queue "+q.Name+": VisibilityTimeout: declared 180, live 30")
	assert.Contains(t, plan.String(), "~ queue "+q.Name+": RedrivePolicy: declared {\"deadLetterTargetArn\":")
	assert.Contains(t, plan.String(), "+ queue "+q.DeadLetter.Queue)

	applyInSync(t, ps, tp)
	assert.Equal(t, aws.ToString(created.QueueUrl), queueURL(t, c, q.Name))
	visible, inFlight := depth(t, c, queueURL(t, c, q.Name))
	assert.Equal(t, 1, visible+inFlight, "the queue's message is still there")
}

// A queue declared without a DLQ (the joinlink queue) loses a redrive policy
// set behind its back.
func TestApplyRemovesUndeclaredRedrive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tp := uniqueTopology(t, topology.Topology{Name: "joinlink", Queues: []topology.Queue{
		{Name: "join-link-events", VisibilityTimeout: 60 * time.Second},
		{Name: "other", MaxReceives: 2, DeadLetter: &topology.DeadLetter{Queue: "other-dlq"}},
	}})
	ps := newPubSub(t, testConfig(t))
	applyInSync(t, ps, tp)

	c := rawClient(t)
	dlqArn := attributes(t, c, tp.Queues[1].DeadLetter.Queue)["QueueArn"]
	_, err := c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{
		QueueUrl:   aws.String(queueURL(t, c, tp.Queues[0].Name)),
		Attributes: map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"` + dlqArn + `","maxReceiveCount":4}`},
	})
	require.NoError(t, err)

	plan, err := ps.Plan(ctx, tp)
	require.NoError(t, err)
	require.Len(t, plan, 1, plan.String())
	assert.Equal(t, "RedrivePolicy", plan[0].Attribute)
	assert.Empty(t, plan[0].Want)

	applyInSync(t, ps, tp)
	assert.Empty(t, attributes(t, c, tp.Queues[0].Name)["RedrivePolicy"])
}

// FifoQueue cannot change in place: Apply changes what it can and returns the
// rest with the operator's fix. On SQS (and the emulator) a queue is FIFO
// exactly when its name ends in .fifo, so a proxy that hides FifoQueue from
// GetQueueAttributes plays a live standard queue under the declared name.
func TestApplyReportsFifoItCannotChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	target, err := url.Parse(testenv.SQSEndpoint(t))
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = func(r *http.Response) error {
		if r.Request.Header.Get("X-Amz-Target") != "AmazonSQS.GetQueueAttributes" {
			return nil
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return err
		}
		_ = r.Body.Close()
		var out struct{ Attributes map[string]string }
		if err := json.Unmarshal(body, &out); err == nil && out.Attributes != nil {
			delete(out.Attributes, "FifoQueue")
			if body, err = json.Marshal(out); err != nil {
				return err
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.Header.Set("Content-Length", strconv.Itoa(len(body)))
		return nil
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	cfg := testConfig(t)
	cfg.Endpoint = srv.URL
	ps := newPubSub(t, cfg)

	tp := uniqueTopology(t, topology.Topology{Name: "booking", Queues: []topology.Queue{
		{Name: "booking.fifo", FIFO: true, ContentBasedDedup: true, VisibilityTimeout: 90 * time.Second},
	}})
	name := tp.Queues[0].Name
	c := rawClient(t)
	_, err = c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: map[string]string{"FifoQueue": "true"}})
	require.NoError(t, err)

	unresolved, err := ps.Apply(ctx, tp)
	require.NoError(t, err)
	t.Logf("unresolved:\n%s", unresolved)
	require.Len(t, unresolved, 2)
	assert.Equal(t, "ContentBasedDeduplication", unresolved[0].Attribute, "a standard queue takes no FIFO attribute")
	assert.NotEmpty(t, unresolved[0].Fix)
	assert.Equal(t, "FifoQueue", unresolved[1].Attribute)
	assert.Equal(t, "true", unresolved[1].Want)
	assert.Equal(t, "false", unresolved[1].Have)
	assert.Contains(t, unresolved[1].Fix, "create a new queue")
	assert.Equal(t, "90", attributes(t, c, name)["VisibilityTimeout"], "what could change did")
	assert.Equal(t, "false", attributes(t, c, name)["ContentBasedDeduplication"], "left alone")

	plan, err := ps.Plan(ctx, tp)
	require.NoError(t, err)
	assert.Equal(t, unresolved, plan, "what is left is exactly what Apply could not do")
}

func TestApplyRejectsInvalidTopology(t *testing.T) {
	t.Parallel()
	ps := newPubSub(t, testConfig(t))
	_, err := ps.Apply(context.Background(), topology.Topology{Name: "bad", Queues: []topology.Queue{{Name: "q", FIFO: true}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), ".fifo")
}

// The redrive policy Apply sets works: a message nacked MaxReceives times
// lands in the DLQ.
func TestRedriveAfterMaxReceives(t *testing.T) {
	t.Parallel()
	tp := uniqueTopology(t, interviewsLike())
	ps := newPubSub(t, testConfig(t))
	applyInSync(t, ps, tp)
	q := tp.Queues[0]

	sent := newMessages(1)[0]
	require.NoError(t, ps.Publish(q.Name, sent))

	ctx, cancel := context.WithCancel(context.Background())
	msgs, err := ps.Subscribe(ctx, q.Name)
	require.NoError(t, err)
	for i := 1; i <= q.MaxReceives; i++ {
		m := brokertest.Next(t, msgs, 15*time.Second)
		assert.Equal(t, sent.UUID, m.UUID)
		assert.Equal(t, strconv.Itoa(i), m.Metadata.Get(sqs.ReceiveCountKey))
		nackAtOnce(t, m)
	}
	nothing(t, msgs, 2*time.Second) // the next receive moves it instead
	cancel()

	dead, err := ps.Subscribe(context.Background(), q.DeadLetter.Queue)
	require.NoError(t, err)
	m := brokertest.Next(t, dead, 15*time.Second)
	assert.Equal(t, sent.UUID, m.UUID)
	assert.Equal(t, sent.Payload, m.Payload)
	m.Ack()
}

// Every spec's topology file (the files config ships) applies and then
// plans in sync.
func TestApplySpecTopologies(t *testing.T) {
	t.Parallel()
	names := config.TopologyNames()
	require.NotEmpty(t, names, "config ships no spec topology")
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			data, err := config.TopologyFile(name)
			require.NoError(t, err)
			tp, err := topology.Parse(data)
			require.NoError(t, err)
			tp = uniqueTopology(t, tp)
			ps := newPubSub(t, testConfig(t))
			applyInSync(t, ps, tp)
			applyInSync(t, ps, tp)
		})
	}
}

// s3Policy reads the queue's access policy back and returns it with the
// statement eventpipe manages.
func s3Policy(t *testing.T, c *awssqs.Client, name string) (doc map[string]any, stmt map[string]any) {
	t.Helper()
	raw := attributes(t, c, name)["Policy"]
	require.NotEmpty(t, raw, "queue %s has no access policy", name)
	require.NoError(t, json.Unmarshal([]byte(raw), &doc), raw)
	for _, s := range doc["Statement"].([]any) {
		if m := s.(map[string]any); m["Sid"] == "eventpipe-s3-notifications" {
			return doc, m
		}
	}
	require.Failf(t, "no eventpipe-s3-notifications statement", "%s", raw)
	return nil, nil
}

// A queue that receives S3 event notifications (the disputes topology's
// ingest-queue, its bucket from the deployment) gets the access policy S3
// needs: created with it, read back with GetQueueAttributes, in sync after;
// a statement someone else added is kept; a new bucket or account changes
// the statement in place.
func TestApplySetsS3NotificationPolicy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	data, err := config.TopologyFile("disputes")
	require.NoError(t, err)
	shipped, err := topology.Parse(data)
	require.NoError(t, err)
	ingest, ok := shipped.Queue("ingest-queue")
	require.True(t, ok)
	require.NotNil(t, ingest.S3Notifications, "the shipped ingest-queue receives S3 notifications")
	assert.Equal(t, "disputes.s3_bucket", ingest.S3Notifications.From)

	withBucket := func(bucket, account string) topology.Topology {
		tp, err := shipped.WithS3Buckets(func(string) (string, string, error) { return bucket, account, nil })
		require.NoError(t, err)
		return tp
	}
	tp := uniqueTopology(t, withBucket("kb-docs", "123456789012"))
	ingestQ := tp.Queues[0].Name
	require.True(t, strings.HasSuffix(ingestQ, "-ingest-queue"), ingestQ)
	ps := newPubSub(t, testConfig(t))
	c := rawClient(t)

	applyInSync(t, ps, tp)
	arn := attributes(t, c, ingestQ)["QueueArn"]
	doc, stmt := s3Policy(t, c, ingestQ)
	assert.Equal(t, "2012-10-17", doc["Version"])
	assert.Equal(t, map[string]any{
		"Sid": "eventpipe-s3-notifications", "Effect": "Allow",
		"Principal": map[string]any{"Service": "s3.amazonaws.com"},
		"Action":    "sqs:SendMessage",
		"Resource":  arn,
		"Condition": map[string]any{
			"ArnLike":      map[string]any{"aws:SourceArn": "arn:aws:s3:::kb-docs"},
			"StringEquals": map[string]any{"aws:SourceAccount": "123456789012"},
		},
	}, stmt)
	for _, q := range tp.AllQueues()[1:] {
		assert.Empty(t, attributes(t, c, q.Name)["Policy"], "only the queue S3 sends to gets a policy: %s", q.Name)
	}

	// Someone adds a statement of their own: it stays, and nothing drifted.
	foreign := map[string]any{"Sid": "ops-read", "Effect": "Allow", "Principal": map[string]any{"AWS": "arn:aws:iam::123456789012:root"},
		"Action": "sqs:ReceiveMessage", "Resource": arn}
	doc["Statement"] = append(doc["Statement"].([]any), foreign)
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	_, err = c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: aws.String(queueURL(t, c, ingestQ)), Attributes: map[string]string{"Policy": string(b)}})
	require.NoError(t, err)
	applyInSync(t, ps, tp)

	// Another bucket, no account condition: the plan shows the statement,
	// apply replaces it and keeps the foreign one.
	moved := uniqueTopologyNames(tp, withBucket("kb-docs-2", ""))
	plan, err := ps.Plan(ctx, moved)
	require.NoError(t, err)
	require.Len(t, plan, 1, "plan:\n%s", plan)
	assert.Equal(t, "Policy.Statement[eventpipe-s3-notifications]", plan[0].Attribute)
	assert.Contains(t, plan[0].Want, "arn:aws:s3:::kb-docs-2")
	assert.Contains(t, plan[0].Have, "arn:aws:s3:::kb-docs")
	applyInSync(t, ps, moved)
	doc, stmt = s3Policy(t, c, ingestQ)
	assert.Equal(t, map[string]any{"ArnLike": map[string]any{"aws:SourceArn": "arn:aws:s3:::kb-docs-2"}}, stmt["Condition"])
	require.Len(t, doc["Statement"], 2)
	assert.Equal(t, "ops-read", doc["Statement"].([]any)[1].(map[string]any)["Sid"], "the foreign statement is kept")

	// The setting unset: the policy is left as it is.
	unset := uniqueTopologyNames(tp, withBucket("", ""))
	applyInSync(t, ps, unset)
	_, stmt = s3Policy(t, c, ingestQ)
	assert.Equal(t, map[string]any{"ArnLike": map[string]any{"aws:SourceArn": "arn:aws:s3:::kb-docs-2"}}, stmt["Condition"])
}

// uniqueTopologyNames gives next the queue names of named (both from the
// same file): the same live queues, declared differently.
func uniqueTopologyNames(named, next topology.Topology) topology.Topology {
	prefix := strings.TrimSuffix(named.Queues[0].Name, next.Queues[0].Name)
	return prefixed(next, prefix)
}
