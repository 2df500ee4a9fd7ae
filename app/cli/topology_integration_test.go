package cli_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/cli"
	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/config"
	"github.com/eventpipe/eventpipe/handlers/realtime"
)

var specFiles = []string{"-f", specs + "interviews.yaml", "-f", specs + "disputes.yaml", "-f", specs + "stackup.yaml", "-f", specs + "booking.yaml", "-f", specs + "joinlink.yaml"}

func topologyArgs(verb string) []string {
	return append([]string{"topology", verb}, specFiles...)
}

// Every spec provisions on RabbitMQ from the command line; plan is in sync
// afterwards, and apply twice changes nothing.
func TestTopologyApplyPlanOnRabbitMQ(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQURL(t)
	vhost := "ep-cli-" + strings.ToLower(time.Now().Format("150405.000000"))
	rabbitmqctl(t, "add_vhost", vhost)
	t.Cleanup(func() { rabbitmqctl(t, "delete_vhost", vhost) })
	rabbitmqctl(t, "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
	environ := []string{"EVENTPIPE_BROKER=rabbitmq", "EVENTPIPE_RABBITMQ_URL=" + strings.TrimSuffix(url, "/") + "/" + vhost}

	r := run(t, environ, topologyArgs("plan")...)
	assert.Equal(t, cli.ExitFailure, r.code, "plan before apply must report drift: %s", r.stderr)
	assert.Contains(t, r.stdout, "+ queue ai.generate.questions")

	for range 2 {
		r = run(t, environ, topologyArgs("apply")...)
		require.Equal(t, cli.ExitOK, r.code, r.stdout+r.stderr)
		assert.Contains(t, r.stdout, "rabbitmq: stackup applied")
	}
	r = run(t, environ, topologyArgs("plan")...)
	require.Equal(t, cli.ExitOK, r.code, r.stdout+r.stderr)
	assert.Equal(t, 5, strings.Count(r.stdout, "in sync: nothing to change"), r.stdout)
	assert.Contains(t, r.stdout, "note: queue interview-completed:", "classic queues cannot enforce max_receives natively")
}

// Every spec provisions on SQS from the command line; a queue changed behind
// its back shows up in plan (exit 1) and apply puts it back.
func TestTopologyApplyPlanDriftOnSQS(t *testing.T) {
	endpoint := testenv.SQSEndpoint(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	environ := []string{"EVENTPIPE_BROKER=sqs", "EVENTPIPE_SQS_ENDPOINT=" + endpoint, "EVENTPIPE_SQS_REGION=" + testenv.SQSRegion}

	r := run(t, environ, topologyArgs("apply")...)
	require.Equal(t, cli.ExitOK, r.code, r.stdout+r.stderr)
	r = run(t, environ, topologyArgs("plan")...)
	require.Equal(t, cli.ExitOK, r.code, r.stdout+r.stderr)
	assert.Equal(t, 5, strings.Count(r.stdout, "in sync: nothing to change"), r.stdout)

	// Drift: someone shortens the interviews queue's visibility timeout.
	ctx := context.Background()
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(testenv.SQSRegion),
		awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")))
	require.NoError(t, err)
	client := sqs.NewFromConfig(awsCfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(endpoint) })
	url, err := client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("interview-completed")})
	require.NoError(t, err)
	_, err = client.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{
		QueueUrl:   url.QueueUrl,
		Attributes: map[string]string{string(types.QueueAttributeNameVisibilityTimeout): "30"},
	})
	require.NoError(t, err)

	r = run(t, environ, "topology", "plan", "-f", specs+"interviews.yaml")
	assert.Equal(t, cli.ExitFailure, r.code)
	assert.Contains(t, r.stdout, "VisibilityTimeout: declared 180, live 30")

	r = run(t, environ, "topology", "apply", "-f", specs+"interviews.yaml")
	require.Equal(t, cli.ExitOK, r.code, r.stdout+r.stderr)
	r = run(t, environ, "topology", "plan", "-f", specs+"interviews.yaml")
	assert.Equal(t, cli.ExitOK, r.code, r.stdout)
}

