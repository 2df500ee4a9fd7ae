package realtime_test

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/handlers/realtime"
	"github.com/eventpipe/eventpipe/handlers/realtime/browsertest"
	"github.com/eventpipe/eventpipe/handlers/stackup"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/envelope"
)

// TestDemoPageInChromium opens the demo page in headless Chromium on every
// broker, publishes notifications through the broker and reads them off the
// page as EventSource delivered them.
func TestDemoPageInChromium(t *testing.T) {
	t.Parallel()
	bin := browsertest.Chromium(t)
	for _, k := range testbrokers.Kinds {
		kind := k.Name
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, kind, clusterOptions{instances: 1})
			inst := c.instances[0]
			id := newID()
			other := newID()
			tok := token(t, realtime.Claims{UserID: id, Sessions: []int64{id, other}})

			browser := browsertest.NewBrowser(t, bin)

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
			shown, err := chromedp.Run(browser, chromedp.Evaluate[[]browsertest.Event](browsertest.ShownJS))
			require.NoError(t, err)
			// The page listens to the types the server configured (FENCE
			// added by the test); the other session's event is not there.
			require.Len(t, shown, 3, "%v", shown)
			ch := fmt.Sprintf("session %d", id)
			assert.ElementsMatch(t, []browsertest.Event{
				{Channel: ch, Type: "FENCE", ID: m3, Text: ch + " FENCE null"},
				{Channel: ch, Type: "question.created", ID: m1, Text: ch + ` question.created {"questionId":41}`},
				{Channel: ch, Type: "SESSION_MESSAGE_DELTA", ID: m2, Text: ch + ` SESSION_MESSAGE_DELTA {"messageId":7,"seq":1,"text":"안녕"}`},
			}, shown)
		})
	}
}

// readmeDemo is how the README tells a reader to open the demo page during
// `make run`: the page's query and the token command's flags.
var readmeDemo = regexp.MustCompile(`/realtime/demo\?session=(\d+)#token=\$\(bin/eventpipe realtime token --user (\d+) --session (\d+)\)`)

// TestDemoPageAsTheREADMEOpensIt opens the page exactly as the README says
// (its URL and its token command's user and session, read from README.md)
// and checks that it shows what `make run`'s StackUp sample traffic sends:
// the sample requests are user stackup.SampleUserID's, the interview runs on
// session stackup.SampleSessionID — the page's two channels (handlers/stackup's
// TestProgressEventsInTheBrowser reads every progress event off the page).
func TestDemoPageAsTheREADMEOpensIt(t *testing.T) {
	t.Parallel()
	bin := browsertest.Chromium(t)
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	m := readmeDemo.FindSubmatch(readme)
	require.NotNil(t, m, "README.md names the demo page's URL and token command (%s)", readmeDemo)
	session, user, tokenSession := must(strconv.ParseInt(string(m[1]), 10, 64)), must(strconv.ParseInt(string(m[2]), 10, 64)), must(strconv.ParseInt(string(m[3]), 10, 64))
	require.Equal(t, session, tokenSession, "the README's token covers the session its URL opens")
	require.Equal(t, int64(stackup.SampleUserID), user, "the README opens the sample traffic's user")
	require.Equal(t, int64(stackup.SampleSessionID), session, "the README opens the sample interview's session")

	// The memory broker (make run's): in process, so ids 1 collide with no
	// other test.
	c := newCluster(t, "memory", clusterOptions{instances: 1})
	inst := c.instances[0]
	tok := token(t, realtime.Claims{UserID: user, Sessions: []int64{tokenSession}})
	browser := browsertest.NewBrowser(t, bin)
	page := fmt.Sprintf("%s/realtime/demo?session=%d#token=%s", inst.http.URL, session, tok)
	require.NoError(t, chromedp.Do(browser,
		chromedp.Navigate(page),
		chromedp.Poll[chromedp.Void](`document.getElementById("status").textContent === "connected"`, chromedp.WithPollingTimeout(30*time.Second)),
	), "the page connects")

	// What the sample round trip sends user 1 (a document's state, a
	// session of its own), and a notification of the README's session.
	m1 := c.notify(t, catalog.RealtimeUserNotify, envelope.Context{UserID: ptr(user)}, "DOC_STATE", map[string]any{"documentId": 77, "state": "ANALYZED"})
	m2 := c.notify(t, catalog.RealtimeSessionNotify, envelope.Context{SessionID: ptr(session)}, "question.created", map[string]any{"questionId": 1})
	require.NoError(t, chromedp.Do(browser,
		chromedp.Poll[chromedp.Void](`document.querySelectorAll("#events li").length >= 2`, chromedp.WithPollingTimeout(30*time.Second)),
	), "the page shows the events")
	shown, err := chromedp.Run(browser, chromedp.Evaluate[[]browsertest.Event](browsertest.ShownJS))
	require.NoError(t, err)
	u, s := fmt.Sprintf("user %d", user), fmt.Sprintf("session %d", session)
	assert.ElementsMatch(t, []browsertest.Event{
		{Channel: u, Type: "DOC_STATE", ID: m1, Text: u + ` DOC_STATE {"documentId":77,"state":"ANALYZED"}`},
		{Channel: s, Type: "question.created", ID: m2, Text: s + ` question.created {"questionId":1}`},
	}, shown)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
