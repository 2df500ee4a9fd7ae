package stackup_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/core"
	"github.com/eventpipe/eventpipe/handlers/stackup/envelope"
)

// The rest of the contract (issue 16 item 5), on the memory broker and on
// Postgres (Core's real store and the outbox).
func TestContract(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"memory", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			t.Run("FAILED before kind", func(t *testing.T) { t.Parallel(); testFailedBeforeKind(t, kind) })
			t.Run("callback that cannot be assembled", func(t *testing.T) { t.Parallel(); testAssemblyFailure(t, kind) })
			t.Run("advance to the next general question", func(t *testing.T) { t.Parallel(); testAdvanceToNextGeneral(t, kind) })
			t.Run("v2 on Core and RealTime", func(t *testing.T) { t.Parallel(); testConsumerVersions(t, kind) })
		})
	}
}

// §5.9: a FAILED callback.questions is handled before kind is looked at —
// a kind no v1 consumer knows ("BATCH") gets the SSE ERROR and is
// acknowledged, not dead-lettered.
func testFailedBeforeKind(t *testing.T, kind string) {
	f := newFixture(t, kind, fixtureOptions{})
	sid := newID()
	require.NoError(t, f.store.CreateSession(context.Background(), core.Session{ID: sid, UserID: newID()}))
	id := envelope.NewID()
	f.publishRaw("stackup.ai-to-core/callback.questions", id, rawEnvelope(id, catalog.CallbackQuestions, "v1",
		fmt.Sprintf(`{"sessionId":%d,"kind":"BATCH","status":"FAILED","errorCode":"GENERATION_FAILED","errorMessage":"x","retriable":true}`, sid)), nil)
	eventually(t, "SSE ERROR on the session channel", func() bool { _, ok := f.sink.find("session", sid, catalog.EventError); return ok })
	e, _ := f.sink.find("session", sid, catalog.EventError)
	assert.JSONEq(t, `{"scope":"QUESTIONS","kind":"BATCH","errorCode":"GENERATION_FAILED","retriable":true}`, string(e.Data))
	eventually(t, "acknowledged", func() bool { return f.handledCount(id) == 1 })
}

// A processor's result that our strict encoder refuses is answered FAILED
// (GENERATION_SCHEMA_INVALID, not retried), on the guard's types and on the
// direct ones (tts) alike: §6 counts payload assembly as part of the work.
func testAssemblyFailure(t *testing.T, kind string) {
	f := newFixture(t, kind, fixtureOptions{})
	ctx := context.Background()
	user := newID()
	resume, doc := newID(), newID()
	f.proc.on(resume, func(int) error { return errBadOutput })
	req, err := f.h.Core.RequestAnalysis(ctx, user, &catalog.AnalyzeResumeV1{ResumeID: resume, FilePath: "resumes/raw/1/x.pdf", AnalyzedDocumentID: doc})
	require.NoError(t, err)

	sid, question, _ := newSession(t, f, user)
	f.proc.on(question, func(int) error { return errBadOutput })
	ttsReq, err := f.h.Core.RequestTTS(ctx, user, &catalog.GenerateTTSV1{SessionID: sid, MessageID: question, Text: "질문"})
	require.NoError(t, err)

	eventually(t, "resume FAILED", func() bool { return docStatus(f, doc) == core.DocFailed })
	var cb catalog.AnalysisCallbackV1
	callbackPayload(t, f, "core.callback.analysis", req, &cb)
	assert.Equal(t, catalog.ErrGenerationSchemaInvalid, cb.ErrorCode)
	require.NotNil(t, cb.Retriable)
	assert.False(t, *cb.Retriable)
	assert.Contains(t, cb.ErrorMessage, "documentPath")
	assert.Equal(t, 1, f.proc.called(resume), "not retried")

	eventually(t, "TTS FAILED", func() bool { return msgOf(f, question).TTSStatus == catalog.StatusFailed })
	assert.Equal(t, catalog.ErrGenerationSchemaInvalid, msgOf(f, question).TTSErrorCode)
	var tts catalog.TTSCallbackV1
	callbackPayload(t, f, "core.callback.tts", ttsReq, &tts)
	assert.Equal(t, catalog.StatusFailed, tts.Status)
	assert.Equal(t, 1, f.proc.called(question))
}

