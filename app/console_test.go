package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/app/auth"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/config"
)

const consoleSecret = "console-test-secret-of-at-least-32-bytes"

// chromium is the browser the console test drives: EVENTPIPE_CHROMIUM or
// /usr/bin/chromium (.ci/chromium installs it). Missing, it fails the test
// under CI and skips it, saying why, on a developer machine.
func chromium(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("EVENTPIPE_CHROMIUM")
	if bin == "" {
		bin = "/usr/bin/chromium"
	}
	if _, err := exec.LookPath(bin); err != nil {
		if ci := os.Getenv("CI"); ci == "true" || ci == "1" {
			require.Failf(t, "chromium is missing", "%v: CI must provide it; run .ci/chromium", err)
		}
		t.Skipf("chromium is missing (%v): skipped on this developer machine (under CI it fails)", err)
	}
	return bin
}

// consoleService runs serve with StackUp on the PostgreSQL broker and admin
// JWTs, and puts three dead letters of ai.analyze.resume in its DLQ: two
// alike (a missing messageId) and one other.
func consoleService(t *testing.T) (base string, ps message.Publisher, letters []*message.Message) {
	base, ps, letters, _ = consoleServiceLogged(t, slog.New(slog.DiscardHandler))
	return base, ps, letters
}

// consoleServiceLogged is consoleService logging to logger; stop shuts the
// service down and returns what Run returned (the cleanup does too, if stop
// was not called).
func consoleServiceLogged(t *testing.T, logger *slog.Logger) (base string, ps message.Publisher, letters []*message.Message, stop func() error) {
	t.Setenv("EVENTPIPE_TEST_CONSOLE_SECRET", consoleSecret)
	cfg := config.Defaults()
	cfg.Broker.Kind = config.KindPostgres
	cfg.Postgres.DSN = testenv.PostgresDSN(t)
	cfg.Postgres.Schema = testbrokers.Scope(t, "postgres")
	cfg.Admin.Addr = "127.0.0.1:0"
	cfg.Admin.TokenSecretEnv = "EVENTPIPE_TEST_CONSOLE_SECRET"
	cfg.StackUp.Enabled = true
	cfg.StackUp.Roles = "core,ai-worker"
	cfg.StackUp.Processors = "sample"
	cfg.Serve.ConnectTimeout = 30 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := app.New(ctx, cfg, logger)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	stop = sync.OnceValue(func() error { cancel(); return <-done })
	t.Cleanup(func() { require.NoError(t, stop()) })

	b, err := app.NewBroker(ctx, cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	at := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	letters = []*message.Message{
		deadLetter("ai.analyze.resume", "envelope: messageId is required (message 41)", "permanent", at),
		deadLetter("ai.analyze.resume", "envelope: messageId is required (message 42)", "permanent", at.Add(time.Minute)),
		deadLetter("ai.analyze.resume", "llm: timeout after 30s", "transient", at.Add(2*time.Minute)),
	}
	require.NoError(t, b.Publish("dlq.ai.analyze.resume", letters...))
	return "http://" + svc.AdminAddr(), b, letters, stop
}

func token(t *testing.T, roles ...string) string {
	tok, err := auth.MintHS256([]byte(consoleSecret), auth.Claims{Subject: "ops-7", Roles: roles, IssuedAt: time.Now(), TTL: 10 * time.Minute})
	require.NoError(t, err)
	return tok
}

// The console's doors: a page without a token goes to the login page, a
// token without the admin role is refused, a POST from another origin is
// refused even with a good token, and an unknown queue is not acted on.
func TestConsoleAuthAndCSRF(t *testing.T) {
	base, _, letters := consoleService(t)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path, tok, origin string, form url.Values) int {
		req, err := http.NewRequest(method, base+path, strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := noRedirect.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusSeeOther, do("GET", "/console/", "", "", nil), "to the login page")
	assert.Equal(t, http.StatusForbidden, do("GET", "/console/", token(t, "learner"), "", nil))
	assert.Equal(t, http.StatusOK, do("GET", "/console/", token(t, "admin"), "", nil))
	discard := url.Values{"queue": {"dlq.ai.analyze.resume"}, "id": {letters[2].UUID}, "mode": {"discard"}, "confirm": {"yes"}}
	assert.Equal(t, http.StatusForbidden, do("POST", "/console/redrive", token(t, "admin"), "https://evil.example", discard), "cross-origin")
	other := url.Values{"queue": {"ai.analyze.resume"}, "id": {letters[2].UUID}, "mode": {"discard"}, "confirm": {"yes"}}
	assert.Equal(t, http.StatusBadRequest, do("POST", "/console/redrive", token(t, "admin"), base, other), "not a DLQ")
	assert.Equal(t, http.StatusOK, do("POST", "/console/redrive", token(t, "admin"), base,
		url.Values{"queue": {"dlq.ai.analyze.resume"}, "id": {letters[2].UUID}, "mode": {"discard"}}), "a confirmation page, nothing done")
	code, body := get(t, base+"/console/dlq?queue=dlq.ai.analyze.resume")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "Paste an admin JWT", "a browser lands on the login page")
}

