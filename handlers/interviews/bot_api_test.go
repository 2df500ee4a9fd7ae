package interviews_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/auth"
	"github.com/eventpipe/eventpipe/app/spec"
	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/config"
	"github.com/eventpipe/eventpipe/handlers/interviews"
)

// botPost POSTs body to the bot API's path with the headers (name, value
// pairs) and returns the status and the body.
func botPost(t *testing.T, base, path, body string, headers ...string) (int, string, http.Header) {
	t.Helper()
	return botDo(t, http.MethodPost, base+path, body, headers...)
}

func botDo(t *testing.T, method, url, body string, headers ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b), resp.Header
}

func completePath(id string) string { return "/interviews/" + id + "/bot/complete" }
func failPath(id string) string     { return "/interviews/" + id + "/bot/fail" }

type accepted struct {
	MessageID string `json:"messageId"`
	RequestID string `json:"requestId"`
}

func decodeAccepted(t *testing.T, body string) accepted {
	t.Helper()
	var a accepted
	require.NoError(t, json.Unmarshal([]byte(body), &a), body)
	require.NotEmpty(t, a.MessageID, body)
	return a
}

// The bot's callbacks over HTTP, on every broker: complete (with the
// caller's X-Request-Id) settles the interview and asks for its report; fail
// (no header: a request id is generated) releases the reservation; a
// completion with only organizationId takes the producer defaults. Each
// message arrives with the requestId and eventType attributes.
func testBotCallbacks(t *testing.T, b testbrokers.Kind) {
	f := newFlow(t, b, flowOptions{})
	ctx := context.Background()
	srv := httptest.NewServer((&interviews.BotAPI{Producer: f.producer}).Handler())
	t.Cleanup(srv.Close)

	done := f.interview(t, 15, 630)
	code, body, hdr := botPost(t, srv.URL, completePath(done),
		`{"organizationId":"`+f.org.ID+`","durationSeconds":630,"completedAt":"2026-11-30T12:00:00.000Z"}`,
		interviews.RequestIDHeader, "bot-req-1")
	require.Equal(t, http.StatusAccepted, code, body)
	completed := decodeAccepted(t, body)
	assert.Equal(t, "bot-req-1", completed.RequestID)
	assert.Equal(t, "bot-req-1", hdr.Get(interviews.RequestIDHeader))

	failed := f.interview(t, 15, 0)
	before := time.Now()
	code, body, _ = botPost(t, srv.URL, failPath(failed), `{"organizationId":"`+f.org.ID+`","failureReason":"bot crashed"}`)
	require.Equal(t, http.StatusAccepted, code, body)
	fail := decodeAccepted(t, body)
	assert.Regexp(t, `^[0-9a-f]{32}$`, fail.RequestID, "generated")

	defaults := f.interview(t, 5, 0)
	code, body, _ = botPost(t, srv.URL, completePath(defaults), `{"organizationId":"`+f.org.ID+`"}`, interviews.RequestIDHeader, "bot-req-3")
	require.Equal(t, http.StatusAccepted, code, body)
	byDefault := decodeAccepted(t, body)

	r := f.waitReport(t, done, interviews.ReportCompleted, 1)
	assert.Equal(t, interviews.RecommendHire, r.Content.Recommendation)
	iv, err := f.store.Interview(ctx, done)
	require.NoError(t, err)
	require.NotNil(t, iv.SettledAt)
	assert.Equal(t, int64(10), *iv.CreditsConsumed, "floor(630 / 60)")
	assert.True(t, time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).Add(60*24*time.Hour).Equal(*iv.RetentionExpiresAt))

	for _, id := range []string{failed, defaults} {
		testbrokers.Eventually(t, 2*b.Redelivery, "settled "+id, func() bool {
			iv, err := f.store.Interview(ctx, id)
			require.NoError(t, err)
			return iv.SettledAt != nil
		})
		iv, err := f.store.Interview(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, int64(0), *iv.CreditsConsumed, "failed, or durationSeconds defaulted to 0")
		retention := iv.RetentionExpiresAt.Add(-60 * 24 * time.Hour)
		assert.WithinRange(t, retention, before.Add(-time.Second), time.Now().Add(time.Second), "failedAt / completedAt defaulted to now")
	}
	org, err := f.store.Organization(ctx, f.org.ID)
	require.NoError(t, err)
	assert.Equal(t, int64(90), org.AvailableCredits, "10 consumed, the rest released")
	assert.Equal(t, int64(0), org.ReservedCredits)

	for _, c := range []struct {
		id, requestID, eventType string
	}{
		{completed.MessageID, "bot-req-1", interviews.EventInterviewCompleted},
		{fail.MessageID, fail.RequestID, interviews.EventInterviewFailed},
		{byDefault.MessageID, "bot-req-3", interviews.EventInterviewCompleted},
	} {
		md := f.completed.metadata(c.id)
		require.NotNil(t, md, "message %s delivered", c.id)
		assert.Equal(t, c.requestID, md.Get(interviews.RequestIDKey), c.eventType)
		assert.Equal(t, c.eventType, md.Get(interviews.EventTypeKey), c.requestID)
	}
	testbrokers.NoMessage(t, f.completedD, 100*time.Millisecond, "nothing dead-lettered")
}

