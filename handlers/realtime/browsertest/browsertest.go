// Package browsertest drives the RealTime demo page in headless Chromium
// for tests of any package: the browser (Chromium), one browser per test
// (NewBrowser), opening the page (Open) and reading the events it lists
// (Shown) as EventSource delivered them.
package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// Chromium returns the browser the test drives: EVENTPIPE_CHROMIUM or
// /usr/bin/chromium (.ci/chromium installs it; make test runs it first).
// Missing, it fails the test under CI (CI=true or CI=1, as .ci/services
// reads it), where a skip would turn the run green without the test; on a
// developer machine it skips, saying why. app/testenv has no such switch:
// its services fail a test everywhere.
func Chromium(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("EVENTPIPE_CHROMIUM")
	if bin == "" {
		bin = "/usr/bin/chromium"
	}
	if _, err := exec.LookPath(bin); err != nil {
		if ci := os.Getenv("CI"); ci == "true" || ci == "1" {
			require.Failf(t, "chromium is missing", "%v: CI must provide it; run .ci/chromium (make test does)", err)
		}
		t.Skipf("chromium is missing (%v): skipped on this developer machine (under CI, CI=true or 1, it fails); install it with .ci/chromium (as root)", err)
	}
	return bin
}

// NewBrowser starts headless Chromium for one test; it ends with the test.
func NewBrowser(t *testing.T, bin string) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(bin),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	t.Cleanup(cancelAlloc)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(cancelBrowser)
	return browser
}

// Open opens the demo page of the server at baseURL on session with token
// (in the fragment, as a person would) and waits until every stream it
// opened (the token's user channel, the session's) is connected.
func Open(t *testing.T, browser context.Context, baseURL string, session int64, token string) {
	t.Helper()
	page := fmt.Sprintf("%s/realtime/demo?session=%d#token=%s", baseURL, session, token)
	require.NoError(t, chromedp.Do(browser,
		chromedp.Navigate(page),
		chromedp.Poll[chromedp.Void](`document.getElementById("status").textContent === "connected"`, chromedp.WithPollingTimeout(30*time.Second)),
	), "the page connects")
}

// Event is one list item of the demo page: its channel ("session 7",
// "user 1"), the SSE event type, the event id and the item's text
// ("<channel> <type> <data>").
type Event struct {
	Channel string `json:"channel"`
	Type    string `json:"type"`
	ID      string `json:"id"`
	Text    string `json:"text"`
}

// Data is the event's data field as the page received it.
func (e Event) Data() string {
	prefix := e.Channel + " " + e.Type + " "
	if len(e.Text) >= len(prefix) && e.Text[:len(prefix)] == prefix {
		return e.Text[len(prefix):]
	}
	return e.Text
}

// ShownJS reads the demo page's list (chromedp.Evaluate[[]Event]).
const ShownJS = `[...document.querySelectorAll("#events li")].map(li => ({channel: li.dataset.channel, type: li.dataset.type, id: li.dataset.id, text: li.textContent}))`

// WaitFor waits until the page lists at least n events (or the browser's
// time runs out).
func WaitFor(t *testing.T, browser context.Context, n int) {
	t.Helper()
	require.NoError(t, chromedp.Do(browser,
		chromedp.Poll[chromedp.Void](fmt.Sprintf(`document.querySelectorAll("#events li").length >= %d`, n), chromedp.WithPollingTimeout(30*time.Second)),
	), "the page shows %d events", n)
}

// Shown returns the events the page lists, in the order it received them.
func Shown(t *testing.T, browser context.Context) []Event {
	t.Helper()
	shown, err := chromedp.Run(browser, chromedp.Evaluate[[]Event](ShownJS))
	require.NoError(t, err)
	return shown
}