// The console in headless Chromium: sign in with a JWT, see the DLQ depth
// arrive in the live queue table, the groups, a message's history and body;
// an edit the route's validation refuses sends nothing; a discard and a
// group redrive take a confirmation; a dry run changes nothing.
func TestConsoleInChromium(t *testing.T) {
	bin := chromium(t)
	base, ps, letters := consoleService(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(bin), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-dev-shm-usage", true),
	)
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()
	wait := chromedp.WithPollingTimeout(30 * time.Second)
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(browser, chromedp.Text(chromedp.CSS(sel)))
		require.NoError(t, err, sel)
		return s
	}

	require.NoError(t, chromedp.Do(browser,
		chromedp.Navigate(base+"/console/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SetValue(chromedp.CSS("#token"), token(t, "admin")),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#queues")),
		// Counted at most every 5 s; the table refreshes itself.
		chromedp.Poll[chromedp.Void](`(() => { const r = document.querySelector('#queues tr[data-queue="ai.analyze.resume"]');
			return r && r.children[5].textContent.trim() === "3" })()`, wait),
	), "signed in, the queue table shows the DLQ depth: %s", func() string {
		html, _ := chromedp.Run(browser, chromedp.Evaluate[string](`document.body.innerText`))
		return html
	}())
	assert.Contains(t, text("header"), "ops-7", "the principal is shown")

	require.NoError(t, chromedp.Do(browser,
		chromedp.Navigate(base+"/console/dlq?queue=dlq.ai.analyze.resume"),
		chromedp.WaitVisible(chromedp.CSS("#groups")),
	))
	groups, err := chromedp.Run(browser, chromedp.Evaluate[[][]string](
		`[...document.querySelectorAll("#groups tbody tr")].map(tr => [...tr.children].slice(0, 3).map(td => td.textContent.trim()))`))
	require.NoError(t, err)
	assert.Equal(t, [][]string{
		{"envelope: messageId is required (message <n>)", "permanent", "2"},
		{"llm: timeout after <n>s", "transient", "1"},
	}, groups)
	shot, err := chromedp.Run(browser, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(t.TempDir(), "console.png"), shot, 0o600))
	if os.Getenv("EVENTPIPE_UPDATE_SCREENSHOTS") == "1" {
		require.NoError(t, os.WriteFile(filepath.Join("..", "docs", "console.png"), shot, 0o644))
	}

	timeout := letters[2].UUID
	require.NoError(t, chromedp.Do(browser,
		chromedp.Navigate(base+"/console/message?queue=dlq.ai.analyze.resume&id="+timeout),
		chromedp.WaitVisible(chromedp.CSS("#history")),
	))
	assert.Contains(t, text("#history"), "llm: timeout after 30s")
	assert.Contains(t, text("#body"), `"reason"`)
	assert.Contains(t, text("#headers"), metadata.TraceIDKey)

	require.NoError(t, chromedp.Do(browser,
		chromedp.SetValue(chromedp.CSS("#edit-body"), `{"messageId":""}`),
		chromedp.Click(chromedp.CSS("#edit-send")),
		chromedp.WaitVisible(chromedp.CSS("#error")),
	))
	assert.Contains(t, text("#error"), "refused by ai.analyze.resume's validation, nothing sent")

	require.NoError(t, chromedp.Do(browser,
		chromedp.Navigate(base+"/console/message?queue=dlq.ai.analyze.resume&id="+timeout),
		chromedp.Click(chromedp.CSS("#discard-one")),
		chromedp.WaitVisible(chromedp.CSS("#confirm")),
	))
	assert.Contains(t, text("#confirm"), "deleted, with no copy")
	require.NoError(t, chromedp.Do(browser,
		chromedp.Click(chromedp.CSS("#confirm-yes")),
		chromedp.WaitVisible(chromedp.CSS("#result")),
	))
	assert.Contains(t, text("#result"), timeout+" (discarded)")

	require.NoError(t, chromedp.Do(browser,
		chromedp.Navigate(base+"/console/dlq?queue=dlq.ai.analyze.resume"),
		chromedp.Click(chromedp.CSS("#groups .dryrun")),
		chromedp.WaitVisible(chromedp.CSS("#result")),
	))
	assert.Contains(t, text("#result"), "2 dead letter(s) would be redriven; nothing changed.")
	require.NoError(t, chromedp.Do(browser,
		chromedp.Navigate(base+"/console/dlq?queue=dlq.ai.analyze.resume"),
		chromedp.Poll[chromedp.Void](`document.querySelectorAll("#letters tbody tr").length === 2`, wait),
		chromedp.Click(chromedp.CSS("#groups .redrive-group")),
		chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.Click(chromedp.CSS("#confirm-yes")),
		chromedp.WaitVisible(chromedp.CSS("#result")),
	))
	result := text("#result")
	for _, m := range letters[:2] {
		assert.Contains(t, result, fmt.Sprintf("%s → ai.analyze.resume", m.UUID))
	}

	// A group of 150 discarded at 40 a second: the job's page shows the
	// count grow while it runs, then the result.
	const n = 150
	publishGroup(t, ps, n)
	require.NoError(t, chromedp.Do(browser,
		chromedp.Navigate(base+"/console/dlq?queue=dlq.ai.analyze.resume"),
		chromedp.Poll[chromedp.Void](`[...document.querySelectorAll("#groups tbody tr")].some(tr => tr.children[0].textContent === "cache: key <n> evicted")`, wait),
		chromedp.Evaluate[chromedp.Void](`(() => { const tr = [...document.querySelectorAll("#groups tbody tr")].find(tr => tr.children[0].textContent === "cache: key <n> evicted");
			tr.querySelector(".rate").value = "40"; tr.querySelector(".discard-group").click() })()`),
		chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.Click(chromedp.CSS("#confirm-yes")),
		chromedp.WaitVisible(chromedp.CSS("#progress")),
	))
	assert.Contains(t, text("h1"), "discard")
	// Read as the page shows it, refreshed by its own script.
	var moving []int
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := chromedp.Run(browser, chromedp.Evaluate[struct{ Done, Total, State string }](`({Done: document.getElementById("done").textContent,
			Total: document.getElementById("total").textContent, State: document.getElementById("state").textContent})`))
		require.NoError(t, err)
		if st.State != "running" {
			break
		}
		if d, err := strconv.Atoi(st.Done); err == nil && d > 0 && d < n {
			assert.Equal(t, strconv.Itoa(n), st.Total)
			if len(moving) == 0 || moving[len(moving)-1] != d {
				moving = append(moving, d)
			}
		}
		require.True(t, time.Now().Before(deadline), "the job did not end: %+v", st)
		time.Sleep(150 * time.Millisecond)
	}
	assert.GreaterOrEqual(t, len(moving), 2, "the page showed the count grow: %v", moving)
	require.NoError(t, chromedp.Do(browser, chromedp.WaitVisible(chromedp.CSS("#result"))))
	assert.Contains(t, text("#summary"), fmt.Sprintf("%d dead letter(s): discard done", n))
	assert.Equal(t, "done", text("#state"))
	assert.Equal(t, strconv.Itoa(n), text("#done"))
}

