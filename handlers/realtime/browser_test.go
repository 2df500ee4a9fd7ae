package realtime_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/handlers/realtime"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/envelope"
)

// chromium returns the browser the test drives: EVENTPIPE_CHROMIUM or
// /usr/bin/chromium (.ci/chromium installs it; make test runs it first).
// Missing, it fails the test under CI (CI=true or CI=1, as .ci/services
// reads it), where a skip would turn the run green without the test; on a
// developer machine it skips, saying why. app/testenv has no such switch:
// its services fail a test everywhere.
func chromium(t *testing.T) string {
	t.Helper()
	bin := envOr("EVENTPIPE_CHROMIUM", "/usr/bin/chromium")
	if _, err := exec.LookPath(bin); err != nil {
		if ci := os.Getenv("CI"); ci == "true" || ci == "1" {
			require.Failf(t, "chromium is missing", "%v: CI must provide it; run .ci/chromium (make test does)", err)
		}
		t.Skipf("chromium is missing (%v): skipped on this developer machine (under CI, CI=true or 1, it fails); install it with .ci/chromium (as root)", err)
	}
	return bin
}

// shownEvent is one list item of the demo page.
type shownEvent struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	Text string `json:"text"`
}

// TestDemoPageInChromium opens the demo page in headless Chromium on every
// broker, publishes notifications through the broker and reads them off the
// page as EventSource delivered them.
func TestDemoPageInChromium(t *testing.T) {
	t.Parallel()
	bin := chromium(t)
	for _, k := range testbrokers.Kinds {
		kind := k.Name
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, kind, clusterOptions{instances: 1})
			inst := c.instances[0]
			id := newID()
			other := newID()
			tok := token(t, realtime.Claims{UserID: id, Sessions: []int64{id, other}})

			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
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
			defer cancelAlloc()
			browser, cancelBrowser := chromedp.NewContext(alloc)
			defer cancelBrowser()

			page := fmt.Sprintf("%s/realtime/demo?session=%d#token=%s", inst.http.URL, id, tok)
			require.NoError(t, chromedp.Do(browser,
				chromedp.Navigate(page),
				chromedp.Poll[chromedp.Void](`document.getElementById("status").textContent === "connected"`, chromedp.WithPollingTimeout(30*time.Second)),
			), "the page connects")

			m1 := c.notify(t, catalog.RealtimeSessionNotify, envelope.Context{SessionID: ptr(id)}, "question.created", map[string]any{"questionId": 41})
			c.notify(t, catalog.RealtimeSessionNotify, envelope.Context{SessionID: ptr(other)}, "question.created", map[string]any{"questionId": 666})
			m2 := c.notify(t, catalog.RealtimeSessionNotify, envelope.Context{SessionID: ptr(id)}, "SESSION_MESSAGE_DELTA", map[string]any{"messageId": 7, "seq": 1, "text": "안녕"})
			m3 := c.notify(t, catalog.RealtimeSessionNotify, envelope.Context{SessionID: ptr(id)}, "FENCE", nil)

			require.NoError(t, chromedp.Do(browser,
				chromedp.Poll[chromedp.Void](`document.querySelectorAll("#events li").length >= 3`, chromedp.WithPollingTimeout(30*time.Second)),
			), "the page shows the events")
			shown, err := chromedp.Run(browser, chromedp.Evaluate[[]shownEvent](
				`[...document.querySelectorAll("#events li")].map(li => ({type: li.dataset.type, id: li.dataset.id, text: li.textContent}))`))
			require.NoError(t, err)
			// The page listens to the types the server configured (FENCE
			// added by the test); the other session's event is not there.
			require.Len(t, shown, 3, "%v", shown)
			assert.ElementsMatch(t, []shownEvent{
				{Type: "FENCE", ID: m3, Text: "FENCE null"},
				{Type: "question.created", ID: m1, Text: `question.created {"questionId":41}`},
				{Type: "SESSION_MESSAGE_DELTA", ID: m2, Text: `SESSION_MESSAGE_DELTA {"messageId":7,"seq":1,"text":"안녕"}`},
			}, shown)
		})
	}
}
