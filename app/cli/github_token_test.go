package cli_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/cli"
	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/handlers/stackup/internalapi"
)

// `eventpipe stackup github-token set --token-stdin` reads the token from the
// standard input cli.Run is given (not the process's).
func TestGitHubTokenSetReadsGivenStdin(t *testing.T) {
	t.Parallel()
	pool, schema := dbtest.Schema(t)
	key := bytes.Repeat([]byte{3}, internalapi.KeyLen)
	environ := []string{"EVENTPIPE_POSTGRES_DSN=" + testenv.PostgresDSN(t), "EVENTPIPE_POSTGRES_SCHEMA=" + schema,
		"EVENTPIPE_STACKUP_TOKEN_KEY=" + base64.StdEncoding.EncodeToString(key)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	code := cli.Run(ctx, []string{"stackup", "github-token", "set", "--user", "7", "--token-stdin"},
		strings.NewReader("ghp_viastdin\n"), &out, &errOut, environ)
	require.Equal(t, cli.ExitOK, code, errOut.String())
	assert.Contains(t, out.String(), "stored the GitHub token of user 7")

	store, err := internalapi.NewPostgres(pool, schema)
	require.NoError(t, err)
	sealer, err := internalapi.NewSealer(key)
	require.NoError(t, err)
	api, err := internalapi.New(internalapi.Config{Store: store, Sealer: sealer, Dimension: 1536})
	require.NoError(t, err)
	tok, err := api.GitHubToken(ctx, 7)
	require.NoError(t, err)
	assert.Equal(t, "ghp_viastdin", tok.Token)

	r := run(t, environ, "stackup", "github-token", "set", "--user", "7")
	assert.Equal(t, cli.ExitUsage, r.code, "no --token-stdin")
}
