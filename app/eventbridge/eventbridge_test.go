package eventbridge_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/eventbridge"
	"github.com/eventpipe/eventpipe/handlers/joinlink"
)

// call is one request the SDK sent.
type call struct {
	Method, Path, Group string
	Body                map[string]any
}

// fakeScheduler answers as EventBridge Scheduler's REST-JSON API does:
// each handler returns a status and, for an error, its x-amzn-errortype.
type fakeScheduler struct {
	mu    sync.Mutex
	calls []call
	reply func(method string) (status int, errType string)
}

func (f *fakeScheduler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	c := call{Method: r.Method, Path: r.URL.Path, Group: r.URL.Query().Get("groupName")}
	_ = json.Unmarshal(b, &c.Body)
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
	status, errType := f.reply(r.Method)
	w.Header().Set("Content-Type", "application/json")
	if errType != "" {
		w.Header().Set("X-Amzn-Errortype", errType)
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"Message":"`+errType+` from the fake"}`)
		return
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, `{"ScheduleArn":"arn:aws:scheduler:us-east-1:123456789012:schedule/jl/join-link-42"}`)
}

func (f *fakeScheduler) took() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.calls
	f.calls = nil
	return out
}

func newAdapter(t *testing.T, f *fakeScheduler) *eventbridge.Schedules {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	client := scheduler.New(scheduler.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	return &eventbridge.Schedules{Client: client, TargetQueueARN: "arn:aws:sqs:us-east-1:123456789012:join-link-generation",
		RoleARN: "arn:aws:iam::123456789012:role/join-link-scheduler", Group: "jl"}
}

// The requests the SDK sends for each operation, checked field by field
// against the spec: the deterministic name, a one-time at() in UTC with no
// flexible window, the queue target with the message as input and the
// execution role, the group, and deletion after completion.
func TestSchedulesAgainstTheSchedulerAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := &fakeScheduler{}
	e := newAdapter(t, f)
	body, err := joinlink.Encode(joinlink.NewMessage(joinlink.Data{ProgramSessionID: 42, ActorUserID: 7}, time.Now()))
	require.NoError(t, err)
	fireAt := time.Date(2026, 12, 2, 15, 30, 0, 0, time.FixedZone("IST", 5*3600+1800))
	s := joinlink.Schedule{Name: joinlink.ScheduleName(42), ProgramSessionID: 42, FireAt: fireAt, Body: body}
	want := map[string]any{
		"ScheduleExpression":         "at(2026-12-02T10:00:00)",
		"ScheduleExpressionTimezone": "UTC",
		"FlexibleTimeWindow":         map[string]any{"Mode": "OFF"},
		"GroupName":                  "jl",
		"ActionAfterCompletion":      "DELETE",
		"Target": map[string]any{
			"Arn":     "arn:aws:sqs:us-east-1:123456789012:join-link-generation",
			"RoleArn": "arn:aws:iam::123456789012:role/join-link-scheduler",
			"Input":   string(body),
		},
	}

	// Missing: the update is refused, so it is created.
	f.reply = func(m string) (int, string) {
		if m == http.MethodPut {
			return 404, "ResourceNotFoundException"
		}
		return 200, ""
	}
	require.NoError(t, e.Upsert(ctx, s))
	calls := f.took()
	require.Len(t, calls, 2)
	assert.Equal(t, http.MethodPut, calls[0].Method)
	assert.Equal(t, http.MethodPost, calls[1].Method)
	for _, c := range calls {
		assert.Equal(t, "/schedules/join-link-42", c.Path)
		if c.Body["ClientToken"] != nil {
			delete(c.Body, "ClientToken") // the SDK's idempotency token
		}
		assert.Equal(t, want, c.Body, c.Method)
	}

	// Present: one update.
	f.reply = func(string) (int, string) { return 200, "" }
	require.NoError(t, e.Upsert(ctx, s))
	calls = f.took()
	require.Len(t, calls, 1)
	assert.Equal(t, http.MethodPut, calls[0].Method)

	// Created meanwhile by another replica: updated again.
	puts := 0
	f.reply = func(m string) (int, string) {
		switch m {
		case http.MethodPut:
			if puts++; puts == 1 {
				return 404, "ResourceNotFoundException"
			}
			return 200, ""
		default:
			return 409, "ConflictException"
		}
	}
	require.NoError(t, e.Upsert(ctx, s))
	calls = f.took()
	require.Len(t, calls, 3)
	assert.Equal(t, []string{http.MethodPut, http.MethodPost, http.MethodPut}, []string{calls[0].Method, calls[1].Method, calls[2].Method})

	// Refused (no permission): the error comes back, for the best-effort
	// caller to log and count.
	f.reply = func(string) (int, string) { return 403, "AccessDeniedException" }
	err = e.Upsert(ctx, s)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "join-link-42")
	f.took()

	// Delete, with the group; a schedule already gone (fired and deleted)
	// is not an error; another failure is.
	f.reply = func(string) (int, string) { return 200, "" }
	require.NoError(t, e.Delete(ctx, "join-link-42"))
	calls = f.took()
	require.Len(t, calls, 1)
	assert.Equal(t, call{Method: http.MethodDelete, Path: "/schedules/join-link-42", Group: "jl"}, call{Method: calls[0].Method, Path: calls[0].Path, Group: calls[0].Group})
	f.reply = func(string) (int, string) { return 404, "ResourceNotFoundException" }
	require.NoError(t, e.Delete(ctx, "join-link-42"))
	f.reply = func(string) (int, string) { return 500, "InternalServerException" }
	require.Error(t, e.Delete(ctx, "join-link-42"))
}

func TestNewNeedsTargetAndRole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := eventbridge.New(ctx, joinlink.EventBridgeConfig{RoleARN: "r"})
	assert.ErrorContains(t, err, "AWS_SCHEDULER_TARGET_QUEUE_ARN")
	_, err = eventbridge.New(ctx, joinlink.EventBridgeConfig{TargetQueueARN: "q"})
	assert.ErrorContains(t, err, "AWS_SCHEDULER_EXECUTION_ROLE_ARN")
	_, err = eventbridge.New(ctx, joinlink.EventBridgeConfig{TargetQueueARN: "q", RoleARN: "r", Region: "us-east-1"})
	assert.NoError(t, err)
}
