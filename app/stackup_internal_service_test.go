package app_test

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/config"
	"github.com/eventpipe/eventpipe/handlers/stackup/internalapi"
)

// serve with the StackUp core role and the internal API's key set serves
// §10 on stackup.internal_addr: 401 without the key, the API with it.
func TestServeStackUpInternalAPI(t *testing.T) {
	const key = "serve-test-internal-api-key"
	t.Setenv("EVENTPIPE_TEST_INTERNAL_KEY", key)
	cfg := config.Defaults()
	cfg.Admin.Addr = ""
	cfg.StackUp.Enabled = true
	cfg.StackUp.Processors = "sample"
	cfg.StackUp.Roles = "core,ai-worker"
	cfg.StackUp.InternalAddr = "127.0.0.1:0"
	cfg.StackUp.InternalAPIKeyEnv = "EVENTPIPE_TEST_INTERNAL_KEY"
	cfg.StackUp.EmbeddingDimension = 2

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	svc, err := app.New(ctx, cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	require.Eventually(t, func() bool { return svc.ServerAddr("stackup internal API") != "" }, 10*time.Second, 10*time.Millisecond)
	base := "http://" + svc.ServerAddr("stackup internal API")

	resp, err := http.Get(base + "/api/internal/users/1/github-token")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	c := &internalapi.Client{BaseURL: base, APIKey: key}
	n, err := c.PutEmbeddings(ctx, 7, 1, []internalapi.Chunk{{Index: 0, Text: "kafka", Embedding: []float32{1, 0}}})
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	hits, err := c.Search(ctx, internalapi.SearchRequest{UserID: 7, QueryEmbedding: []float32{1, 0}, QueryText: "kafka"})
	require.NoError(t, err)
	require.Len(t, hits, 1)
	_, err = c.GitHubToken(ctx, 7)
	var apiErr *internalapi.APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusServiceUnavailable, apiErr.Status, "no token key configured")

	cancel()
	require.NoError(t, <-done)
}
