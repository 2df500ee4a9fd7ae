package auth_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/auth"
)

var (
	secret = []byte("auth-test-secret-of-at-least-32-bytes")
	now    = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
)

// sign signs claims with method and key, with kid in the header when set.
func sign(t *testing.T, method jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	require.NoError(t, err)
	return s
}

// valid is the claims of a token valid at now, with changes.
func valid(changes jwt.MapClaims) jwt.MapClaims {
	c := jwt.MapClaims{
		"sub":   "42",
		"roles": []string{"admin", "ops"},
		"iat":   now.Add(-time.Minute).Unix(),
		"nbf":   now.Add(-time.Minute).Unix(),
		"exp":   now.Add(15 * time.Minute).Unix(),
	}
	for k, v := range changes {
		if v == nil {
			delete(c, k)
			continue
		}
		c[k] = v
	}
	return c
}

func TestVerifyHS256(t *testing.T) {
	t.Parallel()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	plain, err := auth.New(auth.Config{Secret: secret, Leeway: 30 * time.Second, Now: func() time.Time { return now }})
	require.NoError(t, err)
	checked, err := auth.New(auth.Config{Secret: secret, Issuer: "https://core.example", Audience: "eventpipe-admin",
		Now: func() time.Time { return now }})
	require.NoError(t, err)
	hs := func(c jwt.MapClaims) string { return sign(t, jwt.SigningMethodHS256, secret, "", c) }

	for name, c := range map[string]struct {
		verifier *auth.Verifier
		token    string
		// reason is the TokenError's reason; "" for a valid token.
		reason string
	}{
		"valid":                  {plain, hs(valid(nil)), ""},
		"expired within leeway":  {plain, hs(valid(jwt.MapClaims{"exp": now.Add(-20 * time.Second).Unix()})), ""},
		"wrong secret":           {plain, sign(t, jwt.SigningMethodHS256, []byte("another-secret-of-at-least-32-bytes!"), "", valid(nil)), "token signature is invalid"},
		"expired":                {plain, hs(valid(jwt.MapClaims{"exp": now.Add(-time.Minute).Unix()})), "token is expired"},
		"nbf in the future":      {plain, hs(valid(jwt.MapClaims{"nbf": now.Add(time.Minute).Unix()})), "token is not valid yet"},
		"iat in the future":      {plain, hs(valid(jwt.MapClaims{"iat": now.Add(time.Minute).Unix()})), "token used before issued"},
		"no exp":                 {plain, hs(valid(jwt.MapClaims{"exp": nil})), "token has no exp"},
		"no sub":                 {plain, hs(valid(jwt.MapClaims{"sub": nil})), "token has no sub"},
		"roles not an array":     {plain, hs(valid(jwt.MapClaims{"roles": "admin"})), "token is malformed"},
		"not a JWT":              {plain, "not-a-jwt", "token is malformed"},
		"too long":               {plain, strings.Repeat("a", auth.MaxTokenLen+1), "token is too long"},
		"alg none":               {plain, sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "", valid(nil)), "token signature is invalid"},
		"RS256 to an HS256 key":  {plain, sign(t, jwt.SigningMethodRS256, rsaKey, "", valid(nil)), "token signature is invalid"},
		"HS512 with the secret":  {plain, sign(t, jwt.SigningMethodHS512, secret, "", valid(nil)), "token signature is invalid"},
		"iss and aud as checked": {checked, hs(valid(jwt.MapClaims{"iss": "https://core.example", "aud": []string{"other", "eventpipe-admin"}})), ""},
		"iss mismatch":           {checked, hs(valid(jwt.MapClaims{"iss": "https://evil.example", "aud": "eventpipe-admin"})), "token has invalid issuer"},
		"iss missing":            {checked, hs(valid(jwt.MapClaims{"aud": "eventpipe-admin"})), "token has no iss"},
		"aud mismatch":           {checked, hs(valid(jwt.MapClaims{"iss": "https://core.example", "aud": "eventpipe-console"})), "token has invalid audience"},
		"aud missing":            {checked, hs(valid(jwt.MapClaims{"iss": "https://core.example"})), "token has no aud"},
	} {
		p, err := c.verifier.Verify(c.token)
		if c.reason == "" {
			require.NoError(t, err, name)
			assert.Equal(t, "42", p.Subject, name)
			assert.True(t, p.HasRole(auth.AdminRole), name)
			assert.False(t, p.HasRole("root"), name)
			continue
		}
		var te *auth.TokenError
		require.ErrorAs(t, err, &te, name)
		assert.Equal(t, c.reason, te.Reason, name)
		assert.Equal(t, auth.Principal{}, p, name)
	}
}

