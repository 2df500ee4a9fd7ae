package app_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/config"
)

const adminTestSecret = "app-admin-test-secret-of-32-bytes!!"

// The admin section decides how admin JWTs are verified: a secret or a key
// set, never both, never a short secret; neither leaves the verifier off.
func TestNewVerifierFromTheAdminSection(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.DiscardHandler)
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }
	cfg := config.Defaults()

	v, err := app.NewVerifier(cfg, env(nil), logger)
	require.NoError(t, err)
	assert.Nil(t, v, "no secret, no key set: off")

	v, err = app.NewVerifier(cfg, env(map[string]string{"EVENTPIPE_ADMIN_TOKEN_SECRET": adminTestSecret}), logger)
	require.NoError(t, err)
	require.NotNil(t, v)
	v.Close()

	var ve *config.ValidationError
	_, err = app.NewVerifier(cfg, env(map[string]string{"EVENTPIPE_ADMIN_TOKEN_SECRET": "short"}), logger)
	require.ErrorAs(t, err, &ve)
	assert.Equal(t, "admin.token_secret_env", ve.Problems[0].Path)
	assert.Contains(t, ve.Problems[0].Message, "at least 32")
	assert.NotContains(t, err.Error(), "short", "the secret is never repeated")

	both := cfg
	both.Admin.TokenJWKSURL = "https://idp.example/jwks.json"
	_, err = app.NewVerifier(both, env(map[string]string{"EVENTPIPE_ADMIN_TOKEN_SECRET": adminTestSecret}), logger)
	require.ErrorAs(t, err, &ve)
	assert.Equal(t, "admin.token_jwks_url", ve.Problems[0].Path)
	assert.NotContains(t, err.Error(), adminTestSecret)

	off := cfg
	off.Admin.TokenSecretEnv = ""
	v, err = app.NewVerifier(off, env(map[string]string{"EVENTPIPE_ADMIN_TOKEN_SECRET": adminTestSecret}), logger)
	require.NoError(t, err)
	assert.Nil(t, v, "token_secret_env empty: no secret is read")
}

// Through serve's admin server: /healthz, /readyz and /metrics are open;
// the join-link admin API takes an RS256 JWT from the configured key set
// with the admin role — none, another algorithm or another role is refused
// before the session is even looked up.
func TestAdminServerVerifiesJWTs(t *testing.T) {
	t.Parallel()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	jwk, err := jwkset.NewJWKFromKey(&key.PublicKey, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: "k1", ALG: jwkset.AlgRS256}})
	require.NoError(t, err)
	set, err := json.Marshal(jwkset.JWKSMarshal{Keys: []jwkset.JWKMarshal{jwk.Marshal()}})
	require.NoError(t, err)
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(set) }))
	t.Cleanup(idp.Close)

	cfg := config.Defaults()
	cfg.Admin.Addr = "127.0.0.1:0"
	cfg.Admin.TokenSecretEnv = "EVENTPIPE_TEST_UNSET_ADMIN_SECRET"
	cfg.Admin.TokenJWKSURL = idp.URL
	cfg.Admin.TokenIssuer = "https://idp.example"
	cfg.JoinLink.Enabled = true
	cfg.JoinLink.BulkRegisterURL = "http://127.0.0.1:1/bulk-register" // never called: nothing is generated
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	svc, err := app.New(ctx, cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	base := "http://" + svc.AdminAddr()
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			_ = resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond)
	for _, open := range []string{"/healthz", "/metrics"} {
		code, _ := get(t, base+open)
		assert.Equal(t, http.StatusOK, code, open)
	}

	rs := func(roles ...string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"sub": "7", "roles": roles, "iss": "https://idp.example",
			"exp": time.Now().Add(time.Minute).Unix()})
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(key)
		require.NoError(t, err)
		return s
	}
	hs, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "7", "roles": []string{"admin"}, "iss": "https://idp.example",
		"exp": time.Now().Add(time.Minute).Unix()}).SignedString([]byte(adminTestSecret))
	require.NoError(t, err)
	patch := func(token string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPatch, base+"/program-session/999/link-generation", strings.NewReader(`{"linkGenerationAt":null}`))
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		req.Header.Set("X-User-Id", "7")
		req.Header.Set("X-Active-Role", "admin")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var e struct {
			Error struct{ Code, Message string }
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
		return resp.StatusCode, e.Error.Code + ": " + e.Error.Message
	}
	for name, c := range map[string]struct {
		token string
		code  int
	}{
		"headers only":                 {"", http.StatusUnauthorized},
		"HS256 next to a JWKS":         {hs, http.StatusUnauthorized},
		"RS256 without admin":          {rs("learner"), http.StatusForbidden},
		"RS256 admin, no such session": {rs("admin"), http.StatusNotFound},
	} {
		code, msg := patch(c.token)
		assert.Equal(t, c.code, code, "%s: %s", name, msg)
	}

	cancel()
	select {
	case err := <-done:
		require.True(t, err == nil || errors.Is(err, context.Canceled), "%v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
}