// recorder is a publisher that keeps what it is given, or refuses it.
type recorder struct {
	mu   sync.Mutex
	msgs []*message.Message
	fail error
}

func (p *recorder) Publish(_ string, msgs ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail != nil {
		return p.fail
	}
	p.msgs = append(p.msgs, msgs...)
	return nil
}

func (p *recorder) Close() error { return nil }

func (p *recorder) published() []*message.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*message.Message(nil), p.msgs...)
}

var botNow = time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)

func botServer(t *testing.T, pub message.Publisher, a interviews.Authenticator) string {
	t.Helper()
	p := interviews.NewProducer(pub, slog.New(slog.DiscardHandler))
	p.Now = func() time.Time { return botNow }
	srv := httptest.NewServer((&interviews.BotAPI{Producer: p, Auth: a}).Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

const (
	botInterview = "65f1c2a9e4b0a1b2c3d4e5f6"
	botOrg       = "65f1c2a9e4b0a1b2c3d4e5f7"
)

// Every kind of bad input is refused with its status, an error naming what
// is wrong, and nothing published.
func TestBotAPIRefusesBadInput(t *testing.T) {
	t.Parallel()
	pub := &recorder{}
	base := botServer(t, pub, nil)
	org := `"organizationId":"` + botOrg + `"`
	cases := []struct {
		name, method, path, body string
		headers                  []string
		status                   int
		want                     string
	}{
		{"malformed JSON", "POST", completePath(botInterview), `{"organizationId":`, nil, 400, "body is not a JSON object"},
		{"not an object", "POST", completePath(botInterview), `[]`, nil, 400, "body is not a JSON object"},
		{"null", "POST", failPath(botInterview), `null`, nil, 400, "body is not a JSON object"},
		{"empty", "POST", completePath(botInterview), ``, nil, 400, "body is not a JSON object"},
		{"organizationId missing", "POST", completePath(botInterview), `{"durationSeconds":60}`, nil, 400, "organizationId is required"},
		{"organizationId a number", "POST", completePath(botInterview), `{"organizationId":7}`, nil, 400, "organizationId must be a string"},
		{"organizationId not an ObjectId", "POST", failPath(botInterview), `{"organizationId":"acme","failureReason":"x"}`, nil, 400, `organizationId "acme" is not an ObjectId`},
		{"durationSeconds a string", "POST", completePath(botInterview), `{` + org + `,"durationSeconds":"600"}`, nil, 400, "durationSeconds must be a number"},
		{"durationSeconds negative", "POST", completePath(botInterview), `{` + org + `,"durationSeconds":-60}`, nil, 400, "durationSeconds -60 is negative"},
		{"durationSeconds beyond a float", "POST", completePath(botInterview), `{` + org + `,"durationSeconds":1e400}`, nil, 400, "durationSeconds must be a number"},
		{"completedAt a number", "POST", completePath(botInterview), `{` + org + `,"completedAt":1764496800}`, nil, 400, "completedAt must be a string"},
		{"completedAt not ISO-8601", "POST", completePath(botInterview), `{` + org + `,"completedAt":"yesterday"}`, nil, 400, `completedAt "yesterday" is not an ISO-8601 datetime`},
		{"unknown field", "POST", completePath(botInterview), `{` + org + `,"interviewId":"` + botInterview + `"}`, nil, 400, `unknown field "interviewId"`},
		{"complete's field on fail", "POST", failPath(botInterview), `{` + org + `,"failureReason":"x","durationSeconds":3}`, nil, 400, `unknown field "durationSeconds"`},
		{"failureReason missing", "POST", failPath(botInterview), `{` + org + `}`, nil, 400, "failureReason is required"},
		{"failureReason empty", "POST", failPath(botInterview), `{` + org + `,"failureReason":""}`, nil, 400, "failureReason must not be empty"},
		{"failureReason null", "POST", failPath(botInterview), `{` + org + `,"failureReason":null}`, nil, 400, "failureReason must be a string"},
		{"failedAt not ISO-8601", "POST", failPath(botInterview), `{` + org + `,"failureReason":"x","failedAt":"2026-13-01"}`, nil, 400, `failedAt "2026-13-01" is not an ISO-8601 datetime`},
		{"oversize", "POST", failPath(botInterview), `{` + org + `,"failureReason":"` + strings.Repeat("x", 64<<10) + `"}`, nil, 413, "body too large: at most 65536 bytes"},
		{"X-Request-Id too long", "POST", completePath(botInterview), `{` + org + `}`, []string{interviews.RequestIDHeader, strings.Repeat("r", 129)}, 400, "X-Request-Id must be 1..128 printable ASCII characters"},
		{"X-Request-Id with a space", "POST", completePath(botInterview), `{` + org + `}`, []string{interviews.RequestIDHeader, "req 1"}, 400, "X-Request-Id must be"},
		{"interviewId not an ObjectId", "POST", completePath("interview-1"), `{` + org + `}`, nil, 404, `interviewId "interview-1" is not an ObjectId`},
		{"unknown route", "POST", "/interviews/" + botInterview + "/bot/finish", `{` + org + `}`, nil, 404, "not found: POST /interviews/{interviewId}/bot/complete"},
		{"GET", "GET", completePath(botInterview), ``, nil, 405, "use POST"},
	}
	for _, c := range cases {
		code, body, hdr := botDo(t, c.method, base+c.path, c.body, c.headers...)
		assert.Equal(t, c.status, code, "%s: %s", c.name, body)
		assert.Equal(t, "application/json", hdr.Get("Content-Type"), c.name)
		var env struct{ Error string }
		if assert.NoError(t, json.Unmarshal([]byte(body), &env), "%s: %s", c.name, body) {
			assert.Contains(t, env.Error, c.want, c.name)
		}
		if c.status == 405 {
			assert.Equal(t, http.MethodPost, hdr.Get("Allow"))
		}
	}
	assert.Empty(t, pub.published(), "nothing refused is published")
}

// The published messages are the spec's bodies with its defaults —
// completedAt / failedAt now, durationSeconds 0, null taken as absent — and
// the requestId and eventType attributes; an upper-case ObjectId in the path
// is the same interview in lower case.
func TestBotAPIPublishesTheSpecBodies(t *testing.T) {
	t.Parallel()
	pub := &recorder{}
	base := botServer(t, pub, nil)
	code, body, _ := botPost(t, base, completePath(strings.ToUpper(botInterview)),
		`{"organizationId":"`+botOrg+`","durationSeconds":null,"completedAt":null}`, interviews.RequestIDHeader, "req-7")
	require.Equal(t, http.StatusAccepted, code, body)
	code, body, _ = botPost(t, base, failPath(botInterview),
		`{"organizationId":"`+botOrg+`","failureReason":"candidate left","failedAt":"2026-11-30T10:00:00+02:00"}`, interviews.RequestIDHeader, "req-8")
	require.Equal(t, http.StatusAccepted, code, body)

	msgs := pub.published()
	require.Len(t, msgs, 2)
	assert.JSONEq(t, `{"interviewId":"`+botInterview+`","organizationId":"`+botOrg+`","completedAt":"2026-12-01T09:30:00.000Z","durationSeconds":0}`, string(msgs[0].Payload))
	assert.Equal(t, "req-7", msgs[0].Metadata.Get(interviews.RequestIDKey))
	assert.Equal(t, interviews.EventInterviewCompleted, msgs[0].Metadata.Get(interviews.EventTypeKey))
	assert.JSONEq(t, `{"type":"interview.failed","interviewId":"`+botInterview+`","organizationId":"`+botOrg+`","failureReason":"candidate left","failedAt":"2026-11-30T08:00:00.000Z"}`, string(msgs[1].Payload))
	assert.Equal(t, "req-8", msgs[1].Metadata.Get(interviews.RequestIDKey))
	assert.Equal(t, interviews.EventInterviewFailed, msgs[1].Metadata.Get(interviews.EventTypeKey))
	for _, m := range msgs {
		assert.NoError(t, interviews.ValidateInterviewEvent(m.Payload), "what `eventpipe publish` accepts")
	}
}

// A publish the broker refuses is a 503 the bot can retry, without the
// broker's error text.
func TestBotAPIPublishFailureIs503(t *testing.T) {
	t.Parallel()
	base := botServer(t, &recorder{fail: errors.New("amqp: connection closed by 10.0.0.7")}, nil)
	code, body, _ := botPost(t, base, completePath(botInterview), `{"organizationId":"`+botOrg+`"}`)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.JSONEq(t, `{"error":"not published, send it again"}`, body)
}

const botSecret = "bot-api-test-secret-of-at-least-32-bytes"

func botToken(t *testing.T, roles ...string) string {
	t.Helper()
	tok, err := auth.MintHS256([]byte(botSecret), auth.Claims{Subject: "bot-1", Roles: roles, IssuedAt: time.Now(), TTL: time.Minute})
	require.NoError(t, err)
	return "Bearer " + tok
}

// With a verifier, a call needs a valid token whose roles hold
// interview-bot or admin.
func TestBotAPIWithTokens(t *testing.T) {
	t.Parallel()
	v, err := auth.New(auth.Config{Secret: []byte(botSecret)})
	require.NoError(t, err)
	pub := &recorder{}
	base := botServer(t, pub, v)
	body := `{"organizationId":"` + botOrg + `"}`

	code, resp, hdr := botPost(t, base, completePath(botInterview), body)
	assert.Equal(t, http.StatusUnauthorized, code, resp)
	assert.NotEmpty(t, hdr.Get("WWW-Authenticate"))
	code, resp, _ = botPost(t, base, completePath(botInterview), body, "Authorization", "Bearer not-a-jwt")
	assert.Equal(t, http.StatusUnauthorized, code, resp)
	code, resp, _ = botPost(t, base, completePath(botInterview), body, "Authorization", botToken(t, "viewer"))
	assert.Equal(t, http.StatusForbidden, code, resp)
	assert.Contains(t, resp, "the interview-bot or admin role is required")
	assert.Empty(t, pub.published(), "nothing published without the role")

	code, resp, _ = botPost(t, base, completePath(botInterview), body, "Authorization", botToken(t, interviews.BotRole))
	assert.Equal(t, http.StatusAccepted, code, resp)
	code, resp, _ = botPost(t, base, failPath(botInterview), `{"organizationId":"`+botOrg+`","failureReason":"x"}`, "Authorization", botToken(t, auth.AdminRole))
	assert.Equal(t, http.StatusAccepted, code, resp)
	assert.Len(t, pub.published(), 2)
}

// The module serves the API on interviews.api_addr, as an intake server,
// token-protected exactly when the service verifies tokens; "" turns it off.
func TestModuleServesTheBotAPI(t *testing.T) {
	t.Parallel()
	build := func(addr string, v *auth.Verifier) spec.Parts {
		cfg := config.Defaults()
		cfg.Interviews.Enabled, cfg.Interviews.SampleTraffic, cfg.Interviews.APIAddr = true, true, addr
		parts, err := interviews.Module.Build(context.Background(), spec.Deps{
			Config: cfg, Publisher: &recorder{}, Verifier: v, Logger: slog.New(slog.DiscardHandler), Getenv: func(string) string { return "" },
		})
		require.NoError(t, err)
		return parts
	}
	assert.Empty(t, build("", nil).Servers, "off")

	post := func(parts spec.Parts) int {
		require.Len(t, parts.Servers, 1)
		s := parts.Servers[0]
		assert.Equal(t, interviews.APIServer, s.Name)
		assert.Equal(t, "127.0.0.1:0", s.Addr)
		assert.True(t, s.Intake, "closed first when serve drains")
		rec := httptest.NewRecorder()
		s.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, completePath(botInterview), strings.NewReader(`{"organizationId":"`+botOrg+`"}`)))
		return rec.Code
	}
	assert.Equal(t, http.StatusAccepted, post(build("127.0.0.1:0", nil)), "open without a verifier")
	v, err := auth.New(auth.Config{Secret: []byte(botSecret)})
	require.NoError(t, err)
	assert.Equal(t, http.StatusUnauthorized, post(build("127.0.0.1:0", v)), "a token needed with one")
	assert.Equal(t, "127.0.0.1:8083", config.Defaults().Interviews.APIAddr)
}