// On the memory broker the console says why it cannot work.
func TestConsoleOnMemorySaysWhyNot(t *testing.T) {
	t.Parallel()
	cfg := config.Defaults()
	cfg.Admin.Addr = "127.0.0.1:0"
	cfg.Admin.TokenSecretEnv = ""
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	svc, err := app.New(ctx, cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	require.Eventually(t, func() bool { return svc.AdminAddr() != "" }, 10*time.Second, 10*time.Millisecond)
	var code int
	var body string
	require.Eventually(t, func() bool {
		code, body = get(t, "http://"+svc.AdminAddr()+"/console/")
		return code != 0
	}, 10*time.Second, 50*time.Millisecond)
	assert.Equal(t, http.StatusNotImplemented, code)
	assert.Contains(t, body, "cannot count or show them without taking them", "open on loopback without a verifier")
	cancel()
	require.NoError(t, <-done)
}

// consoleDo sends one request to the console as an admin from its own
// origin and returns the status and body.
func consoleDo(t *testing.T, base, method, path string, form url.Values) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+token(t, "admin"))
	req.Header.Set("Origin", base)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// The console's "Retry one first" and edit and redrive against the running
// StackUp worker: a canary of a group whose bodies the route still refuses
// comes back to the DLQ, so the rest stay; an edited body the route accepts
// is redriven and handled, and does not come back; following its trace id
// finds it in the DLQ before and in the inbox after.
func TestConsoleCanaryEditAndTraceFollow(t *testing.T) {
	base, _, letters := consoleService(t)
	const dlq = "dlq.ai.analyze.resume"
	dlqIDs := func() []string {
		t.Helper()
		code, body := consoleDo(t, base, http.MethodGet, "/console/dlq?queue="+dlq, nil)
		require.Equal(t, http.StatusOK, code, body)
		var in []string
		for _, l := range letters {
			if strings.Contains(body, l.UUID) {
				in = append(in, l.UUID)
			}
		}
		return in
	}
	require.Eventually(t, func() bool { return len(dlqIDs()) == 3 }, 30*time.Second, 200*time.Millisecond)

	// Follow the trace of the timeout letter while it is dead.
	timeout := letters[2]
	traceID := timeout.Metadata.Get(metadata.TraceIDKey)
	code, body := consoleDo(t, base, http.MethodGet, "/console/trace?id="+url.QueryEscape(traceID), nil)
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, "dead-letter queue "+dlq)
	assert.Contains(t, body, timeout.UUID)
	assert.Contains(t, body, "dead-lettered: llm: timeout after 30s")

	// The canary: the group's bodies still lack a messageId, the worker
	// dead-letters the first one again at once, the second stays.
	canary := consoleJobEnd(t, base, consoleStart(t, base, "/console/redrive", url.Values{"queue": {dlq}, "mode": {"canary"},
		"group": {"envelope: messageId is required (message <n>)"}, "confirm": {"yes"}}))
	assert.Equal(t, "failed", canary.State)
	assert.Equal(t, 1, canary.Errors)
	assert.Equal(t, 2, canary.Total, "the group's two")
	assert.Contains(t, canary.Error, "came back to the dead-letter queue")
	assert.Contains(t, canary.Error, "the rest were left there")
	require.Eventually(t, func() bool { return len(dlqIDs()) == 3 }, 30*time.Second, 200*time.Millisecond, "the canary is back, the rest never left")

	// Edit and redrive with a body the route accepts.
	valid := fmt.Sprintf(`{"messageId":%q,"messageType":"analyze.resume","version":"v1","traceId":%q,"publishedAt":"2026-04-27T15:00:00Z",`+
		`"publisher":"console-test","payload":{"resumeId":1,"filePath":"resumes/raw/1/test.pdf","analyzedDocumentId":1},"context":{"userId":1}}`,
		timeout.UUID, traceID)
	edit := consoleJobEnd(t, base, consoleStart(t, base, "/console/edit", url.Values{"queue": {dlq}, "id": {timeout.UUID}, "body": {valid}}))
	assert.Equal(t, "done", edit.State, edit.Error)
	assert.Equal(t, []app.Redriven{{ID: timeout.UUID, To: "ai.analyze.resume", Edited: true}}, edit.Results)
	assert.Contains(t, edit.Summary, "1 dead letter(s): edit and redrive done")
	code, body = consoleDo(t, base, http.MethodGet, "/console/job?id="+edit.ID, nil)
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, timeout.UUID+" → ai.analyze.resume (edited)", "the job page shows the result")

	// Handled: it does not come back, and its trace now leads through the
	// worker's callback in the outbox to Core's inbox.
	var trace string
	require.Eventually(t, func() bool {
		var code int
		code, trace = consoleDo(t, base, http.MethodGet, "/console/trace?id="+url.QueryEscape(traceID), nil)
		return code == http.StatusOK && strings.Contains(trace, "inbox of")
	}, 60*time.Second, 500*time.Millisecond, "the edited copy was handled")
	assert.Contains(t, trace, "outbox → stackup.ai-to-core/callback.analysis")
	assert.Contains(t, trace, "inbox of stackup-core-callback.analysis")
	assert.NotContains(t, trace, "dead-letter queue "+dlq)
	assert.NotContains(t, trace, "outbox and inbox not searched", "they are read in the configured schema")
	assert.NotContains(t, trace, "not read", "a DLQ nothing was ever dead-lettered to is empty, not an error")
	assert.NotContains(t, dlqIDs(), timeout.UUID)
}

