package realtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/handlers/realtime"
	stackuprt "github.com/eventpipe/eventpipe/handlers/stackup/realtime"
)

// downBus is a bus whose publishes fail.
type downBus struct{}

func (downBus) Publish(context.Context, realtime.Event) error { return errors.New("bus down") }
func (downBus) Subscribe(ctx context.Context) (<-chan realtime.Event, error) {
	return make(chan realtime.Event), nil
}

func newServer(t *testing.T, cfg realtime.Config) (*realtime.Server, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Verifier = realtime.HMACVerifier{Secret: testSecret}
	cfg.Registerer = reg
	cfg.Logger = testLogger
	s, err := realtime.New(cfg)
	require.NoError(t, err)
	require.NoError(t, s.Start(t.Context()))
	t.Cleanup(func() { _ = s.Close() })
	return s, reg
}

// §5.12-1..3: a volatile event whose fan-out fails is a warning, not a
// failure; any other event's failure is retried (then dead-lettered).
func TestVolatileFanoutFailureOnlyWarns(t *testing.T) {
	t.Parallel()
	s, reg := newServer(t, realtime.Config{Bus: downBus{}})
	for _, typ := range realtime.VolatileTypes {
		err := s.Sink().Deliver(t.Context(), stackuprt.Event{Channel: "session", ID: 1, EventType: typ, Data: json.RawMessage(`{}`), MessageID: "m-" + typ})
		assert.NoError(t, err, typ)
	}
	err := s.Sink().Deliver(t.Context(), stackuprt.Event{Channel: "session", ID: 1, EventType: "SESSION_MESSAGE", Data: json.RawMessage(`{}`), MessageID: "m-durable"})
	require.Error(t, err)
	assert.Equal(t, failure.Transient, failure.Of(err), "retried by the route")
	assert.Equal(t, float64(len(realtime.VolatileTypes)), counter(t, reg, "eventpipe_realtime_fanout_failures_total", map[string]string{"volatile": "true"}))
	assert.Equal(t, 1.0, counter(t, reg, "eventpipe_realtime_fanout_failures_total", map[string]string{"volatile": "false"}))
}

func TestRelayRejectsWhatWouldBreakTheStream(t *testing.T) {
	t.Parallel()
	s, reg := newServer(t, realtime.Config{MaxDataBytes: 16})
	cases := map[string]stackuprt.Event{
		"unknown_channel": {Channel: "team", ID: 1, EventType: "X", MessageID: "m1"},
		"bad_channel_id":  {Channel: "user", ID: 0, EventType: "X", MessageID: "m2"},
		"bad_id":          {Channel: "user", ID: 1, EventType: "X", MessageID: "m3\nevent: forged"},
		"bad_event_type":  {Channel: "user", ID: 1, EventType: "X\r\ndata: forged", MessageID: "m4"},
		"oversized_data":  {Channel: "user", ID: 1, EventType: "X", MessageID: "m5", Data: json.RawMessage(`"` + strings.Repeat("x", 20) + `"`)},
	}
	for reason, e := range cases {
		err := s.Sink().Deliver(t.Context(), e)
		var rej *realtime.RejectError
		require.ErrorAs(t, err, &rej, reason)
		assert.Equal(t, reason, rej.Reason)
		assert.Equal(t, failure.Permanent, failure.Of(err), "dead-lettered at once")
		assert.Equal(t, 1.0, counter(t, reg, "eventpipe_realtime_events_rejected_total", map[string]string{"reason": reason}), reason)
	}
}

// A redelivered notification (same messageId) is not sent twice.
func TestDuplicateIsSentOnce(t *testing.T) {
	t.Parallel()
	s, reg := newServer(t, realtime.Config{})
	hs := httpServer(t, s)
	tok := token(t, realtime.Claims{UserID: 9, Sessions: []int64{9}})
	cl := open(t, hs, path("sessions", 9), tok, "")
	for _, id := range []string{"a", "a", "b"} {
		require.NoError(t, s.Sink().Deliver(t.Context(), stackuprt.Event{Channel: "session", ID: 9, EventType: "SESSION_MESSAGE", MessageID: id, Data: json.RawMessage(`{"x": 1}`)}))
	}
	got := cl.waitEvents(2)
	assert.Equal(t, []string{"a", "b"}, []string{got[0].ID, got[1].ID})
	assert.Equal(t, `{"x":1}`, got[0].Data, "compact JSON on one data line")
	assert.Equal(t, 1.0, counter(t, reg, "eventpipe_realtime_duplicates_total", nil))
}

