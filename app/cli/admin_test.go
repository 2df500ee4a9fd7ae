package cli_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/auth"
	"github.com/eventpipe/eventpipe/app/cli"
)

const cliAdminSecret = "cli-admin-test-secret-of-32-bytes!!"

// `admin token` signs with the secret serve verifies with, carrying the
// configured issuer and audience, so its token passes serve's checks.
func TestAdminToken(t *testing.T) {
	t.Parallel()
	env := []string{"EVENTPIPE_ADMIN_TOKEN_SECRET=" + cliAdminSecret,
		"EVENTPIPE_ADMIN_TOKEN_ISSUER=https://core.example", "EVENTPIPE_ADMIN_TOKEN_AUDIENCE=eventpipe-admin"}
	r := run(t, env, "admin", "token", "--sub", "42", "--role", "admin", "--role", "ops", "--ttl", "5m")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	v, err := auth.New(auth.Config{Secret: []byte(cliAdminSecret), Issuer: "https://core.example", Audience: "eventpipe-admin"})
	require.NoError(t, err)
	p, err := v.Verify(strings.TrimSpace(r.stdout))
	require.NoError(t, err)
	assert.Equal(t, "42", p.Subject)
	assert.Equal(t, []string{"admin", "ops"}, p.Roles)
	assert.WithinDuration(t, time.Now().Add(5*time.Minute), p.ExpiresAt, 5*time.Second)

	for name, c := range map[string]struct {
		env  []string
		args []string
		want string
	}{
		"no --sub":           {env, []string{"admin", "token", "--role", "admin"}, "--sub is required"},
		"no --ttl":           {env, []string{"admin", "token", "--sub", "42", "--ttl", "0s"}, "--ttl must be more than 0s"},
		"no secret":          {nil, []string{"admin", "token", "--sub", "42"}, "$EVENTPIPE_ADMIN_TOKEN_SECRET must hold the HS256 secret"},
		"short secret":       {[]string{"EVENTPIPE_ADMIN_TOKEN_SECRET=short"}, []string{"admin", "token", "--sub", "42"}, "at least 32 bytes"},
		"key set, not HS256": {append(env, "EVENTPIPE_ADMIN_TOKEN_JWKS_URL=https://idp.example/jwks.json"), []string{"admin", "token", "--sub", "42"}, "admin.token_jwks_url is set"},
		"unknown subcommand": {env, []string{"admin", "frobnicate"}, `unknown subcommand "frobnicate"`},
		"no subcommand":      {env, []string{"admin"}, "a subcommand is required: token"},
	} {
		r := run(t, c.env, c.args...)
		assert.Equal(t, cli.ExitUsage, r.code, name)
		assert.Contains(t, r.stderr, c.want, name)
		assert.Empty(t, r.stdout, name)
		assert.NotContains(t, r.stderr, cliAdminSecret, name)
	}
}