// jobStatus is what /console/job.json says of a console action.
type jobStatus struct {
	ID       string         `json:"id"`
	State    string         `json:"state"`
	Done     int            `json:"done"`
	Total    int            `json:"total"`
	RatePerS float64        `json:"rate_per_s"`
	Errors   int            `json:"errors"`
	Error    string         `json:"error"`
	Summary  string         `json:"summary"`
	Results  []app.Redriven `json:"results"`
	More     int            `json:"more"`
}

// consoleStart posts a console action as an admin and returns the id of the
// job it was sent to (the action runs in the service; the answer is a
// redirect to its page).
func consoleStart(t *testing.T, base, path string, form url.Values) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+token(t, "admin"))
	req.Header.Set("Origin", base)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "%s", body)
	loc, err := url.Parse(resp.Header.Get("Location"))
	require.NoError(t, err)
	require.Equal(t, "/console/job", loc.Path)
	return loc.Query().Get("id")
}

// consoleJobStatus reads /console/job.json of a job.
func consoleJobStatus(t *testing.T, base, id string) jobStatus {
	t.Helper()
	code, body := consoleDo(t, base, http.MethodGet, "/console/job.json?id="+url.QueryEscape(id), nil)
	require.Equal(t, http.StatusOK, code, body)
	var st jobStatus
	require.NoError(t, json.Unmarshal([]byte(body), &st), body)
	return st
}