// Heartbeats are comment lines; the stream ends when the token expires.
func TestHeartbeatAndTokenExpiry(t *testing.T) {
	t.Parallel()
	s, _ := newServer(t, realtime.Config{Heartbeat: 50 * time.Millisecond})
	hs := httpServer(t, s)
	tok := token(t, realtime.Claims{UserID: 3, Expires: time.Now().Add(2 * time.Second).Unix()})
	cl := open(t, hs, path("users", 3), tok, "")
	cl.waitEnded()
	_, comments := cl.snapshot()
	assert.Contains(t, comments, "heartbeat")
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	_, err := realtime.New(realtime.Config{ClientBuffer: -1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "verifier")
	assert.Contains(t, err.Error(), "client buffer")
}

func TestTokens(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	v := realtime.HMACVerifier{Secret: testSecret, Now: func() time.Time { return now }}
	c := realtime.Claims{UserID: 5, Sessions: []int64{7}, Documents: []int64{8}, Expires: now.Add(time.Minute).Unix()}
	tok, err := realtime.MintToken(testSecret, c)
	require.NoError(t, err)
	got, err := v.Verify(tok)
	require.NoError(t, err)
	assert.Equal(t, c, got)
	assert.True(t, got.Allows(realtime.Channel{Kind: realtime.User, ID: 5}))
	assert.True(t, got.Allows(realtime.Channel{Kind: realtime.Session, ID: 7}))
	assert.True(t, got.Allows(realtime.Channel{Kind: realtime.Document, ID: 8}))
	assert.False(t, got.Allows(realtime.Channel{Kind: realtime.User, ID: 7}))
	assert.False(t, got.Allows(realtime.Channel{Kind: realtime.Session, ID: 5}))

	later := realtime.HMACVerifier{Secret: testSecret, Now: func() time.Time { return now.Add(time.Minute) }}
	_, err = later.Verify(tok)
	require.ErrorIs(t, err, realtime.ErrInvalidToken, "expired at exp")

	_, err = realtime.MintToken([]byte("short"), c)
	require.Error(t, err)
	_, err = realtime.HMACVerifier{Secret: []byte("short")}.Verify(tok)
	require.ErrorIs(t, err, realtime.ErrInvalidToken, "a verifier without a usable secret accepts nothing")
	// One token, one spelling: the last signature character differing only
	// in its two padding bits is refused too.
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, tok[len(tok)-1])
	sameBits := alphabet[last^1]
	for _, bad := range []string{"", ".", "a.b", "a.b.c", tok + "x", "x" + tok, tok[:len(tok)-1] + string(sameBits)} {
		_, err := v.Verify(bad)
		require.ErrorIs(t, err, realtime.ErrInvalidToken, bad)
	}
}

// The tokens are standard JWTs: what a Core mints with its own JWT library
// (here golang-jwt, as a Spring Core would with jjwt) is accepted, MintToken's
// tokens carry exactly the documented claims, and the algorithm is pinned.
func TestTokensAreJWTs(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	v := realtime.HMACVerifier{Secret: testSecret, Now: func() time.Time { return now }}
	mint := func(method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(method, claims).SignedString(key)
		require.NoError(t, err)
		return s
	}
	exp := now.Add(time.Minute).Unix()
	foreign := mint(jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "12", "sessions": []int64{3, 4}, "documents": []int64{5}, "exp": exp, "iat": now.Unix()})
	got, err := v.Verify(foreign)
	require.NoError(t, err)
	assert.Equal(t, realtime.Claims{UserID: 12, Sessions: []int64{3, 4}, Documents: []int64{5}, Expires: exp}, got)

	tok, err := realtime.MintToken(testSecret, realtime.Claims{UserID: 12, Sessions: []int64{3}, Expires: exp})
	require.NoError(t, err)
	parsed, err := jwt.Parse(tok, func(*jwt.Token) (any, error) { return testSecret, nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithTimeFunc(func() time.Time { return now }))
	require.NoError(t, err, "a standard JWT library verifies MintToken's tokens")
	assert.Equal(t, "JWT", parsed.Header["typ"])
	assert.Equal(t, jwt.MapClaims{"sub": "12", "sessions": []any{3.0}, "exp": float64(exp)}, parsed.Claims)

	for name, bad := range map[string]string{
		"alg none":         mint(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, jwt.MapClaims{"sub": "12", "exp": exp}),
		"HS384":            mint(jwt.SigningMethodHS384, testSecret, jwt.MapClaims{"sub": "12", "exp": exp}),
		"no exp":           mint(jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "12"}),
		"numeric sub":      mint(jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": 12, "exp": exp}),
		"sub not a number": mint(jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "ada", "exp": exp}),
		"sub zero":         mint(jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "0", "exp": exp}),
		"no sub":           mint(jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"exp": exp}),
		"sessions strings": mint(jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "12", "sessions": []string{"3"}, "exp": exp}),
		"not yet valid":    mint(jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "12", "nbf": now.Add(time.Minute).Unix(), "exp": exp}),
	} {
		_, err := v.Verify(bad)
		require.ErrorIs(t, err, realtime.ErrInvalidToken, name)
	}
}

