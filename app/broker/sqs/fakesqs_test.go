package sqs_test

import (
	"bytes"
	"context"
	"crypto/md5" //nolint:gosec // SQS's own body checksum, which the SDK verifies
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/eventpipe/eventpipe/app/broker/sqs"
)

// fakeSQS is one SQS queue behind the SDK's HTTP client, speaking the JSON
// protocol the SDK sends. Unlike the emulator it receives FIFO the way SQS
// does: as many messages of one group as it can in one ReceiveMessage, and
// none of a group while any of its messages is in flight (received, not
// deleted, not yet visible again). A standard queue (a name without .fifo)
// delivers regardless of groups. It answers GetQueueUrl, GetQueueAttributes,
// ReceiveMessage, DeleteMessageBatch and ChangeMessageVisibilityBatch, and
// records what was done to each message.
type fakeSQS struct {
	name string
	fifo bool

	mu       sync.Mutex
	msgs     []*fakeMessage // in the order they were sent
	events   []fakeEvent
	receipts int
}

type fakeMessage struct {
	id, group, body string
	receives        int
	firstReceive    time.Time
	handle          string    // of the latest receive; "" before the first
	visibleAt       time.Time // zero: visible
}

// fakeEvent is one thing the queue did to a message.
type fakeEvent struct {
	at time.Time
	id string
	// op is "receive", "delete" or "visibility".
	op string
	// value is the receive count of a receive, the timeout of a visibility
	// change.
	value int
}

func newFakeSQS(name string) *fakeSQS {
	return &fakeSQS{name: name, fifo: strings.HasSuffix(name, ".fifo")}
}

// send adds a message named id (also its body) to group.
func (f *fakeSQS) send(id, group string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs = append(f.msgs, &fakeMessage{id: id, group: group, body: id})
}

// config is a Config for a PubSub talking to f alone.
func (f *fakeSQS) config() sqs.Config {
	return sqs.Config{
		Region:            "us-east-1",
		Endpoint:          "http://sqs.fake.invalid",
		Credentials:       credentials.NewStaticCredentialsProvider("test", "test", ""),
		WaitTime:          testWaitTime,
		VisibilityTimeout: 30 * time.Second,
		DrainTimeout:      2 * time.Second,
		ClientOptions:     []func(*awssqs.Options){func(o *awssqs.Options) { o.HTTPClient = f }},
	}
}

// eventsOf returns what was done to message id, in order.
func (f *fakeSQS) eventsOf(id string) []fakeEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fakeEvent
	for _, e := range f.events {
		if e.id == id {
			out = append(out, e)
		}
	}
	return out
}

// left is how many messages are not deleted.
func (f *fakeSQS) left() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.msgs)
}

func (f *fakeSQS) Do(r *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS.")
	var answer any
	switch op {
	case "GetQueueUrl":
		answer = map[string]string{"QueueUrl": "http://sqs.fake.invalid/000000000000/" + f.name}
	case "GetQueueAttributes":
		answer = map[string]any{"Attributes": map[string]string{"VisibilityTimeout": "30", "FifoQueue": strconv.FormatBool(f.fifo)}}
	case "ReceiveMessage":
		var in struct {
			MaxNumberOfMessages int
			WaitTimeSeconds     int
			VisibilityTimeout   int
		}
		if err := json.Unmarshal(body, &in); err != nil {
			return nil, err
		}
		answer = map[string]any{"Messages": f.receive(r.Context(), in.MaxNumberOfMessages, in.WaitTimeSeconds, in.VisibilityTimeout)}
	case "DeleteMessageBatch", "ChangeMessageVisibilityBatch":
		var in struct {
			Entries []struct {
				Id                string
				ReceiptHandle     string
				VisibilityTimeout int
			}
		}
		if err := json.Unmarshal(body, &in); err != nil {
			return nil, err
		}
		successful, failed := []any{}, []any{}
		for _, e := range in.Entries {
			if f.settle(op == "DeleteMessageBatch", e.ReceiptHandle, e.VisibilityTimeout) {
				successful = append(successful, map[string]string{"Id": e.Id})
			} else {
				failed = append(failed, map[string]any{"Id": e.Id, "Code": "ReceiptHandleIsInvalid", "Message": "unknown receipt handle", "SenderFault": true})
			}
		}
		answer = map[string]any{"Successful": successful, "Failed": failed}
	default:
		return jsonResponse(r, http.StatusBadRequest, fmt.Sprintf(`{"__type":"com.amazonaws.sqs#InvalidAction","message":"fake SQS does not do %s"}`, op)), nil
	}
	out, err := json.Marshal(answer)
	if err != nil {
		return nil, err
	}
	resp := jsonResponse(r, http.StatusOK, "")
	resp.Body = io.NopCloser(bytes.NewReader(out))
	return resp, nil
}