// §5.9: a follow-up that fails (its placeholder kept, FAILED) or that the
// candidate answered "don't know" (its placeholder deleted) moves the
// interview to the next general question: persisted, announced, and sent to
// speech synthesis, whose callback completes it.
func testAdvanceToNextGeneral(t *testing.T, kind string) {
	f := newFixture(t, kind, fixtureOptions{})
	ctx := context.Background()
	user := newID()
	sid, question, answer := newSession(t, f, user)
	pool := []catalog.Question{
		{Category: "PROJECT", Question: "가장 어려웠던 점은?"}, // asked already (newSession)
		{Category: "CS", Question: "TCP 3-way handshake 를 설명해 주세요."},
		{Category: "CS", Question: "트랜잭션 격리 수준은?"},
	}
	require.NoError(t, f.store.SetQuestionPool(ctx, sid, pool))
	placeholder := newID()
	answer2 := newID()
	placeholder2 := newID()
	require.NoError(t, f.store.CreateMessage(ctx, core.Message{ID: answer2, SessionID: sid, Role: core.RoleInterviewee, Content: "모르겠습니다."}))

	// The follow-up fails for good.
	f.proc.on(answer, func(int) error {
		return &aiworker.DomainError{Type: "GenerationError", Code: catalog.ErrGenerationFailed, Err: errors.New("LLM down")}
	})
	_, err := f.h.Core.RequestFollowup(ctx, user, followupReq(sid, question, answer, placeholder))
	require.NoError(t, err)
	eventually(t, "placeholder failed", func() bool { return msgOf(f, placeholder).Status == core.MsgFailed })
	next := waitQuestion(t, f, sid, pool[1].Question)
	eventually(t, "the next question announced", func() bool {
		e, ok := f.sink.find("session", sid, catalog.EventSessionMessage)
		return ok && json.Valid(e.Data) && hasMessageEvent(f, sid, next.ID)
	})
	eventually(t, "the next question synthesised (generate.tts → callback.tts)", func() bool {
		return msgOf(f, next.ID).TTSStatus == catalog.StatusSucceeded
	})

	// DONT_KNOW, published as the AI server would: the placeholder goes, the
	// question after goes out.
	require.NoError(t, f.store.CreateMessage(ctx, core.Message{ID: placeholder2, SessionID: sid, Role: core.RoleInterviewer, Content: core.PlaceholderText, Status: core.MsgPending}))
	id := envelope.NewID()
	f.publishRaw("stackup.ai-to-core/callback.questions", id, rawEnvelope(id, catalog.CallbackQuestions, "v1",
		fmt.Sprintf(`{"sessionId":%d,"kind":"FOLLOWUP","parentMessageId":%d,"followupMessageId":%d,"answerIntent":"DONT_KNOW","status":"OK"}`, sid, answer2, placeholder2)), nil)
	third := waitQuestion(t, f, sid, pool[2].Question)
	_, err = f.store.Message(ctx, placeholder2)
	assert.ErrorIs(t, err, core.ErrNotFound, "the DONT_KNOW placeholder is deleted")
	assert.Greater(t, third.ID, next.ID)

	// The pool is used up: a further DONT_KNOW changes nothing more.
	placeholder3 := newID()
	require.NoError(t, f.store.CreateMessage(ctx, core.Message{ID: placeholder3, SessionID: sid, Role: core.RoleInterviewer, Content: core.PlaceholderText, Status: core.MsgPending}))
	id = envelope.NewID()
	f.publishRaw("stackup.ai-to-core/callback.questions", id, rawEnvelope(id, catalog.CallbackQuestions, "v1",
		fmt.Sprintf(`{"sessionId":%d,"kind":"FOLLOWUP","parentMessageId":%d,"followupMessageId":%d,"answerIntent":"DONT_KNOW","status":"OK"}`, sid, answer2, placeholder3)), nil)
	eventually(t, "handled", func() bool { return f.handledCount(id) == 1 })
	msgs, err := f.store.SessionMessages(ctx, sid)
	require.NoError(t, err)
	asked := 0
	for _, m := range msgs {
		if m.Role == core.RoleInterviewer && m.Status == core.MsgNormal {
			asked++
		}
	}
	assert.Equal(t, 3, asked, "every pool question asked once")
}

func hasMessageEvent(f *fixture, sid, messageID int64) bool {
	f.sink.mu.Lock()
	defer f.sink.mu.Unlock()
	for _, e := range f.sink.events {
		var data struct {
			MessageID int64 `json:"messageId"`
		}
		if e.Channel == "session" && e.ID == sid && e.EventType == catalog.EventSessionMessage &&
			json.Unmarshal(e.Data, &data) == nil && data.MessageID == messageID {
			return true
		}
	}
	return false
}

