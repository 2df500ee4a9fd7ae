package internalapi_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/app/spec"
	"github.com/eventpipe/eventpipe/config"
	"github.com/eventpipe/eventpipe/handlers/stackup/internalapi"
)

func envOf(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

var testKeyB64 = base64.StdEncoding.EncodeToString(testSealKey)

func TestServers(t *testing.T) {
	t.Parallel()
	cfg := config.Defaults()
	deps := func(vars map[string]string) spec.Deps { return spec.Deps{Config: cfg, Getenv: envOf(vars)} }

	servers, err := internalapi.Servers(deps(nil))
	require.NoError(t, err)
	assert.Empty(t, servers, "off while the key variable is unset")

	_, err = internalapi.Servers(deps(map[string]string{"EVENTPIPE_STACKUP_INTERNAL_API_KEY": "short"}))
	require.ErrorContains(t, err, "EVENTPIPE_STACKUP_INTERNAL_API_KEY")

	_, err = internalapi.Servers(deps(map[string]string{"EVENTPIPE_STACKUP_INTERNAL_API_KEY": testKey, "EVENTPIPE_STACKUP_TOKEN_KEY": "dG9vIHNob3J0"}))
	require.ErrorContains(t, err, "EVENTPIPE_STACKUP_TOKEN_KEY: token key: 9 bytes, want 32", "a malformed token key stops serve")

	servers, err = internalapi.Servers(deps(map[string]string{"EVENTPIPE_STACKUP_INTERNAL_API_KEY": testKey, "EVENTPIPE_STACKUP_TOKEN_KEY": testKeyB64}))
	require.NoError(t, err)
	require.Len(t, servers, 1)
	assert.Equal(t, "127.0.0.1:8081", servers[0].Addr)
	srv := httptest.NewServer(servers[0].Handler)
	defer srv.Close()
	status, _ := call(t, "GET", srv.URL+"/api/internal/users/1/github-token", "", nil)
	assert.Equal(t, http.StatusUnauthorized, status)
	status, _ = call(t, "GET", srv.URL+"/api/internal/users/1/github-token", testKey, nil)
	assert.Equal(t, http.StatusNotFound, status, "the memory store, tokens on")

	// With a database, the Postgres store: what one server stored, another
	// on the same schema finds.
	pool, schema := dbtest.Schema(t)
	withDB := cfg
	withDB.Postgres.Schema = schema
	withDB.StackUp.EmbeddingDimension = 3
	clients := make([]*internalapi.Client, 2)
	for i := range clients {
		servers, err := internalapi.Servers(spec.Deps{Config: withDB, DB: pool, Getenv: envOf(map[string]string{"EVENTPIPE_STACKUP_INTERNAL_API_KEY": testKey})})
		require.NoError(t, err)
		require.Len(t, servers, 1)
		srv := httptest.NewServer(servers[0].Handler)
		defer srv.Close()
		clients[i] = &internalapi.Client{BaseURL: srv.URL, APIKey: testKey}
	}
	_, err = clients[0].PutEmbeddings(context.Background(), 7, 1, []internalapi.Chunk{chunk(0, "kafka", 1, 0, 0)})
	require.NoError(t, err)
	hits, err := clients[1].Search(context.Background(), internalapi.SearchRequest{UserID: 7, QueryEmbedding: []float32{1, 0, 0}})
	require.NoError(t, err)
	assert.Len(t, hits, 1)

	off := cfg
	off.StackUp.InternalAddr = ""
	servers, err = internalapi.Servers(spec.Deps{Config: off, Getenv: envOf(map[string]string{"EVENTPIPE_STACKUP_INTERNAL_API_KEY": testKey})})
	require.NoError(t, err)
	assert.Empty(t, servers, "off without an address")
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	key, err := internalapi.ParseKey(testKeyB64 + "\n")
	require.NoError(t, err)
	assert.Equal(t, testSealKey, key)
	key, err = internalapi.ParseKey(strings.TrimRight(testKeyB64, "="))
	require.NoError(t, err, "unpadded")
	assert.Equal(t, testSealKey, key)
	_, err = internalapi.ParseKey("not base64!")
	assert.ErrorContains(t, err, "not base64")
	_, err = internalapi.ParseKey(base64.StdEncoding.EncodeToString(make([]byte, 16)))
	assert.ErrorContains(t, err, "16 bytes, want 32")
}

func TestSealer(t *testing.T) {
	t.Parallel()
	s := testSealer(t)
	a, err := s.Seal(7, "ghp_abc")
	require.NoError(t, err)
	b, err := s.Seal(7, "ghp_abc")
	require.NoError(t, err)
	assert.NotEqual(t, a, b, "a fresh nonce every time")
	got, err := s.Open(7, a)
	require.NoError(t, err)
	assert.Equal(t, "ghp_abc", got)
	_, err = s.Open(8, a)
	require.Error(t, err, "bound to the user")
	tampered := bytes.Clone(a)
	tampered[len(tampered)-1] ^= 1
	_, err = s.Open(7, tampered)
	require.Error(t, err)
	_, err = s.Open(7, a[:5])
	require.Error(t, err, "too short")
	_, err = internalapi.NewSealer(make([]byte, 16))
	require.Error(t, err)
}

func TestFuse(t *testing.T) {
	t.Parallel()
	h := func(doc int64) internalapi.Hit { return internalapi.Hit{DocumentID: doc, Text: "t"} }
	got := internalapi.Fuse(10, []internalapi.Hit{h(1), h(2), h(3)}, []internalapi.Hit{h(3), h(4)})
	require.Len(t, got, 4)
	assert.Equal(t, []int64{3, 1, 2, 4}, []int64{got[0].DocumentID, got[1].DocumentID, got[2].DocumentID, got[3].DocumentID})
	assert.InDelta(t, 1.0/63+1.0/61, got[0].Score, 1e-15)
	assert.InDelta(t, 1.0/61, got[1].Score, 1e-15)
	// 2 and 4 both at rank 2 of one list: a tie, broken by document id.
	assert.Equal(t, got[2].Score, got[3].Score)
	assert.Len(t, internalapi.Fuse(2, []internalapi.Hit{h(1), h(2), h(3)}), 2)
	assert.Empty(t, internalapi.Fuse(5))
}

// `eventpipe stackup github-token set` stores the token from stdin,
// encrypted, where the API lends it.
func TestGitHubTokenSetCommand(t *testing.T) {
	t.Parallel()
	pool, schema := dbtest.Schema(t)
	vars := map[string]string{"EVENTPIPE_STACKUP_TOKEN_KEY": testKeyB64}
	env := spec.CommandEnv{
		Load:   func() (config.Config, error) { return config.Defaults(), nil },
		Getenv: envOf(vars),
		WithDB: func(ctx context.Context, f func(ctx context.Context, pool *pgxpool.Pool, schema string) error) error {
			return f(ctx, pool, schema)
		},
	}
	run := func(stdin string, args ...string) (string, error) {
		cmds := internalapi.Commands(env)
		require.Len(t, cmds, 1)
		var out bytes.Buffer
		cmds[0].SetArgs(args)
		cmds[0].SetIn(strings.NewReader(stdin))
		cmds[0].SetOut(&out)
		cmds[0].SetErr(&out)
		err := cmds[0].ExecuteContext(context.Background())
		return out.String(), err
	}
	out, err := run("ghp_fromstdin\n", "github-token", "set", "--user", "7", "--token-stdin", "--expires-in", "2h")
	require.NoError(t, err)
	assert.Contains(t, out, "stored the GitHub token of user 7 until ")
	assert.NotContains(t, out, "ghp_fromstdin", "never printed")

	store, err := internalapi.NewPostgres(pool, schema)
	require.NoError(t, err)
	api, err := internalapi.New(internalapi.Config{Store: store, Sealer: testSealer(t), Dimension: 3})
	require.NoError(t, err)
	tok, err := api.GitHubToken(context.Background(), 7)
	require.NoError(t, err)
	assert.Equal(t, "ghp_fromstdin", tok.Token)
	assert.WithinDuration(t, time.Now().Add(2*time.Hour), tok.ExpiresAt, time.Minute)

	var ue spec.UsageError
	for _, c := range []struct {
		stdin string
		args  []string
		want  string
	}{
		{"t\n", []string{"github-token", "set", "--token-stdin"}, "--user is required"},
		{"t\n", []string{"github-token", "set", "--user", "7"}, "--token-stdin is required"},
		{"", []string{"github-token", "set", "--user", "7", "--token-stdin"}, "no token on standard input"},
		{"t\n", []string{"github-token", "set", "--user", "7", "--token-stdin", "--expires-in", "0s"}, "--expires-in must be more than 0s"},
	} {
		_, err := run(c.stdin, c.args...)
		require.ErrorAs(t, err, &ue, c.want)
		assert.ErrorContains(t, err, c.want)
	}
	delete(vars, "EVENTPIPE_STACKUP_TOKEN_KEY")
	_, err = run("t\n", "github-token", "set", "--user", "7", "--token-stdin")
	require.ErrorAs(t, err, &ue)
	assert.ErrorContains(t, err, "$EVENTPIPE_STACKUP_TOKEN_KEY must hold the token key")
}