func TestPrincipalUserID(t *testing.T) {
	t.Parallel()
	for sub, want := range map[string]int64{"42": 42, "9223372036854775807": 9223372036854775807, "0": 0, "-7": 0, "ada": 0, "4.2": 0, " 42": 0, "": 0} {
		id, err := auth.Principal{Subject: sub}.UserID()
		if want == 0 {
			assert.ErrorIs(t, err, auth.ErrSubjectNotUserID, sub)
			continue
		}
		require.NoError(t, err, sub)
		assert.Equal(t, want, id, sub)
	}
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	v, err := auth.New(auth.Config{Secret: secret})
	require.NoError(t, err)
	tok, err := auth.MintHS256(secret, auth.Claims{Subject: "7", Roles: []string{"admin"}, IssuedAt: time.Now(), TTL: time.Minute})
	require.NoError(t, err)
	for hdr, ok := range map[string]bool{"Bearer " + tok: true, "bearer " + tok: true, "": false, "Bearer ": false, "Basic " + tok: false, tok: false} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("Authorization", hdr)
		p, err := v.Authenticate(r)
		if ok {
			require.NoError(t, err, hdr)
			assert.Equal(t, "7", p.Subject, hdr)
			assert.Equal(t, []string{"admin"}, p.Roles, hdr)
			continue
		}
		assert.ErrorIs(t, err, auth.ErrNoToken, hdr)
	}
}

func TestMintHS256RoundTrip(t *testing.T) {
	t.Parallel()
	v, err := auth.New(auth.Config{Secret: secret, Issuer: "eventpipe", Audience: "eventpipe-admin", Now: func() time.Time { return now }})
	require.NoError(t, err)
	tok, err := auth.MintHS256(secret, auth.Claims{Subject: "42", Roles: []string{"admin"}, Issuer: "eventpipe", Audience: "eventpipe-admin", IssuedAt: now, TTL: 15 * time.Minute})
	require.NoError(t, err)
	p, err := v.Verify(tok)
	require.NoError(t, err)
	assert.Equal(t, auth.Principal{Subject: "42", Roles: []string{"admin"}, ExpiresAt: now.Add(15 * time.Minute)}, p)

	_, err = auth.MintHS256([]byte("short"), auth.Claims{Subject: "42", IssuedAt: now, TTL: time.Minute})
	require.Error(t, err)
	_, err = auth.MintHS256(secret, auth.Claims{IssuedAt: now, TTL: time.Minute})
	require.Error(t, err)
	_, err = auth.MintHS256(secret, auth.Claims{Subject: "42", IssuedAt: now})
	require.Error(t, err)
}

func TestNewRefusesAmbiguousOrWeakConfigs(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]auth.Config{
		"neither":        {},
		"both":           {Secret: secret, JWKSURL: "https://idp.example/jwks.json"},
		"short secret":   {Secret: []byte("too-short")},
		"not a URL":      {JWKSURL: "idp.example/jwks.json"},
		"not http(s)":    {JWKSURL: "file:///etc/jwks.json"},
		"negative skew":  {Secret: secret, Leeway: -time.Second},
		"negative fetch": {JWKSURL: "https://idp.example/jwks.json", JWKSRefresh: -time.Second},
	} {
		_, err := auth.New(c)
		assert.Error(t, err, name)
	}
}

// jwksServer serves a JSON Web Key Set that the test replaces (rotation)
// and counts the fetches.
type jwksServer struct {
	*httptest.Server
	mu      sync.Mutex
	body    []byte
	fetches atomic.Int32
	down    atomic.Bool
}

func newJWKSServer(t *testing.T) *jwksServer {
	t.Helper()
	s := &jwksServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.fetches.Add(1)
		if s.down.Load() {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(s.body)
	}))
	t.Cleanup(s.Close)
	return s
}