// waitQuestion waits for the session's INTERVIEWER message asking text.
func waitQuestion(t *testing.T, f *fixture, sid int64, text string) core.Message {
	t.Helper()
	var found core.Message
	eventually(t, "question "+text, func() bool {
		msgs, err := f.store.SessionMessages(context.Background(), sid)
		if err != nil {
			return false
		}
		for _, m := range msgs {
			if m.Role == core.RoleInterviewer && m.Content == text {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

// analysisV2 is a made-up breaking change of callback.analysis (§7); notifyV2
// one of the realtime notifications. Each maps to its v1 payload.
type analysisV2 struct {
	Target struct {
		Type string `json:"type"`
		ID   int64  `json:"id"`
	} `json:"target"`
	Outcome string `json:"outcome"`
}

func (a *analysisV2) Validate(envelope.Envelope) error {
	if a.Target.ID <= 0 {
		return errors.New("target.id must be positive")
	}
	return nil
}

type notifyV2 struct {
	Event string          `json:"event"`
	Body  json.RawMessage `json:"body"`
}

func (n *notifyV2) Validate(envelope.Envelope) error { return nil }

// §7: Core and RealTime handle v2 beside v1, as the AI worker does; a v2
// payload that maps to an invalid v1 one is dead-lettered at once.
func testConsumerVersions(t *testing.T, kind string) {
	versions := map[string][]catalog.Version{
		catalog.CallbackAnalysis: {{
			Schema: catalog.Schema{Version: "v2", New: func() catalog.Payload { return &analysisV2{} }},
			AsV1: func(p catalog.Payload) (catalog.Payload, error) {
				a := p.(*analysisV2)
				return &catalog.AnalysisCallbackV1{TargetType: a.Target.Type, TargetID: a.Target.ID, Status: a.Outcome, Summary: "by v2"}, nil
			},
		}},
		catalog.RealtimeSessionNotify: {{
			Schema: catalog.Schema{Version: "v2", New: func() catalog.Payload { return &notifyV2{} }},
			AsV1: func(p catalog.Payload) (catalog.Payload, error) {
				n := p.(*notifyV2)
				return &catalog.NotifyV1{EventType: n.Event, Data: n.Body}, nil
			},
		}},
	}
	f := newFixture(t, kind, fixtureOptions{consumerVersions: versions, dlqs: []string{"dlq.core.callback.analysis"}})
	ctx := context.Background()
	target, doc := newID(), newID()
	require.NoError(t, f.store.CreateDocument(ctx, core.Document{ID: doc, TargetType: catalog.TargetResume, TargetID: target}))
	id := envelope.NewID()
	f.publishRaw("stackup.ai-to-core/callback.analysis", id, rawEnvelope(id, catalog.CallbackAnalysis, "v2",
		fmt.Sprintf(`{"target":{"type":"RESUME","id":%d},"outcome":"ANALYZED"}`, target)), nil)
	eventually(t, "v2 callback applied", func() bool { return docStatus(f, doc) == core.DocAnalyzed })
	assert.Equal(t, "by v2", mustDoc(t, f, doc).Summary)

	sid := newID()
	id = envelope.NewID()
	body := fmt.Sprintf(`{"messageId":%q,"messageType":"realtime.session.notify","version":"v2","traceId":"t","publishedAt":"2026-04-27T15:00:00Z","publisher":"ai-server","payload":{"event":"QUESTION_POOL_PROGRESS","body":{"phase":"GENERATING"}},"context":{"sessionId":%d}}`, id, sid)
	f.publishRaw("stackup.realtime/realtime.session.notify", id, []byte(body), nil)
	eventually(t, "v2 notification delivered", func() bool { _, ok := f.sink.find("session", sid, catalog.EventPoolProgress); return ok })

	// v2 that maps to an invalid v1 payload (unknown targetType): dead-lettered.
	bad := envelope.NewID()
	f.publishRaw("stackup.ai-to-core/callback.analysis", bad, rawEnvelope(bad, catalog.CallbackAnalysis, "v2",
		`{"target":{"type":"BOOK","id":1},"outcome":"ANALYZED"}`), nil)
	_, dl := f.deadLetter("dlq.core.callback.analysis", bad)
	assert.Equal(t, "permanent", dl.Class)
	assert.Contains(t, dl.Reason, "targetType")
}