// `topology apply` on SQS gives a queue that receives S3 notifications the
// access policy S3 needs, for the bucket the deployment configures
// (disputes.s3_bucket, disputes.s3_source_account): the policy read back
// with GetQueueAttributes. The file declares a queue of this test's own,
// shaped like disputes' ingest-queue.
func TestTopologyApplySetsIngestQueuePolicyOnSQS(t *testing.T) {
	endpoint := testenv.SQSEndpoint(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	queue := "ep-cli-" + strings.ToLower(watermill.NewShortUUID()) + "-ingest-queue"
	file := filepath.Join(t.TempDir(), "ingest.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`name: ingest
queues:
  - name: `+queue+`
    s3_notifications: {from: disputes.s3_bucket}
    max_receives: 3
    dead_letter: {queue: `+queue+`-dlq}
`), 0o600))
	environ := []string{"EVENTPIPE_BROKER=sqs", "EVENTPIPE_SQS_ENDPOINT=" + endpoint, "EVENTPIPE_SQS_REGION=" + testenv.SQSRegion,
		"EVENTPIPE_DISPUTES_S3_BUCKET=kb-docs", "EVENTPIPE_DISPUTES_S3_SOURCE_ACCOUNT=123456789012"}

	ctx := context.Background()
	client := sqs.New(sqs.Options{Region: testenv.SQSRegion, BaseEndpoint: aws.String(endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")})
	t.Cleanup(func() {
		for _, q := range []string{queue, queue + "-dlq"} {
			if u, err := client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(q)}); err == nil {
				_, _ = client.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: u.QueueUrl})
			}
		}
	})
	r := run(t, environ, "topology", "apply", "-f", file)
	require.Equal(t, cli.ExitOK, r.code, r.stdout+r.stderr)
	u, err := client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(queue)})
	require.NoError(t, err)
	attrs, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: u.QueueUrl,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNamePolicy, types.QueueAttributeNameQueueArn}})
	require.NoError(t, err)
	var policy struct {
		Version   string
		Statement []map[string]any
	}
	require.NoError(t, json.Unmarshal([]byte(attrs.Attributes["Policy"]), &policy), attrs.Attributes["Policy"])
	assert.Equal(t, "2012-10-17", policy.Version)
	require.Len(t, policy.Statement, 1)
	assert.Equal(t, map[string]any{
		"Sid": "eventpipe-s3-notifications", "Effect": "Allow",
		"Principal": map[string]any{"Service": "s3.amazonaws.com"}, "Action": "sqs:SendMessage",
		"Resource": attrs.Attributes["QueueArn"],
		"Condition": map[string]any{
			"ArnLike":      map[string]any{"aws:SourceArn": "arn:aws:s3:::kb-docs"},
			"StringEquals": map[string]any{"aws:SourceAccount": "123456789012"},
		},
	}, policy.Statement[0])

	r = run(t, environ, "topology", "plan", "-f", file)
	assert.Equal(t, cli.ExitOK, r.code, r.stdout+r.stderr)
	r = run(t, append(environ[:3:3], "EVENTPIPE_DISPUTES_S3_BUCKET=kb-docs-2"), "topology", "plan", "-f", file)
	assert.Equal(t, cli.ExitFailure, r.code, "another bucket is drift: %s", r.stdout)
	assert.Contains(t, r.stdout, "Policy.Statement[eventpipe-s3-notifications]")
}

func rabbitmqctl(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", args...).CombinedOutput()
	require.NoError(t, err, "rabbitmqctl %v: %s", args, out)
}

// With rabbitmq.queue_type quorum, serve's broker declares every spec queue
// and its dead-letter queue quorum — the instance fan-out queue stays classic,
// as a transient queue must — and `topology plan` and `apply`, given the same
// environment, find exactly what serve declared. Without the switch, serve's
// classic declaration of those queues is refused: the failure the switch
// exists for.
func TestQueueTypeQuorumServeAndProvisioningAgree(t *testing.T) {
	t.Parallel()
	amqpURL, vhost := testenv.RabbitMQVhost(t)
	asDeclared := []string{
		"EVENTPIPE_BROKER=rabbitmq", "EVENTPIPE_RABBITMQ_URL=" + amqpURL,
		"EVENTPIPE_INTERVIEWS_ENABLED=true", "EVENTPIPE_STACKUP_ENABLED=true", "EVENTPIPE_STACKUP_PROCESSORS=sample", "EVENTPIPE_DISPUTES_ENABLED=true",
		"EVENTPIPE_BOOKING_ENABLED=true", "EVENTPIPE_JOINLINK_ENABLED=true",
	}
	environ := append(slices.Clone(asDeclared), "EVENTPIPE_RABBITMQ_QUEUE_TYPE=quorum")
	serveBroker := func(environ []string) broker.PubSub {
		cfg, err := config.Load("", environ)
		require.NoError(t, err)
		ps, err := app.NewBroker(context.Background(), cfg, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		t.Cleanup(func() { _ = ps.Close() })
		return ps
	}
	ps := serveBroker(environ)
	init := ps.(message.SubscribeInitializer)
	require.NoError(t, init.SubscribeInitialize("booking-session-events.fifo"), "declares every spec's topology")
	require.NoError(t, init.SubscribeInitialize(realtime.FanoutTopic))

	out := testenv.RabbitMQCtl(t, "list_queues", "-p", vhost, "name", "type", "durable")
	types := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		require.Len(t, f, 3, line)
		if f[0] == "name" {
			continue
		}
		types[f[0]] = f[1] + " " + f[2]
	}
	fanout := 0
	for name, typ := range types {
		if strings.HasPrefix(name, realtime.FanoutTopic+".") {
			fanout++
			assert.Equal(t, "classic false", typ, "%s: an instance queue is transient, never quorum", name)
			continue
		}
		assert.Equal(t, "quorum true", typ, name)
	}
	assert.Equal(t, 1, fanout)
	assert.Len(t, types, 4+30+4+2+1+1, "interviews, stackup, disputes, booking (queues and DLQs), joinlink, the fan-out queue")

	r := run(t, environ, topologyArgs("plan")...)
	require.Equal(t, cli.ExitOK, r.code, "plan finds what serve declared:\n%s%s", r.stdout, r.stderr)
	assert.Equal(t, 5, strings.Count(r.stdout, "in sync: nothing to change"), r.stdout)
	assert.NotContains(t, r.stdout, "classic queues have no delivery limit")
	assert.Contains(t, r.stdout, "note: queue join-link-generation: quorum without a dead-letter exchange")
	r = run(t, environ, topologyArgs("apply")...)
	require.Equal(t, cli.ExitOK, r.code, r.stdout+r.stderr)

	err := serveBroker(asDeclared).(message.SubscribeInitializer).SubscribeInitialize("booking-session-events.fifo")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "inequivalent arg 'x-queue-type'")
	r = run(t, asDeclared, topologyArgs("plan")...)
	assert.Equal(t, cli.ExitFailure, r.code)
	assert.Contains(t, r.stdout, "x-queue-type")
}
