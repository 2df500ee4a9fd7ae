package cli_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/cli"
)

// healthcheck probes admin.addr's /healthz (a wildcard host on 127.0.0.1):
// 0 on 200, 1 on anything else or no answer.
func TestHealthcheck(t *testing.T) {
	t.Parallel()
	var (
		mu     sync.Mutex
		paths  []string
		status = http.StatusOK
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		paths = append(paths, r.URL.Path)
		w.WriteHeader(status)
	}))
	defer srv.Close()
	_, port, err := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	require.NoError(t, err)

	r := run(t, []string{"EVENTPIPE_ADMIN_ADDR=0.0.0.0:" + port}, "healthcheck")
	assert.Equal(t, cli.ExitOK, r.code, r.stderr)
	mu.Lock()
	assert.Equal(t, []string{"/healthz"}, paths)
	status = http.StatusServiceUnavailable
	mu.Unlock()
	r = run(t, []string{"EVENTPIPE_ADMIN_ADDR=127.0.0.1:" + port}, "healthcheck")
	assert.Equal(t, cli.ExitFailure, r.code)
	assert.Contains(t, r.stderr, "503")

	srv.Close()
	r = run(t, nil, "healthcheck", "--url", srv.URL+"/healthz")
	assert.Equal(t, cli.ExitFailure, r.code, "nothing listens")
}
