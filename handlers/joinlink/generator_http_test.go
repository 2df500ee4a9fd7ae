package joinlink_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/spec"
	"github.com/eventpipe/eventpipe/config"
	"github.com/eventpipe/eventpipe/handlers/joinlink"
)

// The bulkRegister client against its HTTP contract: the request it sends,
// the result it reads, and how each failure is classed.
func TestHTTPGenerator(t *testing.T) {
	t.Parallel()
	var (
		mu  sync.Mutex
		got struct {
			method, path, auth, ctype string
			body                      map[string]any
		}
		status, reply, retryAfter = http.StatusOK, `{"jobId":"job-9","total":12}`, ""
		delay                     time.Duration
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got.method, got.path, got.auth, got.ctype = r.Method, r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Content-Type")
		got.body = nil
		_ = json.Unmarshal(b, &got.body)
		st, rep, ra, d := status, reply, retryAfter, delay
		mu.Unlock()
		time.Sleep(d)
		if ra != "" {
			w.Header().Set("Retry-After", ra)
		}
		w.WriteHeader(st)
		_, _ = io.WriteString(w, rep)
	}))
	t.Cleanup(srv.Close)
	g := &joinlink.HTTPGenerator{URL: srv.URL + "/internal/online-session/bulk-register", Token: "s3cret", Timeout: 500 * time.Millisecond}
	ctx := context.Background()

	res, err := g.BulkRegister(ctx, joinlink.BulkRequest{SessionID: 42, Role: "attendee", BatchSize: 100}, 7)
	require.NoError(t, err)
	assert.Equal(t, joinlink.BulkResult{JobID: "job-9", Total: 12}, res)
	mu.Lock()
	assert.Equal(t, http.MethodPost, got.method)
	assert.Equal(t, "/internal/online-session/bulk-register", got.path)
	assert.Equal(t, "Bearer s3cret", got.auth)
	assert.Equal(t, "application/json", got.ctype)
	assert.Equal(t, map[string]any{"sessionId": float64(42), "role": "attendee", "batchSize": float64(100), "actorUserId": float64(7)}, got.body)
	mu.Unlock()

	_, err = g.BulkRegister(ctx, joinlink.BulkRequest{SessionID: 43}, 0)
	require.NoError(t, err)
	mu.Lock()
	assert.Equal(t, map[string]any{"sessionId": float64(43)}, got.body, "defaults and no actor are left out")
	mu.Unlock()

	for name, c := range map[string]struct {
		status     int
		reply      string
		retryAfter string
		delay      time.Duration
		class      failure.Class
		retryIn    time.Duration
	}{
		"503":                  {status: 503, reply: "down", class: failure.Transient},
		"429 with Retry-After": {status: 429, retryAfter: "7", class: failure.Transient, retryIn: 7 * time.Second},
		"408":                  {status: 408, class: failure.Transient},
		"timeout":              {status: 200, reply: `{"jobId":"j","total":1}`, delay: time.Second, class: failure.Transient},
		"400":                  {status: 400, reply: `{"error":"no such session"}`, class: failure.Permanent},
		"404":                  {status: 404, class: failure.Permanent},
		"200 without a result": {status: 200, reply: `{"ok":true}`, class: failure.Permanent},
		"200 that is not JSON": {status: 200, reply: `<html>`, class: failure.Permanent},
	} {
		mu.Lock()
		status, reply, retryAfter, delay = c.status, c.reply, c.retryAfter, c.delay
		mu.Unlock()
		_, err := g.BulkRegister(ctx, joinlink.BulkRequest{SessionID: 44}, 0)
		require.Error(t, err, name)
		assert.Equal(t, c.class, failure.Of(err), "%s: %v", name, err)
		assert.Equal(t, c.retryIn, failure.RetryAfter(err), name)
		assert.Contains(t, err.Error(), "session 44", name)
	}
}

// A production config must not run on the fake: without an endpoint the
// spec refuses to build, unless sample_traffic asks for the demo's fake.
func TestModuleNeedsABulkRegisterEndpoint(t *testing.T) {
	t.Parallel()
	build := func(mut func(*config.JoinLink)) error {
		cfg := config.Defaults()
		cfg.JoinLink.Enabled = true
		mut(&cfg.JoinLink)
		_, err := joinlink.Module.Build(context.Background(), spec.Deps{
			Config: cfg, Getenv: func(string) string { return "" }, Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry(),
		})
		return err
	}
	err := build(func(*config.JoinLink) {})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "joinlink.bulk_register_url")
	require.NoError(t, build(func(c *config.JoinLink) { c.SampleTraffic = true }), "the demo's fake")
	require.NoError(t, build(func(c *config.JoinLink) { c.BulkRegisterURL = "http://online-session.internal/bulk-register" }))
}

// On SQS the schedules go to the EventBridge adapter the root hands in, with
// the spec's AWS_SCHEDULER_* variables when eventpipe's keys are empty and
// ENABLE_JOIN_LINK_SCHEDULER deciding when set; no in-process dispatcher
// runs. Without the adapter the spec refuses to start.
func TestModuleSchedulesOnEventBridgeOnSQS(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"ENABLE_JOIN_LINK_SCHEDULER":       "true",
		"AWS_SCHEDULER_TARGET_QUEUE_ARN":   "arn:aws:sqs:eu-west-1:1:join-link-generation",
		"AWS_SCHEDULER_EXECUTION_ROLE_ARN": "arn:aws:iam::1:role/jl",
	}
	cfg := config.Defaults()
	cfg.Broker.Kind = config.KindSQS
	cfg.JoinLink.Enabled, cfg.JoinLink.SampleTraffic = true, true
	cfg.JoinLink.SchedulerGroupName = "jl"
	deps := spec.Deps{Config: cfg, Getenv: func(k string) string { return env[k] }, Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry()}
	var got joinlink.EventBridgeConfig
	m := joinlink.NewModule(joinlink.Adapters{EventBridge: func(_ context.Context, c joinlink.EventBridgeConfig) (joinlink.Schedules, error) {
		got = c
		return joinlink.NewMemorySchedules(), nil
	}})
	parts, err := m.Build(context.Background(), deps)
	require.NoError(t, err)
	assert.Equal(t, joinlink.EventBridgeConfig{TargetQueueARN: env["AWS_SCHEDULER_TARGET_QUEUE_ARN"], RoleARN: env["AWS_SCHEDULER_EXECUTION_ROLE_ARN"], Group: "jl"}, got)
	for _, w := range parts.Workers {
		assert.NotEqual(t, "joinlink dispatcher", w.Name, "EventBridge delivers; nothing dispatches in process")
	}

	deps.Registerer = prometheus.NewRegistry()
	_, err = joinlink.Module.Build(context.Background(), deps)
	assert.ErrorContains(t, err, "EventBridge Scheduler adapter")

	env["ENABLE_JOIN_LINK_SCHEDULER"] = "yes please"
	deps.Registerer = prometheus.NewRegistry()
	_, err = m.Build(context.Background(), deps)
	assert.ErrorContains(t, err, "ENABLE_JOIN_LINK_SCHEDULER")
}