// serve makes the set hold keys (public keys of the private keys given,
// kid → key), each with its alg.
func (s *jwksServer) serve(t *testing.T, keys map[string]any) {
	t.Helper()
	var set jwkset.JWKSMarshal
	for kid, key := range keys {
		var pub any
		alg := jwkset.AlgRS256
		switch k := key.(type) {
		case *rsa.PrivateKey:
			pub = &k.PublicKey
		case *ecdsa.PrivateKey:
			pub, alg = &k.PublicKey, jwkset.AlgES256
		}
		jwk, err := jwkset.NewJWKFromKey(pub, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: kid, ALG: alg, USE: jwkset.UseSig}})
		require.NoError(t, err)
		set.Keys = append(set.Keys, jwk.Marshal())
	}
	body, err := json.Marshal(set)
	require.NoError(t, err)
	s.mu.Lock()
	s.body = body
	s.mu.Unlock()
}

func TestVerifyJWKS(t *testing.T) {
	t.Parallel()
	rsaA, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	rsaC, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	ecB, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	srv := newJWKSServer(t)
	srv.serve(t, map[string]any{"a": rsaA, "b": ecB})
	v, err := auth.New(auth.Config{JWKSURL: srv.URL + "/jwks.json", Issuer: "https://idp.example", Now: func() time.Time { return now }})
	require.NoError(t, err)
	t.Cleanup(v.Close)
	require.EqualValues(t, 1, srv.fetches.Load(), "fetched at start")
	claims := valid(jwt.MapClaims{"iss": "https://idp.example"})

	refused := func(token, reason, msg string) {
		t.Helper()
		_, err := v.Verify(token)
		var te *auth.TokenError
		require.ErrorAs(t, err, &te, msg)
		assert.Equal(t, reason, te.Reason, msg)
	}
	p, err := v.Verify(sign(t, jwt.SigningMethodRS256, rsaA, "a", claims))
	require.NoError(t, err, "RS256")
	assert.Equal(t, "42", p.Subject)
	_, err = v.Verify(sign(t, jwt.SigningMethodES256, ecB, "b", claims))
	require.NoError(t, err, "ES256")

	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: must(x509.MarshalPKIXPublicKey(&rsaA.PublicKey))})
	refused(sign(t, jwt.SigningMethodHS256, pubPEM, "a", claims), "token signature is invalid", "HS256 with the RSA public key as secret (alg confusion)")
	refused(sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "a", claims), "token signature is invalid", "alg none")
	refused(sign(t, jwt.SigningMethodRS256, rsaA, "b", claims), "token is unverifiable", "RS256 under the EC key's kid")
	refused(sign(t, jwt.SigningMethodRS256, rsaA, "a", valid(jwt.MapClaims{"iss": "https://evil.example"})), "token has invalid issuer", "iss checked")
	refused(sign(t, jwt.SigningMethodRS256, rsaA, "a", valid(jwt.MapClaims{"iss": "https://idp.example", "exp": now.Add(-time.Hour).Unix()})), "token is expired", "exp checked")
	require.EqualValues(t, 1, srv.fetches.Load(), "known keys need no fetch")

	// Rotation: the provider replaces a by c. A token signed by c names a
	// key id the verifier has not seen: it fetches the set again at once.
	srv.serve(t, map[string]any{"c": rsaC, "b": ecB})
	p, err = v.Verify(sign(t, jwt.SigningMethodRS256, rsaC, "c", claims))
	require.NoError(t, err, "the new key, fetched on first sight")
	assert.Equal(t, "42", p.Subject)
	require.EqualValues(t, 2, srv.fetches.Load())
	// The retired key is gone with that fetch, and a flood of unknown key
	// ids fetches nothing more within a minute: refused at once.
	start := time.Now()
	refused(sign(t, jwt.SigningMethodRS256, rsaA, "a", claims), "token is unverifiable", "the retired key")
	refused(sign(t, jwt.SigningMethodRS256, rsaA, "zz", claims), "token is unverifiable", "an unknown key id")
	assert.Less(t, time.Since(start), 2*time.Second, "no wait for the rate limit")
	assert.EqualValues(t, 2, srv.fetches.Load())
	_, err = v.Verify(sign(t, jwt.SigningMethodRS256, rsaC, "", claims))
	require.NoError(t, err, "a token without kid is tried against every key")
}