// consoleJobEnd polls a job until it has ended and returns its last status.
func consoleJobEnd(t *testing.T, base, id string) jobStatus {
	t.Helper()
	var st jobStatus
	require.Eventually(t, func() bool {
		st = consoleJobStatus(t, base, id)
		return st.State != "running"
	}, time.Minute, 100*time.Millisecond, "the job ended")
	return st
}

// publishGroup puts n dead letters of ai.analyze.resume failed alike
// ("cache: key <n> evicted") in its DLQ.
func publishGroup(t *testing.T, ps message.Publisher, n int) []*message.Message {
	t.Helper()
	at := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	var msgs []*message.Message
	for i := range n {
		msgs = append(msgs, deadLetter("ai.analyze.resume", fmt.Sprintf("cache: key %d evicted", i), "transient", at))
	}
	for i := 0; i < n; i += 100 {
		require.NoError(t, ps.Publish("dlq.ai.analyze.resume", msgs[i:min(i+100, n)]...))
	}
	return msgs
}

// A console action on a few hundred dead letters runs as a job in the
// service: its POST answers at once with the job's page, the same action
// posted again while it runs is the same job, the JSON endpoint shows done,
// total, rate and errors moving, then the result; it takes the admin JWT
// like every console page.
func TestConsoleJobProgress(t *testing.T) {
	base, ps, letters := consoleService(t)
	const dlq = "dlq.ai.analyze.resume"
	const n = 300
	publishGroup(t, ps, n)
	require.Eventually(t, func() bool {
		code, body := consoleDo(t, base, http.MethodGet, "/console/dlq?queue="+dlq, nil)
		return code == http.StatusOK && strings.Contains(body, "cache: key &lt;n&gt; evicted") && strings.Contains(body, letters[2].UUID)
	}, 30*time.Second, 200*time.Millisecond)

	form := url.Values{"queue": {dlq}, "mode": {"discard"}, "group": {"cache: key <n> evicted"}, "rate": {"100"}, "confirm": {"yes"}}
	id := consoleStart(t, base, "/console/redrive", form)
	assert.Equal(t, id, consoleStart(t, base, "/console/redrive", form), "the same action while it runs is the same job")

	var moving []jobStatus
	st := consoleJobStatus(t, base, id)
	for st.State == "running" {
		if st.Done > 0 && st.Done < n {
			moving = append(moving, st)
		}
		time.Sleep(200 * time.Millisecond)
		st = consoleJobStatus(t, base, id)
	}
	require.GreaterOrEqual(t, len(moving), 2, "progress seen while the job ran")
	assert.Less(t, moving[0].Done, moving[len(moving)-1].Done, "done grows")
	for _, m := range moving {
		assert.Equal(t, n, m.Total)
		assert.Positive(t, m.RatePerS)
		assert.Zero(t, m.Errors)
	}
	assert.Equal(t, "done", st.State, st.Error)
	assert.Equal(t, n, st.Done)
	assert.Zero(t, st.Errors)
	assert.Contains(t, st.Summary, fmt.Sprintf("%d dead letter(s): discard done", n))
	require.Len(t, st.Results, n)
	assert.True(t, st.Results[0].Discarded)

	peek, err := app.PeekDeadLetters(context.Background(), ps, dlq, 1000)
	require.NoError(t, err)
	var left []string
	for _, v := range peek.Letters {
		left = append(left, v.ID)
	}
	assert.ElementsMatch(t, []string{letters[0].UUID, letters[1].UUID, letters[2].UUID}, left, "the other groups stay")

	again := consoleStart(t, base, "/console/redrive", form)
	assert.NotEqual(t, id, again, "once ended, the same action is a new job")
	assert.Equal(t, 0, consoleJobEnd(t, base, again).Done, "nothing left to discard")

	req, err := http.NewRequest(http.MethodGet, base+"/console/job.json?id="+id, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "no token")
	req.Header.Set("Authorization", "Bearer "+token(t, "learner"))
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "no admin role")
	code, _ := consoleDo(t, base, http.MethodGet, "/console/job.json?id=nope", nil)
	assert.Equal(t, http.StatusNotFound, code)
}

