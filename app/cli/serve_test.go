package cli_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/cli"
	"github.com/eventpipe/eventpipe/config"
)

// `serve --help` lists every key serve reads, with its variable and default.
func TestServeHelpListsEveryKeyAndVariable(t *testing.T) {
	t.Parallel()
	r := run(t, nil, "serve", "--help")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	for _, v := range config.EnvVars() {
		assert.Contains(t, r.stdout, v.Path, "key")
		assert.Contains(t, r.stdout, v.Name, "variable of %s", v.Path)
		if v.Alias != "" {
			assert.Contains(t, r.stdout, v.Alias, "alias of %s", v.Path)
		}
	}
	assert.Contains(t, r.stdout, "EVENTPIPE_REALTIME_TOKEN_SECRET,", "the secrets the *_env keys name")
	assert.Contains(t, r.stdout, "OTEL_TRACES_EXPORTER", "the OpenTelemetry variables")
}

// serveFor runs serve with environ until it has run for d, and returns its
// exit code and standard error.
func serveFor(t *testing.T, d time.Duration, environ []string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out, errOut bytes.Buffer
	code := cli.Run(ctx, []string{"serve"}, strings.NewReader(""), &out, &errOut, environ)
	return code, errOut.String()
}

// serve with nothing enabled runs (the admin endpoints alone are a valid
// deployment) but warns, naming the variables that enable a route.
func TestServeWarnsWhenNoRouteIsEnabled(t *testing.T) {
	t.Parallel()
	code, stderr := serveFor(t, 500*time.Millisecond, []string{"EVENTPIPE_ADMIN_ADDR=127.0.0.1:0"})
	assert.Equal(t, cli.ExitOK, code, stderr)
	assert.Contains(t, stderr, "no route is enabled")
	for _, v := range []string{"EVENTPIPE_DEMO_ENABLED=true", "EVENTPIPE_INTERVIEWS_ENABLED=true", "EVENTPIPE_STACKUP_ENABLED=true",
		"EVENTPIPE_DISPUTES_ENABLED=true", "EVENTPIPE_BOOKING_ENABLED=true", "EVENTPIPE_JOINLINK_ENABLED=true"} {
		assert.Contains(t, stderr, v)
	}
	assert.Contains(t, stderr, "config/examples/rabbitmq.yaml")

	code, stderr = serveFor(t, 500*time.Millisecond, []string{"EVENTPIPE_ADMIN_ADDR=127.0.0.1:0", "EVENTPIPE_DEMO_ENABLED=true"})
	assert.Equal(t, cli.ExitOK, code, stderr)
	assert.NotContains(t, stderr, "no route is enabled")
}
