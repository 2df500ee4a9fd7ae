package sqs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/sqs"
)

// failingDeletes is the SQS API with its first DeleteMessageBatch calls
// failing, as fail says; every other call reaches the emulator.
type failingDeletes struct {
	inner aws.HTTPClient
	// failures is how many DeleteMessageBatch calls fail.
	failures atomic.Int32
	// fail answers one failing call.
	fail  func(r *http.Request) *http.Response
	calls atomic.Int32
}

func (f *failingDeletes) Do(r *http.Request) (*http.Response, error) {
	if r.Header.Get("X-Amz-Target") == "AmazonSQS.DeleteMessageBatch" {
		f.calls.Add(1)
		if f.failures.Add(-1) >= 0 {
			return f.fail(r), nil
		}
	}
	return f.inner.Do(r)
}

func jsonResponse(r *http.Request, status int, body string) *http.Response {
	return &http.Response{
		StatusCode: status,
		Status:     http.StatusText(status),
		Header:     http.Header{"Content-Type": {"application/x-amz-json-1.0"}},
		Body:       io.NopCloser(strings.NewReader(body)),
		Request:    r,
	}
}

// entriesFailed answers a DeleteMessageBatch with every entry failed with
// code, as SQS does for a partial batch failure (HTTP 200).
func entriesFailed(code string, senderFault bool) func(r *http.Request) *http.Response {
	return func(r *http.Request) *http.Response {
		var in struct{ Entries []struct{ Id string } }
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &in)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var failed []string
		for _, e := range in.Entries {
			failed = append(failed, fmt.Sprintf(`{"Id":%q,"Code":%q,"Message":"injected","SenderFault":%t}`, e.Id, code, senderFault))
		}
		return jsonResponse(r, http.StatusOK, `{"Successful":[],"Failed":[`+strings.Join(failed, ",")+`]}`)
	}
}

// serverError answers with a 500, which the SDK retries on its own first.
func serverError(r *http.Request) *http.Response {
	return jsonResponse(r, http.StatusInternalServerError, `{"__type":"com.amazonaws.sqs#InternalError","message":"injected"}`)
}

// An ack whose delete fails is deleted all the same: the adapter retries it
// (a partial batch failure, or a whole call failing past the SDK's own
// retries) within the message's visibility, so it is neither delivered again
// nor, on a FIFO queue, holding its group until the visibility timeout.
func TestAckRetriesFailedDelete(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		failures int32
		fail     func(*http.Request) *http.Response
	}{
		"entry failed":                       {1, entriesFailed("InternalError", false)},      //nolint:bodyclose // a fake transport's response: the SDK reads and closes it
		"entries failed twice":               {2, entriesFailed("ServiceUnavailable", false)}, //nolint:bodyclose // as above
		"call failed past the SDK's retries": {3, serverError},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake := &failingDeletes{inner: awshttp.NewBuildableClient(), fail: tc.fail}
			fake.failures.Store(tc.failures)
			cfg := testConfig(t)
			cfg.VisibilityTimeout = 20 * time.Second // room for the SDK's own retries of a 500
			cfg.ClientOptions = []func(*awssqs.Options){func(o *awssqs.Options) { o.HTTPClient = fake }}
			ps := newPubSub(t, cfg)
			topic := brokertest.Topic(t)
			require.NoError(t, ps.SubscribeInitialize(topic))
			require.NoError(t, ps.Publish(topic, newMessages(1)...))

			msgs, err := ps.Subscribe(context.Background(), topic)
			require.NoError(t, err)
			require.True(t, brokertest.Next(t, msgs, 10*time.Second).Ack())

			c := rawClient(t)
			url := queueURL(t, c, topic)
			assert.EventuallyWithT(t, func(c2 *assert.CollectT) {
				visible, inFlight := depth(c2, c, url)
				assert.Equal(c2, 0, visible+inFlight, "acked: deleted after the failed delete was retried")
			}, 15*time.Second, 100*time.Millisecond)
			assert.Greater(t, fake.calls.Load(), tc.failures, "deleted again after the failures")
		})
	}
}

// A delete SQS refuses because the receipt handle is no longer valid (the
// visibility timeout ran out and the message went to another consumer) is
// not retried: the redelivery is expected, and logged as such at info.
func TestStaleReceiptIsNotRetried(t *testing.T) {
	t.Parallel()
	fake := &failingDeletes{inner: awshttp.NewBuildableClient(), fail: entriesFailed("ReceiptHandleIsInvalid", true)} //nolint:bodyclose // a fake transport's response: the SDK reads and closes it
	fake.failures.Store(1)
	logs := newSyncLogs()
	cfg := testConfig(t)
	cfg.ClientOptions = []func(*awssqs.Options){func(o *awssqs.Options) { o.HTTPClient = fake }}
	ps, err := sqs.New(context.Background(), cfg, logs)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ps.Close() })
	topic := brokertest.Topic(t)
	require.NoError(t, ps.SubscribeInitialize(topic))
	require.NoError(t, ps.Publish(topic, newMessages(1)...))

	msgs, err := ps.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	m := brokertest.Next(t, msgs, 10*time.Second)
	require.True(t, m.Ack())

	require.Eventually(t, func() bool {
		for _, l := range logs.at(watermill.InfoLogLevel) {
			if strings.Contains(l.Msg, "delivered again") && l.Fields["message_id"] != "" {
				return true
			}
		}
		return false
	}, 5*time.Second, 20*time.Millisecond, "the stale receipt is logged at info with the message id")
	time.Sleep(time.Second) // time for a retry, if one were made
	assert.Equal(t, int32(1), fake.calls.Load(), "not retried")
	assert.Empty(t, logs.at(watermill.ErrorLogLevel), "an expected redelivery is no error")
}