// A console action outlives its request and ends with the service: a job
// still running at shutdown is cancelled before the broker closes, the log
// says so, the service stops cleanly, and what the job did not reach is
// still in the DLQ.
func TestConsoleJobIsCancelledByShutdown(t *testing.T) {
	var logs syncBuffer
	base, ps, _, stop := consoleServiceLogged(t, slog.New(slog.NewJSONHandler(&logs, nil)))
	const dlq, n = "dlq.ai.analyze.resume", 200
	group := publishGroup(t, ps, n)
	require.Eventually(t, func() bool {
		code, body := consoleDo(t, base, http.MethodGet, "/console/dlq?queue="+dlq, nil)
		return code == http.StatusOK && strings.Contains(body, "cache: key &lt;n&gt; evicted")
	}, 30*time.Second, 200*time.Millisecond)
	id := consoleStart(t, base, "/console/redrive", url.Values{"queue": {dlq}, "mode": {"discard"}, "group": {"cache: key <n> evicted"},
		"rate": {"20"}, "confirm": {"yes"}})
	require.Eventually(t, func() bool { return consoleJobStatus(t, base, id).Done >= 5 }, 30*time.Second, 100*time.Millisecond, "the job runs after its request")

	require.NoError(t, stop())
	assert.Contains(t, logs.String(), "console action cancelled by the shutdown")
	peek, err := app.PeekDeadLetters(context.Background(), ps, dlq, 1000)
	require.NoError(t, err)
	left := 0
	for _, v := range peek.Letters {
		for _, m := range group {
			if v.ID == m.UUID {
				left++
			}
		}
	}
	assert.Greater(t, left, n/2, "the rest stay in the DLQ")
	assert.Less(t, left, n, "some were discarded before the shutdown")
}
