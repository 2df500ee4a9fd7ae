package stackup_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/handlers/realtime"
	"github.com/eventpipe/eventpipe/handlers/realtime/browsertest"
	"github.com/eventpipe/eventpipe/handlers/stackup"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/core"
)

var browserSecret = []byte("stackup-browser-test-secret-32-bytes!")

// TestProgressEventsInTheBrowser drives an interview end to end as `make
// run` does — Core's requests on the memory broker, the AI worker with the
// sample processors, Core's callbacks, the RealTime SSE server — and reads
// every progress event off the demo page in headless Chromium, in the order
// EventSource delivered them: ANALYSIS_PROGRESS on the user channel;
// QUESTION_POOL_PROGRESS, SESSION_MESSAGE_DELTA, SESSION_MESSAGE_AUDIO and
// FEEDBACK_PROGRESS on the session channel, each before the canonical event
// Core sends with the callback.
func TestProgressEventsInTheBrowser(t *testing.T) {
	t.Parallel()
	bin := browsertest.Chromium(t)
	ps, pub, _ := newRouted(t, "memory", stackupTopology)
	srv, err := realtime.New(realtime.Config{Verifier: realtime.HMACVerifier{Secret: browserSecret}, Logger: testLogger})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(context.Background())
	require.NoError(t, srv.Start(runCtx))
	t.Cleanup(func() { stop(); _ = srv.Close() })
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)

	store := core.NewMemory()
	h, err := stackup.New(stackup.Roles{Core: true, AIWorker: true, Realtime: true}, stackup.Deps{
		Topology: stackupTopology, Publisher: pub, Inbox: inbox.NewMemory(), Store: store, Outbox: outbox.AfterCommit{Publisher: pub},
		Processors: aiworker.SampleProcessors(), Sink: srv.Sink(), Retry: testRetry, Logger: testLogger,
	})
	require.NoError(t, err)
	startRoutes(t, ps, h)

	ctx := context.Background()
	user, sid, question, answer, placeholder, resume, doc := newID(), newID(), newID(), newID(), newID(), newID(), newID()
	require.NoError(t, store.CreateSession(ctx, core.Session{ID: sid, UserID: user}))
	require.NoError(t, store.CreateMessage(ctx, core.Message{ID: question, SessionID: sid, Role: core.RoleInterviewer, Content: "가장 어려웠던 점은?"}))
	require.NoError(t, store.CreateMessage(ctx, core.Message{ID: answer, SessionID: sid, Role: core.RoleInterviewee, Content: "동시성 문제였습니다."}))

	tok, err := realtime.MintToken(browserSecret, realtime.Claims{UserID: user, Sessions: []int64{sid}, Expires: time.Now().Add(time.Hour).Unix()})
	require.NoError(t, err)
	browser := browsertest.NewBrowser(t, bin)
	browsertest.Open(t, browser, hs.URL, sid, tok)

	// One request after the other, each answered before the next, so the
	// page's order is the interview's.
	c := h.Core
	_, err = c.RequestAnalysis(ctx, user, &catalog.AnalyzeResumeV1{ResumeID: resume, FilePath: "resumes/raw/1/a.pdf", AnalyzedDocumentID: doc})
	require.NoError(t, err)
	eventually(t, "resume analysed", func() bool { d, err := store.Document(ctx, doc); return err == nil && d.Status == core.DocAnalyzed })
	_, err = c.RequestQuestions(ctx, user, &catalog.GenerateQuestionsV1{SessionID: sid, Mode: "TECHNICAL", InitialQuestionCount: 2, MaxQuestions: 10, SelfIntroAnswer: "안녕하세요"})
	require.NoError(t, err)
	eventually(t, "question pool set", func() bool { s, _ := store.Session(ctx, sid); return len(s.QuestionPool) == 2 })
	_, err = c.RequestFollowup(ctx, user, followupReq(sid, question, answer, placeholder))
	require.NoError(t, err)
	eventually(t, "follow-up stored", func() bool { m, _ := store.Message(ctx, placeholder); return m.Status == core.MsgNormal })
	_, err = c.RequestFeedback(ctx, user, &catalog.GenerateFeedbackV1{SessionID: sid, Mode: "TECHNICAL",
		Messages: []catalog.TranscriptMessage{{ID: 1, SequenceNumber: 1, Role: "INTERVIEWER", Content: "자기소개", Category: ptr("SELF_INTRODUCTION")}}})
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(browser, chromedp.Poll[chromedp.Void](
		`[...document.querySelectorAll("#events li")].some(li => li.dataset.type === "FEEDBACK_READY")`, chromedp.WithPollingTimeout(30*time.Second),
	)), "FEEDBACK_READY, Core's last notification, reaches the page")

	shown := browsertest.Shown(t, browser)
	sessionCh, userCh := fmt.Sprintf("session %d", sid), fmt.Sprintf("user %d", user)
	type item struct {
		i    int
		data map[string]any
	}
	on := func(channel, eventType string) []item {
		var out []item
		for i, e := range shown {
			if e.Channel == channel && e.Type == eventType {
				var d map[string]any
				require.NoError(t, json.Unmarshal([]byte(e.Data()), &d), e.Text)
				out = append(out, item{i, d})
			}
		}
		return out
	}
	phases := func(items []item) []string {
		var out []string
		for _, it := range items {
			if it.data["total"] != nil {
				out = append(out, fmt.Sprintf("%v %v/%v", it.data["phase"], it.data["completed"], it.data["total"]))
			} else {
				out = append(out, fmt.Sprint(it.data["phase"]))
			}
		}
		return out
	}

	analysis := on(userCh, catalog.EventAnalysisProgress)
	assert.Equal(t, []string{"EXTRACTING", "SUMMARIZING", "EMBEDDING"}, phases(analysis))
	for _, it := range analysis {
		assert.EqualValues(t, resume, it.data["targetId"])
		assert.Equal(t, catalog.TargetResume, it.data["targetType"])
	}

	pool := on(sessionCh, catalog.EventPoolProgress)
	assert.Equal(t, []string{"CONTEXT_BUILDING", "GENERATING", "FINALIZING"}, phases(pool))

	deltas := on(sessionCh, catalog.EventMessageDelta)
	require.NotEmpty(t, deltas)
	var text string
	for seq, it := range deltas {
		assert.EqualValues(t, placeholder, it.data["messageId"])
		assert.EqualValues(t, seq, it.data["seq"], "deltas arrive in seq order")
		text += it.data["text"].(string)
	}
	m, err := store.Message(ctx, placeholder)
	require.NoError(t, err)
	assert.Equal(t, m.Content, text, "the deltas spell the follow-up Core stored")

	audio := on(sessionCh, catalog.EventMessageAudio)
	require.Len(t, audio, 2, "one segment per sentence of the follow-up")
	for seq, it := range audio {
		assert.EqualValues(t, placeholder, it.data["messageId"])
		assert.EqualValues(t, seq, it.data["seq"])
		assert.Equal(t, "mp3", it.data["ext"])
		assert.NotNil(t, it.data["durationSec"])
	}

	feedback := on(sessionCh, catalog.EventFeedbackProgress)
	assert.Equal(t, []string{"PREPARING", "SCORING 0/5", "SCORING 1/5", "SCORING 2/5", "SCORING 3/5", "SCORING 4/5", "SCORING 5/5", "FINALIZING"},
		phases(feedback))
	ready := on(sessionCh, catalog.EventFeedbackReady)
	require.Len(t, ready, 1)

	// Across requests: the interview's order.
	last := func(items []item) int { return items[len(items)-1].i }
	assert.Less(t, last(pool), deltas[0].i, "the pool's progress before the follow-up's deltas")
	assert.Less(t, last(deltas), feedback[0].i, "the follow-up before the feedback's progress")
	assert.Less(t, last(audio), feedback[0].i, "the follow-up's audio gathered before its callback")
	assert.Less(t, last(feedback), ready[0].i, "progress before Core's FEEDBACK_READY")
}
