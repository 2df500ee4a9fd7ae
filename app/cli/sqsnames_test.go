package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/sqs"
	"github.com/eventpipe/eventpipe/app/cli"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/config"
)

// On SQS the StackUp queues are ai-analyze-resume and so on (with
// sqs.queue_prefix in front; a prefix of the test's own keeps it apart from
// every other test on the one emulator), and the command line still takes
// their topology names: drain-check --queue ai.analyze.resume counts the
// mapped queue (and accepts the SQS name too), a message SQS's redrive policy
// moved to the mapped DLQ is redriven by `dlq redrive --queue
// dlq.ai.analyze.resume` to its source, named by its topology name. The
// shipped stackup.yaml declares no max_receives, so the test applies a copy
// that does. Not parallel: the AWS SDK reads its credentials from the process
// environment.
func TestStackUpQueuesOnSQSByTopologyName(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	ctx := context.Background()
	const queue, dlq = "ai.analyze.resume", "dlq.ai.analyze.resume"
	prefix := "ept-" + strings.ToLower(watermill.NewShortUUID())[:8] + "-"
	sqsQueue, sqsDLQ := prefix+"ai-analyze-resume", prefix+"dlq-ai-analyze-resume"
	endpoint := testenv.SQSEndpoint(t)
	environ := []string{"EVENTPIPE_BROKER=sqs", "EVENTPIPE_SQS_ENDPOINT=" + endpoint, "EVENTPIPE_SQS_REGION=" + testenv.SQSRegion,
		"EVENTPIPE_SQS_WAIT_TIME=1s", "EVENTPIPE_SQS_QUEUE_PREFIX=" + prefix, "EVENTPIPE_STACKUP_ENABLED=true", "EVENTPIPE_STACKUP_PROCESSORS=sample", "EVENTPIPE_REALTIME_FANOUT=none", "EVENTPIPE_ADMIN_ADDR="}

	data, err := config.TopologyFile("stackup")
	require.NoError(t, err)
	tp, err := topology.Parse(data)
	require.NoError(t, err)
	raw := awssqs.New(awssqs.Options{Region: testenv.SQSRegion, BaseEndpoint: aws.String(endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")})
	t.Cleanup(func() {
		for _, q := range tp.AllQueues() {
			if out, err := raw.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(sqs.QueueName(prefix, q.Name))}); err == nil {
				_, _ = raw.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: out.QueueUrl})
			}
		}
	})
	withLimit := strings.Replace(string(data), "  - name: ai.analyze.resume\n    type: classic\n",
		"  - name: ai.analyze.resume\n    type: classic\n    max_receives: 3\n", 1)
	require.NotEqual(t, string(data), withLimit)
	file := filepath.Join(t.TempDir(), "stackup.yaml")
	require.NoError(t, os.WriteFile(file, []byte(withLimit), 0o600))
	r := run(t, environ, "topology", "apply", "-f", file)
	require.Equal(t, cli.ExitOK, r.code, r.stdout+r.stderr)
	_, err = raw.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(sqsQueue)})
	require.NoError(t, err, "created under its SQS name")

	ps, err := sqs.New(ctx, sqs.Config{
		Region: testenv.SQSRegion, Endpoint: endpoint, Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		QueuePrefix: prefix, WaitTime: time.Second, VisibilityTimeout: 3 * time.Second,
	}, watermill.NopLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ps.Close() })
	sent := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
	require.NoError(t, ps.Publish(queue, sent))

	r = run(t, environ, "drain-check", "--queue", queue)
	assert.Equal(t, cli.ExitFailure, r.code, r.stderr)
	assert.Contains(t, r.stdout, queue)
	assert.Contains(t, r.stdout, "— not drained")
	r = run(t, environ, "drain-check", "--queue", sqsQueue, "--with-dlq")
	assert.Equal(t, cli.ExitFailure, r.code, r.stderr)
	assert.Contains(t, r.stdout, queue, "the SQS name is taken, the counts named by the topology name")
	assert.Contains(t, r.stdout, dlq, "--with-dlq finds the declared DLQ through the topology name")
	assert.NotContains(t, r.stdout, sqsQueue)

	// Three receives, then SQS's redrive policy moves it to the mapped DLQ.
	subCtx, cancel := context.WithCancel(ctx)
	msgs, err := ps.Subscribe(subCtx, queue)
	require.NoError(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := ps.QueueStats(ctx, dlq)
		require.NoError(t, err)
		if st.Ready > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the message never reached %s", sqsDLQ)
		select {
		case m := <-msgs:
			require.Equal(t, sent.UUID, m.UUID)
			m.Metadata.Set(metadata.NackDelayKey, "0s")
			m.Metadata.Set(metadata.ExplicitNackDelayKey, "true")
			m.Nack()
		case <-time.After(500 * time.Millisecond):
		}
	}
	cancel()

	// Without --max: peek shows up to its default of 10.
	r = run(t, environ, "dlq", "peek", "--queue", sqsDLQ)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, sent.UUID, "peek by the DLQ's SQS name")

	r = run(t, environ, "dlq", "redrive", "--queue", dlq, "--wait", "3s")
	require.Equal(t, cli.ExitOK, r.code, r.stdout+r.stderr)
	// Filled by SQS's redrive policy: moved by the broker (a message move
	// task; on the emulator, batches eventpipe sends and deletes).
	assert.Contains(t, r.stdout, "the broker moved 1 message(s) to "+queue, "the source named by its topology name")
	assert.Contains(t, r.stdout, "1 message(s) redriven from "+dlq)

	back, err := ps.Subscribe(ctx, queue)
	require.NoError(t, err)
	select {
	case m := <-back:
		assert.Equal(t, sent.UUID, m.UUID)
		m.Ack()
	case <-time.After(20 * time.Second):
		t.Fatal("the redriven message never came back")
	}
	r = run(t, environ, "drain-check", "--queue", queue, "--with-dlq", "--wait", "30s")
	assert.Equal(t, cli.ExitOK, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, "— drained")
}

// A prefix that makes a StackUp queue's SQS name longer than 80 characters
// stops every command that connects, naming the queue: checked at start for
// every queue of the enabled specs, before any call to SQS.
func TestSQSQueuePrefixTooLongForAStackUpQueue(t *testing.T) {
	t.Parallel()
	prefix := strings.Repeat("p", 60) + "-" // + dlq-q-realtime-session-notify (29) = 90
	environ := []string{"EVENTPIPE_BROKER=sqs", "EVENTPIPE_SQS_ENDPOINT=http://127.0.0.1:1", "EVENTPIPE_SQS_REGION=us-east-1",
		"EVENTPIPE_SQS_QUEUE_PREFIX=" + prefix, "EVENTPIPE_STACKUP_ENABLED=true", "EVENTPIPE_STACKUP_PROCESSORS=sample", "EVENTPIPE_REALTIME_FANOUT=none", "EVENTPIPE_SERVE_CONNECT_TIMEOUT=1s"}
	r := run(t, environ, "drain-check", "--queue", "ai.analyze.resume")
	assert.NotEqual(t, cli.ExitOK, r.code)
	assert.Contains(t, r.stderr, `topic "dlq.q.realtime.session.notify" maps to queue name "`+prefix+`dlq-q-realtime-session-notify"`)
	assert.Contains(t, r.stderr, "more than 80")
	assert.NotContains(t, r.stderr, "unreachable", "a name error is not retried")
}
