package sqs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/sqs"
)

// Where SQS has StartMessageMoveTask, MoveMessages starts one from the
// DLQ's ARN to the target's with the rate asked, follows it with
// ListMessageMoveTasks until it completes, and reports its count.
func TestMoveMessagesStartsAMoveTask(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		calls []string
		start map[string]any
		polls int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS.")
		var in map[string]any
		_ = json.Unmarshal(body, &in)
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, op)
		var answer any
		switch op {
		case "GetQueueUrl":
			answer = map[string]string{"QueueUrl": "http://" + r.Host + "/000000000000/" + in["QueueName"].(string)}
		case "GetQueueAttributes":
			name := in["QueueUrl"].(string)[strings.LastIndex(in["QueueUrl"].(string), "/")+1:]
			answer = map[string]any{"Attributes": map[string]string{"QueueArn": "arn:aws:sqs:us-east-1:000000000000:" + name}}
		case "StartMessageMoveTask":
			start = in
			answer = map[string]string{"TaskHandle": "task-1"}
		case "ListMessageMoveTasks":
			polls++
			status, moved := "RUNNING", 4
			if polls > 1 {
				status, moved = "COMPLETED", 7
			}
			answer = map[string]any{"Results": []map[string]any{{"Status": status, "ApproximateNumberOfMessagesMoved": moved,
				"SourceArn": in["SourceArn"], "TaskHandle": "task-1"}}}
		default:
			w.WriteHeader(http.StatusBadRequest)
			_, _ = fmt.Fprintf(w, `{"__type":"com.amazonaws.sqs#InvalidAction","message":"not here: %s"}`, op)
			return
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_ = json.NewEncoder(w).Encode(answer)
	}))
	t.Cleanup(srv.Close)
	ps := newPubSub(t, sqs.Config{Region: "us-east-1", Endpoint: srv.URL, Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		WaitTime: testWaitTime, DrainTimeout: time.Second})
	var mover broker.MessageMover = ps
	var progress []int64
	moved, err := mover.MoveMessages(context.Background(), "orders-dlq", "orders", 50, func(n int64) { progress = append(progress, n) })
	require.NoError(t, err)
	assert.EqualValues(t, 7, moved)
	assert.Equal(t, []int64{4, 7}, progress)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, map[string]any{"SourceArn": "arn:aws:sqs:us-east-1:000000000000:orders-dlq",
		"DestinationArn": "arn:aws:sqs:us-east-1:000000000000:orders", "MaxNumberOfMessagesPerSecond": float64(50)}, start)
	assert.Contains(t, calls, "ListMessageMoveTasks")
	assert.NotContains(t, calls, "ReceiveMessage", "SQS moved them, not eventpipe")
}

// The emulator has no StartMessageMoveTask: MoveMessages moves the DLQ's
// messages itself, in batches, with their bodies and attributes, on FIFO
// with their groups, and leaves the DLQ empty.
func TestMoveMessagesByHandOnTheEmulator(t *testing.T) {
	t.Parallel()
	for _, suffix := range []string{"", ".fifo"} {
		t.Run("queue"+suffix, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c := rawClient(t)
			base := brokertest.Topic(t)
			dlq, source := base+"-dlq"+suffix, base+suffix
			attrs := map[string]string{}
			if suffix != "" {
				attrs["FifoQueue"] = "true"
			}
			d, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(dlq), Attributes: attrs})
			require.NoError(t, err)
			s, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(source), Attributes: attrs})
			require.NoError(t, err)
			const n = 13 // two batches and a bit
			for i := range n {
				in := &awssqs.SendMessageInput{QueueUrl: d.QueueUrl, MessageBody: aws.String(fmt.Sprintf(`{"n":%d}`, i)),
					MessageAttributes: map[string]types.MessageAttributeValue{"x-trace-id": {DataType: aws.String("String"), StringValue: aws.String(fmt.Sprintf("trace-%d", i))}}}
				if suffix != "" {
					in.MessageGroupId = aws.String(fmt.Sprintf("group-%d", i%2))
					in.MessageDeduplicationId = aws.String(fmt.Sprintf("dedup-%d", i))
				}
				_, err := c.SendMessage(ctx, in)
				require.NoError(t, err)
			}

			ps := newPubSub(t, testConfig(t))
			moved, err := ps.MoveMessages(ctx, dlq, source, 0, nil)
			require.NoError(t, err)
			assert.EqualValues(t, n, moved)

			seen := map[string]string{}
			for len(seen) < n {
				out, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: s.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
					MessageAttributeNames: []string{"All"}, MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameMessageGroupId}})
				require.NoError(t, err)
				require.NotEmpty(t, out.Messages, "only %d of %d arrived", len(seen), n)
				for _, m := range out.Messages {
					var body struct{ N int }
					require.NoError(t, json.Unmarshal([]byte(aws.ToString(m.Body)), &body))
					assert.Equal(t, fmt.Sprintf("trace-%d", body.N), aws.ToString(m.MessageAttributes["x-trace-id"].StringValue), "attributes kept")
					if suffix != "" {
						assert.Equal(t, fmt.Sprintf("group-%d", body.N%2), m.Attributes["MessageGroupId"], "group kept")
					}
					seen[aws.ToString(m.Body)] = aws.ToString(m.ReceiptHandle)
					_, err := c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: s.QueueUrl, ReceiptHandle: m.ReceiptHandle})
					require.NoError(t, err)
				}
			}
			left, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: d.QueueUrl, AttributeNames: []types.QueueAttributeName{"All"}})
			require.NoError(t, err)
			assert.Equal(t, "0", left.Attributes["ApproximateNumberOfMessages"])
			assert.Equal(t, "0", left.Attributes["ApproximateNumberOfMessagesNotVisible"])
		})
	}
}
