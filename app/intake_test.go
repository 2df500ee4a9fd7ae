package app_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/spec"
	"github.com/eventpipe/eventpipe/config"
)

// send makes one request and returns the status and body.
func send(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// The drain stops the specs' intake servers (spec.Server.Intake) first —
// while a handler is still in flight — and their other servers only after
// the router drained.
func TestDrainStopsIntakeServersFirst(t *testing.T) {
	t.Parallel()
	cfg := config.Defaults()
	cfg.Admin.Addr = ""
	cfg.Serve.ShutdownTimeout = 20 * time.Second
	queue := "intake-drain-" + strings.ToLower(watermill.NewShortUUID())
	started, release := make(chan struct{}, 1), make(chan struct{})
	var intakeDown, streamDown atomic.Bool
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mod := spec.Module{
		Name:    "intake-test",
		Enabled: func(config.Config) bool { return true },
		Catalog: func() route.Set { return nil },
		Build: func(context.Context, spec.Deps) (spec.Parts, error) {
			return spec.Parts{
				Routes: route.Set{{Name: "intake-work", Queue: queue,
					Policy: route.Policy{MaxAttempts: 1, Redelivery: route.InProcess, OnPermanent: route.Drop,
						Backoff: route.Backoff{Initial: 100 * time.Millisecond, Multiplier: 2, Max: time.Second}},
					Handle: func(*message.Message) error {
						started <- struct{}{}
						<-release
						return nil
					}}},
				Servers: []spec.Server{
					{Name: "intake", Addr: "127.0.0.1:0", Handler: ok, Intake: true, BeforeShutdown: func() { intakeDown.Store(true) }},
					{Name: "stream", Addr: "127.0.0.1:0", Handler: ok, BeforeShutdown: func() { streamDown.Store(true) }},
				},
			}, nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	svc, err := app.NewWithModules(ctx, cfg, slog.New(slog.DiscardHandler), []spec.Module{mod})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	intake, stream := "http://"+svc.ServerAddr("intake"), "http://"+svc.ServerAddr("stream")
	require.Eventually(t, func() bool {
		r, err := http.Get(intake)
		if err == nil {
			_ = r.Body.Close()
		}
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, svc.Publisher().Publish(queue, message.NewMessage(watermill.NewUUID(), []byte(`{}`))))
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the handler never started")
	}

	cancel()
	require.Eventually(t, intakeDown.Load, 5*time.Second, 10*time.Millisecond, "the intake server is shut down while the handler runs")
	require.Eventually(t, func() bool {
		r, err := http.Get(intake)
		if err == nil {
			_ = r.Body.Close()
		}
		return err != nil
	}, 5*time.Second, 10*time.Millisecond, "the intake server refuses connections")
	code, _ := send(t, http.MethodGet, stream, "")
	assert.Equal(t, http.StatusNoContent, code, "the other server still serves during the drain")
	assert.False(t, streamDown.Load())

	close(release)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		require.FailNow(t, "Run did not return after the drain")
	}
	assert.True(t, streamDown.Load())
}
