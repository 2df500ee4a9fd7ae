package app_test

import (
	"bufio"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/config"
	"github.com/eventpipe/eventpipe/handlers/realtime"
)

// serve with the StackUp realtime role: the SSE server refuses a stream
// without a token and streams the sample round trip's document events to a
// token holder.
func TestServeRealtimeStreams(t *testing.T) {
	const secret = "serve-test-secret-at-least-32-bytes!"
	t.Setenv("EVENTPIPE_TEST_RT_SECRET", secret)
	cfg := config.Defaults()
	cfg.Admin.Addr = ""
	cfg.StackUp.Enabled = true
	cfg.StackUp.Processors = "sample"
	cfg.StackUp.SampleInterval = 200 * time.Millisecond
	cfg.Realtime.Addr = "127.0.0.1:0"
	cfg.Realtime.TokenSecretEnv = "EVENTPIPE_TEST_RT_SECRET"

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	svc, err := app.New(ctx, cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	require.Eventually(t, func() bool { return svc.ServerAddr("realtime") != "" }, 10*time.Second, 10*time.Millisecond)
	base := "http://" + svc.ServerAddr("realtime")

	resp, err := http.Get(base + "/realtime/users/1")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	token, err := realtime.MintToken([]byte(secret), realtime.Claims{UserID: 1, Expires: time.Now().Add(time.Minute).Unix()})
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/realtime/users/1", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/event-stream", strings.Split(resp.Header.Get("Content-Type"), ";")[0])

	// The sample traffic analyses documents of user 1: each analysis's
	// progress, then its DOC_STATE, reach the user's channel (read from the
	// first DOC_STATE to the next: the stream may open mid-analysis).
	lines := bufio.NewScanner(resp.Body)
	deadline := time.AfterFunc(20*time.Second, func() { _ = resp.Body.Close() })
	defer deadline.Stop()
	var events []string
	docStates := 0
	for lines.Scan() && docStates < 2 {
		e, ok := strings.CutPrefix(lines.Text(), "event: ")
		switch {
		case !ok:
		case e == "DOC_STATE":
			docStates++
			events = append(events, e)
		case e == "ANALYSIS_PROGRESS" && docStates == 1:
			events = append(events, e)
		}
	}
	assert.Equal(t, []string{"DOC_STATE", "ANALYSIS_PROGRESS", "ANALYSIS_PROGRESS", "ANALYSIS_PROGRESS", "DOC_STATE"}, events)

	cancel()
	require.NoError(t, <-done)
}