func FuzzVerify(f *testing.F) {
	tok, _ := realtime.MintToken(testSecret, realtime.Claims{UserID: 1, Expires: 1 << 40})
	f.Add(tok)
	f.Add("e30.AAAA")
	v := realtime.HMACVerifier{Secret: testSecret}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := v.Verify(s)
		if err == nil {
			require.Positive(t, c.UserID, "accepted a token without a subject: %q", s)
		}
	})
}

// The window is bounded in events and bytes; a resume from an id that fell
// out of it is a miss.
func TestWindowBounds(t *testing.T) {
	t.Parallel()
	s, reg := newServer(t, realtime.Config{WindowSize: 3, WindowBytes: 1 << 20})
	hs := httpServer(t, s)
	tok := token(t, realtime.Claims{UserID: 4, Sessions: []int64{4}})
	for _, id := range []string{"e1", "e2", "e3", "e4"} {
		require.NoError(t, s.Sink().Deliver(t.Context(), stackuprt.Event{Channel: "session", ID: 4, EventType: "SESSION_MESSAGE", MessageID: id, Data: json.RawMessage(`{}`)}))
	}
	got := open(t, hs, path("sessions", 4), tok, "e2").waitEvents(2)
	assert.Equal(t, []string{"e3", "e4"}, []string{got[0].ID, got[1].ID})
	miss := open(t, hs, path("sessions", 4), tok, "e1")
	require.NoError(t, s.Sink().Deliver(t.Context(), stackuprt.Event{Channel: "session", ID: 4, EventType: "SESSION_MESSAGE", MessageID: "e5", Data: json.RawMessage(`{}`)}))
	got = miss.waitEvents(1)
	assert.Equal(t, "e5", got[0].ID, "after a miss, live events only")
	assert.Equal(t, 1.0, counter(t, reg, "eventpipe_realtime_resumes_total", map[string]string{"result": "miss"}))

	small, _ := newServer(t, realtime.Config{WindowBytes: 10})
	hs = httpServer(t, small)
	for _, id := range []string{"b1", "b2", "b3"} {
		require.NoError(t, small.Sink().Deliver(t.Context(), stackuprt.Event{Channel: "session", ID: 4, EventType: "SESSION_MESSAGE", MessageID: id, Data: json.RawMessage(`"12"`)}))
	}
	require.NoError(t, small.Sink().Deliver(t.Context(), stackuprt.Event{Channel: "session", ID: 4, EventType: "FENCE", MessageID: "f", Data: json.RawMessage(`1`)}))
	got = open(t, hs, path("sessions", 4), tok, "b2").waitEvents(2)
	assert.Equal(t, []string{"b3", "f"}, []string{got[0].ID, got[1].ID}, "4-byte events, 10-byte cap: b2 is still in the window")
	open(t, hs, path("sessions", 4), tok, "b1").waitComment("resume-miss")
}

func TestCORS(t *testing.T) {
	t.Parallel()
	s, _ := newServer(t, realtime.Config{AllowedOrigins: []string{"https://app.example"}})
	hs := httpServer(t, s)
	for origin, want := range map[string]string{"https://app.example": "https://app.example", "https://evil.example": ""} {
		req, err := http.NewRequest(http.MethodOptions, hs+path("sessions", 1), nil)
		require.NoError(t, err)
		req.Header.Set("Origin", origin)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		assert.Equal(t, want, resp.Header.Get("Access-Control-Allow-Origin"), origin)

		req, err = http.NewRequest(http.MethodGet, hs+path("sessions", 1), nil)
		require.NoError(t, err)
		req.Header.Set("Origin", origin)
		resp, err = http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		assert.Equal(t, want, resp.Header.Get("Access-Control-Allow-Origin"), "on errors too: %s", origin)
	}
}