// receive long-polls up to wait seconds for up to maxN messages.
func (f *fakeSQS) receive(ctx context.Context, maxN, wait, visibility int) []map[string]any {
	if visibility == 0 {
		visibility = 30
	}
	deadline := time.Now().Add(time.Duration(wait) * time.Second)
	for {
		if got := f.take(maxN, visibility); len(got) > 0 || !time.Now().Before(deadline) || ctx.Err() != nil {
			return got
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (f *fakeSQS) take(maxN, visibility int) []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	blocked := map[string]bool{}
	for _, m := range f.msgs {
		if f.fifo && now.Before(m.visibleAt) {
			blocked[m.group] = true
		}
	}
	var out []map[string]any
	for _, m := range f.msgs {
		if len(out) == maxN {
			break
		}
		if now.Before(m.visibleAt) || (f.fifo && blocked[m.group]) {
			continue
		}
		f.receipts++
		m.receives++
		if m.firstReceive.IsZero() {
			m.firstReceive = now
		}
		m.handle = fmt.Sprintf("receipt-%d-%s", f.receipts, m.id)
		m.visibleAt = now.Add(time.Duration(visibility) * time.Second)
		f.events = append(f.events, fakeEvent{at: now, id: m.id, op: "receive", value: m.receives})
		sum := md5.Sum([]byte(m.body)) //nolint:gosec // SQS's own body checksum
		attrs := map[string]string{
			"ApproximateReceiveCount":          strconv.Itoa(m.receives),
			"ApproximateFirstReceiveTimestamp": strconv.FormatInt(m.firstReceive.UnixMilli(), 10),
		}
		// A standard queue may carry groups too (SQS fair queues): only
		// a FIFO queue orders by them.
		if m.group != "" {
			attrs["MessageGroupId"] = m.group
		}
		out = append(out, map[string]any{
			"MessageId":     m.id,
			"ReceiptHandle": m.handle,
			"Body":          m.body,
			"MD5OfBody":     hex.EncodeToString(sum[:]),
			"Attributes":    attrs,
		})
	}
	return out
}

// settle deletes the message received with handle, or changes its
// visibility; false when handle is not its latest receipt.
func (f *fakeSQS) settle(del bool, handle string, visibility int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	for i, m := range f.msgs {
		if m.handle != handle {
			continue
		}
		if del {
			f.msgs = append(f.msgs[:i], f.msgs[i+1:]...)
			f.events = append(f.events, fakeEvent{at: now, id: m.id, op: "delete"})
			return true
		}
		if !now.Before(m.visibleAt) {
			return false // visible again: no longer in flight
		}
		m.visibleAt = now.Add(time.Duration(visibility) * time.Second)
		f.events = append(f.events, fakeEvent{at: now, id: m.id, op: "visibility", value: visibility})
		return true
	}
	return false
}

var _ aws.HTTPClient = (*fakeSQS)(nil)

// fakeQueue returns a fake queue named after the test.
func fakeQueue(t *testing.T, suffix string) *fakeSQS {
	t.Helper()
	name := strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())
	return newFakeSQS(strings.ToLower(name) + suffix)
}
