package app_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/config"
)

// serve starting while its database is unreachable (starting, restarting)
// retries, as it does for the broker, until serve.connect_timeout; a database
// that answers with a refusal of its own (no such database) ends the start at
// once, without retries.
func TestServeRetriesAnUnreachableDatabase(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := l.Addr().String()
	require.NoError(t, l.Close()) // nobody listens there now

	start := func(dsn string) (string, error) {
		cfg := config.Defaults()
		cfg.Admin.Addr = ""
		cfg.Postgres.DSN = dsn
		cfg.Serve.ConnectTimeout = 3 * time.Second
		var logs bytes.Buffer
		svc, err := app.New(context.Background(), cfg, slog.New(slog.NewTextHandler(&logs, nil)))
		if err == nil { // not expected: stop it at once
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_ = svc.Run(ctx)
		}
		return logs.String(), err
	}

	logs, err := start("postgres://postgres@" + closed + "/test?sslmode=disable&connect_timeout=1")
	require.Error(t, err)
	assert.GreaterOrEqual(t, strings.Count(logs, "database unreachable, retrying"), 2, logs)

	dsn := testenv.PostgresDSN(t)
	missing := strings.Replace(dsn, "/test?", "/no_such_database_eventpipe?", 1)
	require.NotEqual(t, dsn, missing, "the test database's DSN has the expected shape")
	logs, err = start(missing)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no_such_database_eventpipe")
	assert.NotContains(t, logs, "database unreachable", "a refusal is not retried")
}
