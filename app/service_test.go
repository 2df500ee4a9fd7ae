package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/app/spec"
	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/config"
)

// syncBuffer is a log sink safe for the service's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// The embedded default with the demo: messages flow, the admin endpoints
// answer, and cancelling the context shuts down cleanly.
func TestServiceDemoOnMemory(t *testing.T) {
	t.Parallel()
	cfg := config.Defaults()
	cfg.Admin.Addr = "127.0.0.1:0"
	cfg.Demo.Enabled = true
	cfg.Demo.Interval = 20 * time.Millisecond
	var logs syncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	svc, err := app.New(ctx, cfg, logger)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()

	base := "http://" + svc.AdminAddr()
	if !assert.Eventually(t, func() bool {
		return strings.Contains(logs.String(), `"msg":"greeted"`)
	}, 10*time.Second, 20*time.Millisecond) {
		require.Failf(t, "no greeting went through both handlers", "logs:\n%s", logs.String())
	}

	code, _ := get(t, base+"/healthz")
	assert.Equal(t, http.StatusOK, code)
	code, body := get(t, base+"/readyz")
	assert.Equal(t, http.StatusOK, code, body)
	var ready struct {
		Ready  bool              `json:"ready"`
		Checks map[string]string `json:"checks"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &ready))
	assert.True(t, ready.Ready)
	assert.Equal(t, "ok", ready.Checks["broker"])
	assert.Equal(t, "ok", ready.Checks["router"])

	code, body = get(t, base+"/metrics")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `eventpipe_messages_handled_total{handler="demo-greet",queue="demo.greetings"}`)
	assert.Contains(t, body, `eventpipe_handler_duration_seconds_bucket{handler="demo-greeted",queue="demo.greeted"`)

	// The trace id of a greeting reaches the handler of the message it caused.
	traces := map[string][]string{}
	for _, line := range strings.Split(logs.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		if msg, _ := rec["msg"].(string); msg == "greeting handled" || msg == "greeted" {
			id, _ := rec["trace_id"].(string)
			require.NotEmpty(t, id, "log line without trace id: %s", line)
			require.NotEmpty(t, rec["message_id"], "log line without message id: %s", line)
			traces[id] = append(traces[id], msg)
		}
	}
	linked := 0
	for _, msgs := range traces {
		if len(msgs) == 2 {
			linked++
		}
	}
	assert.Positive(t, linked, "no trace id seen on both a greeting and its answer")

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		require.FailNow(t, "Run did not return after cancel")
	}
	assert.Contains(t, logs.String(), "eventpipe stopped cleanly")
}

// /readyz fails, naming the check, when a dependency does not answer: here a
// database configured on a port where nothing listens.
func TestReadyzReportsUnreachableDatabase(t *testing.T) {
	t.Parallel()
	cfg := config.Defaults()
	cfg.Admin.Addr = "127.0.0.1:0"
	cfg.Postgres.DSN = "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Migrating at start needs the database: serve retries it until
	// serve.connect_timeout, then refuses to start.
	cfg.Serve.ConnectTimeout = 2 * time.Second
	_, err := app.New(ctx, cfg, slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, "migrate")

	// Without it, serve starts and reports the database not ready.
	cfg.Postgres.Migrate = false
	svc, err := app.New(ctx, cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()

	base := "http://" + svc.AdminAddr()
	require.Eventually(t, func() bool {
		code, _ := get(t, base+"/healthz")
		return code == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond)
	code, body := get(t, base+"/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, `"database"`)
	assert.Contains(t, body, `"broker":"ok"`)

	cancel()
	require.NoError(t, <-done)
}

// The broker switch: the same service, the same demo route, on every broker
// kind, chosen by configuration alone, against the real services.
func TestServiceDemoOnEveryBroker(t *testing.T) {
	cases := []struct {
		kind  string
		setup func(t *testing.T, cfg *config.Config)
	}{
		{config.KindRabbitMQ, func(t *testing.T, cfg *config.Config) {
			cfg.RabbitMQ.URL = testenv.RabbitMQURL(t)
		}},
		{config.KindSQS, func(t *testing.T, cfg *config.Config) {
			cfg.SQS.Endpoint = testenv.SQSEndpoint(t)
			cfg.SQS.Region = testenv.SQSRegion
			cfg.SQS.WaitTime = time.Second
			// Credentials come from the AWS default chain, as in production.
			t.Setenv("AWS_ACCESS_KEY_ID", "test")
			t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
		}},
		{config.KindPostgres, func(t *testing.T, cfg *config.Config) {
			cfg.Postgres.DSN = testenv.PostgresDSN(t)
		}},
	}
	for _, c := range cases {
		t.Run(c.kind, func(t *testing.T) {
			cfg := config.Defaults()
			cfg.Broker.Kind = c.kind
			cfg.Admin.Addr = "127.0.0.1:0"
			cfg.Demo.Enabled = true
			cfg.Demo.Interval = 100 * time.Millisecond
			cfg.Serve.ConnectTimeout = 30 * time.Second
			c.setup(t, &cfg)
			require.NoError(t, cfg.Validate())

			var logs syncBuffer
			logger := slog.New(slog.NewTextHandler(&logs, nil))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			svc, err := app.New(ctx, cfg, logger)
			require.NoError(t, err)
			done := make(chan error, 1)
			go func() { done <- svc.Run(ctx) }()

			if !assert.Eventually(t, func() bool { return strings.Contains(logs.String(), "msg=greeted") },
				60*time.Second, 50*time.Millisecond) {
				require.Failf(t, "no message flowed", "on %s; logs:\n%s", c.kind, logs.String())
			}
			code, body := get(t, "http://"+svc.AdminAddr()+"/readyz")
			assert.Equal(t, http.StatusOK, code, body)

			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(60 * time.Second):
				require.FailNow(t, "Run did not return after cancel")
			}
		})
	}
}

// An inbox.ttl shorter than a route's redelivery window is refused at start
// with the route and the numbers: a marker deleted before a message's last
// redelivery would let it take effect twice.
func TestInboxTTLMustOutliveRedelivery(t *testing.T) {
	t.Parallel()
	cfg := config.Defaults()
	cfg.Admin.Addr = ""
	cfg.Interviews.Enabled = true
	cfg.Interviews.SampleTraffic = true
	cfg.Interviews.APIAddr = "" // the default port would collide with other runs
	cfg.Inbox.TTL = time.Hour
	_, err := app.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	var be *spec.BuildError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, "interviews", be.Spec)
	assert.Contains(t, err.Error(), "route report-generate: inbox.ttl 1h0m0s does not outlive its redelivery window")

	cfg.Inbox.TTL = 24 * time.Hour
	svc, err := app.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err, "the default outlives every route's window")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, svc.Run(ctx))
}