// A key set that is refreshed drops a revoked key without any token asking;
// a provider that is down at start does not stop the verifier from being
// built, and its keys are fetched with the first token that needs them.
func TestVerifyJWKSRefreshAndOutage(t *testing.T) {
	t.Parallel()
	rsaA, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	srv := newJWKSServer(t)
	srv.down.Store(true)
	srv.serve(t, map[string]any{"a": rsaA})
	v, err := auth.New(auth.Config{JWKSURL: srv.URL, JWKSRefresh: 50 * time.Millisecond, Now: func() time.Time { return now }})
	require.NoError(t, err, "the provider being down at start is not fatal")
	t.Cleanup(v.Close)
	tok := sign(t, jwt.SigningMethodRS256, rsaA, "a", valid(nil))
	srv.down.Store(false)
	_, err = v.Verify(tok)
	require.NoError(t, err, "fetched when a token named its key")

	srv.serve(t, map[string]any{})
	require.Eventually(t, func() bool {
		_, err := v.Verify(tok)
		return err != nil
	}, 5*time.Second, 20*time.Millisecond, "the periodic refresh drops the revoked key")

	v.Close()
	n := srv.fetches.Load()
	time.Sleep(200 * time.Millisecond)
	assert.LessOrEqual(t, srv.fetches.Load(), n+1, "Close stops the refreshes")
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(errors.Join(errors.New("test setup"), err))
	}
	return v
}

// VerifyWith hands a valid token's own claims to the caller; a payload whose
// own claims do not decode, or a token that is not valid, leaves them unset.
func TestVerifyWithExtraClaims(t *testing.T) {
	t.Parallel()
	v, err := auth.New(auth.Config{Secret: secret, Now: func() time.Time { return now }})
	require.NoError(t, err)
	type own struct {
		Sessions []int64 `json:"sessions"`
	}
	tok := sign(t, jwt.SigningMethodHS256, secret, "", valid(jwt.MapClaims{"sessions": []int64{7, 9}}))
	var got own
	p, err := v.VerifyWith(tok, &got)
	require.NoError(t, err)
	assert.Equal(t, "42", p.Subject)
	assert.Equal(t, []int64{7, 9}, got.Sessions)

	bad := sign(t, jwt.SigningMethodHS256, secret, "", valid(jwt.MapClaims{"sessions": "7"}))
	got = own{}
	_, err = v.VerifyWith(bad, &got)
	var te *auth.TokenError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, jwt.ErrTokenMalformed.Error(), te.Reason)

	other := sign(t, jwt.SigningMethodHS256, []byte("another-secret-of-at-least-32-bytes!!"), "", valid(jwt.MapClaims{"sessions": []int64{7}}))
	got = own{}
	_, err = v.VerifyWith(other, &got)
	require.ErrorAs(t, err, &te)
	assert.Nil(t, got.Sessions, "claims of a token with a bad signature are never handed out")
}

// SignHS256 signs any claims type; what it signs, a Verifier with the same
// secret accepts.
func TestSignHS256(t *testing.T) {
	t.Parallel()
	type own struct {
		jwt.RegisteredClaims
		Documents []int64 `json:"documents"`
	}
	c := own{RegisteredClaims: jwt.RegisteredClaims{Subject: "5", ExpiresAt: jwt.NewNumericDate(now.Add(time.Minute))}, Documents: []int64{3}}
	tok, err := auth.SignHS256(secret, c)
	require.NoError(t, err)
	v, err := auth.New(auth.Config{Secret: secret, Now: func() time.Time { return now }})
	require.NoError(t, err)
	var got own
	p, err := v.VerifyWith(tok, &got)
	require.NoError(t, err)
	assert.Equal(t, "5", p.Subject)
	assert.Equal(t, []int64{3}, got.Documents)
	_, err = auth.SignHS256([]byte("short"), c)
	require.ErrorContains(t, err, "at least 32")
}
