package cli_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/cli"
	"github.com/eventpipe/eventpipe/handlers/realtime"
)

func TestRealtimeToken(t *testing.T) {
	t.Parallel()
	secret := "a-test-secret-of-at-least-32-bytes-long"
	r := run(t, []string{"EVENTPIPE_REALTIME_TOKEN_SECRET=" + secret}, "realtime", "token", "--user", "1", "--session", "7", "--ttl", "1m")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	claims, err := realtime.HMACVerifier{Secret: []byte(secret)}.Verify(strings.TrimSpace(r.stdout))
	require.NoError(t, err)
	assert.Equal(t, int64(1), claims.UserID)
	assert.Equal(t, []int64{7}, claims.Sessions)
	assert.InDelta(t, time.Now().Add(time.Minute).Unix(), claims.Expires, 5)

	r = run(t, []string{"EVENTPIPE_REALTIME_TOKEN_SECRET=short"}, "realtime", "token", "--user", "1")
	assert.Equal(t, cli.ExitUsage, r.code)
	assert.Contains(t, r.stderr, "at least 32 bytes")
	r = run(t, nil, "realtime", "token")
	assert.Equal(t, cli.ExitUsage, r.code)
	assert.Contains(t, r.stderr, "--user")
}
