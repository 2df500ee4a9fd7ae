package stackup_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/core"
	"github.com/eventpipe/eventpipe/handlers/stackup/envelope"
)

// TestFlows runs the contract end to end — Core requester → outbox →
// broker → AI worker → callback → Core state and realtime events — on every
// broker. SQS cases run one at a time: the emulator has no namespaces and
// the spec's queue names are fixed.
func TestFlows(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		run  func(t *testing.T, kind string)
	}{
		{"round trip of every request", testRoundTrips},
		{"failure signal", testFailureSignal},
		{"dead letters and duplicates", testDeadLetters},
		{"stale feedback, versions, smoke test", testEdges},
	}
	for _, kind := range brokerKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					if kind != "sqs" {
						t.Parallel()
					}
					c.run(t, kind)
				})
			}
		})
	}
}

func mustDoc(t *testing.T, f *fixture, id int64) core.Document {
	t.Helper()
	d, err := f.store.Document(context.Background(), id)
	require.NoError(t, err)
	return d
}

func docStatus(f *fixture, id int64) string {
	d, err := f.store.Document(context.Background(), id)
	if err != nil {
		return ""
	}
	return d.Status
}

func msgOf(f *fixture, id int64) core.Message {
	m, _ := f.store.Message(context.Background(), id)
	return m
}

func sessionOf(f *fixture, id int64) core.Session {
	s, _ := f.store.Session(context.Background(), id)
	return s
}

func ptr[T any](v T) *T { return &v }

// newSession creates a session with a question (INTERVIEWER) and an
// answer (INTERVIEWEE).
func newSession(t *testing.T, f *fixture, user int64) (sid, question, answer int64) {
	t.Helper()
	ctx := context.Background()
	sid, question, answer = newID(), newID(), newID()
	require.NoError(t, f.store.CreateSession(ctx, core.Session{ID: sid, UserID: user}))
	require.NoError(t, f.store.CreateMessage(ctx, core.Message{ID: question, SessionID: sid, Role: core.RoleInterviewer, Content: "가장 어려웠던 점은?"}))
	require.NoError(t, f.store.CreateMessage(ctx, core.Message{ID: answer, SessionID: sid, Role: core.RoleInterviewee, Content: "동시성 문제였습니다."}))
	return sid, question, answer
}

func followupReq(sid, question, answer, placeholder int64) *catalog.GenerateFollowupV1 {
	return &catalog.GenerateFollowupV1{SessionID: sid, ParentMessageID: question, AnswerMessageID: answer,
		PreviousQuestion: "가장 어려웠던 점은?", AnswerText: "동시성 문제였습니다.", Mode: "TECHNICAL",
		FollowupMessageID: &placeholder, History: []catalog.Turn{{Role: "INTERVIEWER", Content: "가장 어려웠던 점은?"}}}
}

func testRoundTrips(t *testing.T, kind string) {
	f := newFixture(t, kind, fixtureOptions{})
	ctx := context.Background()
	c := f.h.Core
	user := newID()

	resume, web, repo, cover := newID(), newID(), newID(), newID()
	docResume, docWeb, docRepo, docCover := newID(), newID(), newID(), newID()
	resumeReq, err := c.RequestAnalysis(ctx, user, &catalog.AnalyzeResumeV1{ResumeID: resume, FilePath: "resumes/raw/1/a.pdf", AnalyzedDocumentID: docResume})
	require.NoError(t, err)
	_, err = c.RequestAnalysis(ctx, user, &catalog.AnalyzeWebV1{ResumeID: web, URL: "https://example.com/me", AnalyzedDocumentID: docWeb})
	require.NoError(t, err)
	_, err = c.RequestAnalysis(ctx, user, &catalog.AnalyzeRepositoryV1{RepositoryID: repo, RepoFullName: "octocat/hello-world", DefaultBranch: "main", AnalyzedDocumentID: docRepo})
	require.NoError(t, err)
	_, err = c.RequestAnalysis(ctx, user, &catalog.AnalyzeCoverLetterV1{CoverLetterID: cover, FilePath: "cover/raw/1/c.pdf", AnalyzedDocumentID: docCover})
	require.NoError(t, err)

	sid, question, answer := newSession(t, f, user)
	placeholder := newID()
	_, err = c.RequestQuestions(ctx, user, &catalog.GenerateQuestionsV1{SessionID: sid, Mode: "TECHNICAL", InitialQuestionCount: 2, MaxQuestions: 10, SelfIntroAnswer: "안녕하세요"})
	require.NoError(t, err)
	_, err = c.RequestFollowup(ctx, user, followupReq(sid, question, answer, placeholder))
	require.NoError(t, err)
	// Until its callback lands (which may already have happened: the round
	// trip is fast), the follow-up message holds the placeholder text.
	if m := msgOf(f, placeholder); m.Status != core.MsgNormal {
		assert.Equal(t, core.PlaceholderText, m.Content)
	}
	_, err = c.RequestTTS(ctx, user, &catalog.GenerateTTSV1{SessionID: sid, MessageID: question, Text: "가장 어려웠던 점은?", Mode: "TECHNICAL"})
	require.NoError(t, err)
	_, err = c.RequestVoice(ctx, user, &catalog.AnalyzeVoiceV1{SessionID: sid, MessageID: answer, ParentQuestionMessageID: question,
		AudioS3Key: fmt.Sprintf("interview/answers/%d/%d.webm", sid, answer), ContentType: "audio/webm", Mode: "TECHNICAL"})
	require.NoError(t, err)
	sid2 := newID()
	require.NoError(t, f.store.CreateSession(ctx, core.Session{ID: sid2, UserID: user}))
	_, err = c.RequestFeedback(ctx, user, &catalog.GenerateFeedbackV1{SessionID: sid2, Mode: "TECHNICAL",
		Messages: []catalog.TranscriptMessage{{ID: 1, SequenceNumber: 1, Role: "INTERVIEWER", Content: "자기소개", Category: ptr("SELF_INTRODUCTION")}}})
	require.NoError(t, err)

	for _, id := range []int64{docResume, docWeb, docRepo, docCover} {
		eventually(t, fmt.Sprintf("document %d ANALYZED", id), func() bool { return docStatus(f, id) == core.DocAnalyzed })
	}
	assert.Equal(t, fmt.Sprintf("analyzed/repository/%d/summary.md", repo), mustDoc(t, f, docRepo).DocumentPath)
	eventually(t, "question pool set", func() bool { return len(sessionOf(f, sid).QuestionPool) == 2 })
	eventually(t, "follow-up placeholder updated", func() bool { return msgOf(f, placeholder).Status == core.MsgNormal })
	assert.Equal(t, catalog.IntentNormal, msgOf(f, placeholder).AnswerIntent)
	eventually(t, "TTS stored", func() bool { return msgOf(f, question).TTSStatus == catalog.StatusSucceeded })
	eventually(t, "voice transcript stored", func() bool { return strings.HasPrefix(msgOf(f, answer).Content, "sample transcript") })
	eventually(t, "answer evaluated", func() bool { return msgOf(f, answer).AnswerEvaluation != nil })
	eventually(t, "feedback stored", func() bool { _, err := f.store.Feedback(ctx, sid2); return err == nil })
	s2 := sessionOf(f, sid2)
	require.NotNil(t, s2.FeedbackAttemptID)
	fb, err := f.store.Feedback(ctx, sid2)
	require.NoError(t, err)
	assert.Equal(t, *s2.FeedbackAttemptID, *fb.AttemptID, "the attempt id is echoed (§5.10)")

	// Realtime: Core's notifications and the AI's progress reach RealTime.
	for _, want := range []struct {
		channel string
		id      int64
		event   string
	}{
		{"document", docResume, catalog.EventDocState},
		{"user", user, catalog.EventRepoState},
		{"session", sid, catalog.EventSessionMessage},
		{"session", sid, catalog.EventPoolProgress},
		{"session", sid, catalog.EventMessageDelta},
		{"session", sid, catalog.EventMessageAudio},
		{"user", user, catalog.EventAnalysisProgress},
		{"session", sid2, catalog.EventFeedbackProgress},
		{"session", sid2, catalog.EventFeedbackReady},
	} {
		eventually(t, fmt.Sprintf("%s event on %s %d", want.event, want.channel, want.id), func() bool {
			_, ok := f.sink.find(want.channel, want.id, want.event)
			return ok
		})
	}

	// §3 properties, as the callback consumer received them from the broker.
	var cb []delivery
	eventually(t, "callback delivery recorded", func() bool { cb = f.deliveries("core.callback.analysis", resumeReq); return len(cb) > 0 })
	md := cb[0].metadata
	assert.Equal(t, envelope.ContentType, md.Get(envelope.ContentTypeKey))
	assert.Equal(t, envelope.ContentEncoding, md.Get(envelope.ContentEncodingKey))
	assert.Equal(t, "0", md.Get(metadata.AttemptKey), "x-attempt counts earlier attempts from 0")
	assert.Equal(t, catalog.CallbackAnalysis, md.Get(metadata.RoutingKeyKey))
	env, err := envelope.Decode(cb[0].payload)
	require.NoError(t, err)
	assert.Equal(t, env.MessageID, cb[0].uuid, "message_id = messageId")
	assert.Equal(t, env.TraceID, md.Get(metadata.TraceIDKey), "x-trace-id = traceId")
	assert.Equal(t, envelope.PublisherAI, env.Publisher)
	req := f.deliveries("ai.analyze.resume", "")
	var reqEnv envelope.Envelope
	for _, d := range req {
		if d.uuid == resumeReq {
			reqEnv, err = envelope.Decode(d.payload)
			require.NoError(t, err)
		}
	}
	assert.Equal(t, reqEnv.TraceID, env.TraceID, "the callback continues the request's trace")
	assert.Equal(t, envelope.PublisherCore, reqEnv.Publisher)
}

func transient(msg string) error { return failure.AsTransient(errors.New(msg), 0) }

// callbackPayload waits for the callback answering requestID on queue and
// decodes its payload into out.
func callbackPayload(t *testing.T, f *fixture, queue, requestID string, out any) {
	t.Helper()
	var ds []delivery
	eventually(t, "callback for "+requestID, func() bool { ds = f.deliveries(queue, requestID); return len(ds) > 0 })
	env, err := envelope.Decode(ds[0].payload)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(env.Payload, out))
}

func testFailureSignal(t *testing.T, kind string) {
	f := newFixture(t, kind, fixtureOptions{dlqs: []string{"dlq.ai.generate.tts"}})
	ctx := context.Background()
	c := f.h.Core
	user := newID()

	// Permanent analysis failure (a domain error): FAILED, retriable false, no retry.
	resume, docResume := newID(), newID()
	f.proc.on(resume, func(int) error {
		return &aiworker.DomainError{Type: "ResumeAnalyzeError", Code: "PDF_PARSE_FAILED", Err: errors.New("PDF에 텍스트 레이어가 없습니다")}
	})
	_, err := c.RequestAnalysis(ctx, user, &catalog.AnalyzeResumeV1{ResumeID: resume, FilePath: "resumes/raw/1/x.pdf", AnalyzedDocumentID: docResume})
	require.NoError(t, err)

	// Transient twice, then success: in-process retries (§6 row 1).
	web, docWeb := newID(), newID()
	f.proc.on(web, func(call int) error {
		if call < 3 {
			return transient("LLM gateway timeout")
		}
		return nil
	})
	webReq, err := c.RequestAnalysis(ctx, user, &catalog.AnalyzeWebV1{ResumeID: web, URL: "https://example.com/me", AnalyzedDocumentID: docWeb})
	require.NoError(t, err)

	// Question pool: output off-schema → GENERATION_SCHEMA_INVALID, pool not set.
	sidQ := newID()
	require.NoError(t, f.store.CreateSession(ctx, core.Session{ID: sidQ, UserID: user}))
	f.proc.on(sidQ, func(int) error { return fmt.Errorf("decode model output: %w", aiworker.ErrSchemaInvalid) })
	qReq, err := c.RequestQuestions(ctx, user, &catalog.GenerateQuestionsV1{SessionID: sidQ, Mode: "TECHNICAL", InitialQuestionCount: 2})
	require.NoError(t, err)

	// Follow-up: the LLM is down for good → three attempts, then FAILED,
	// and the placeholder is failed, not deleted.
	sidF, question, answer := newSession(t, f, user)
	placeholder := newID()
	f.proc.on(answer, func(int) error { return transient("LLM gateway 503") })
	fReq, err := c.RequestFollowup(ctx, user, followupReq(sidF, question, answer, placeholder))
	require.NoError(t, err)

	// Feedback: an unexpected exception (a panic) → UNEXPECTED, marker persisted.
	sidFb := newID()
	require.NoError(t, f.store.CreateSession(ctx, core.Session{ID: sidFb, UserID: user}))
	f.proc.on(sidFb, func(int) error { panic(strings.Repeat("boom ", 200)) })
	fbReq, err := c.RequestFeedback(ctx, user, &catalog.GenerateFeedbackV1{SessionID: sidFb, Mode: "TECHNICAL"})
	require.NoError(t, err)

	// Voice: a domain error → callback.voice with errorCode, message FAILED.
	sidV, _, voiceAnswer := newSession(t, f, user)
	f.proc.on(voiceAnswer, func(int) error {
		return &aiworker.DomainError{Type: "SttError", Code: "STT_FAILED", Err: errors.New("no speech")}
	})
	_, err = c.RequestVoice(ctx, user, &catalog.AnalyzeVoiceV1{SessionID: sidV, MessageID: voiceAnswer, AudioS3Key: "interview/answers/1/1.webm", ContentType: "audio/webm", Mode: "TECHNICAL"})
	require.NoError(t, err)

	// TTS: transient forever, direct model → DLQ after three attempts,
	// inbox mark removed so a redrive runs it.
	sidT, ttsQuestion, _ := newSession(t, f, user)
	f.proc.on(ttsQuestion, func(int) error { return transient("TTS API 503") })
	ttsReq, err := c.RequestTTS(ctx, user, &catalog.GenerateTTSV1{SessionID: sidT, MessageID: ttsQuestion, Text: "질문", Mode: "TECHNICAL"})
	require.NoError(t, err)

	eventually(t, "resume FAILED", func() bool { return docStatus(f, docResume) == core.DocFailed })
	d := mustDoc(t, f, docResume)
	assert.Equal(t, "PDF_PARSE_FAILED", d.ErrorCode)
	assert.Equal(t, "ResumeAnalyzeError: ResumeAnalyzeError (PDF_PARSE_FAILED): PDF에 텍스트 레이어가 없습니다", d.ErrorMessage)
	require.NotNil(t, d.Retriable)
	assert.False(t, *d.Retriable)
	assert.Equal(t, 1, f.proc.called(resume), "a domain error is not retried")
	eventually(t, "DOC_STATE FAILED", func() bool { _, ok := f.sink.find("document", docResume, catalog.EventDocState); return ok })

	eventually(t, "web ANALYZED after retries", func() bool { return docStatus(f, docWeb) == core.DocAnalyzed })
	assert.Equal(t, 3, f.proc.called(web))
	assert.Equal(t, []int{1, 2, 3}, f.attemptsOf(webReq), "three in-process attempts of one delivery")

	var q catalog.QuestionsCallbackV1
	callbackPayload(t, f, "core.callback.questions", qReq, &q)
	assert.Equal(t, catalog.StatusFailed, q.Status)
	assert.Equal(t, catalog.ErrGenerationSchemaInvalid, q.ErrorCode)
	assert.False(t, *q.Retriable)
	assert.Empty(t, q.Questions)
	eventually(t, "ERROR on the session channel", func() bool { _, ok := f.sink.find("session", sidQ, catalog.EventError); return ok })
	assert.Nil(t, sessionOf(f, sidQ).QuestionPool, "FAILED never sets the pool")
	assert.Equal(t, 1, f.proc.called(sidQ))

	eventually(t, "placeholder failed", func() bool { return msgOf(f, placeholder).Status == core.MsgFailed })
	assert.Equal(t, core.FollowupFailedText, msgOf(f, placeholder).Content)
	assert.Equal(t, 3, f.proc.called(answer))
	var fq catalog.QuestionsCallbackV1
	callbackPayload(t, f, "core.callback.questions", fReq, &fq)
	assert.Equal(t, catalog.ErrGenerationFailed, fq.ErrorCode)
	assert.True(t, *fq.Retriable)
	assert.Equal(t, answer, *fq.ParentMessageID)
	assert.Equal(t, placeholder, *fq.FollowupMessageID)
	assert.Equal(t, "Error: transient: LLM gateway 503", fq.ErrorMessage)

	eventually(t, "feedback failure marker", func() bool { return sessionOf(f, sidFb).FeedbackFailedAt != nil })
	assert.True(t, *sessionOf(f, sidFb).FeedbackFailRetriable)
	var fb catalog.FeedbackCallbackV1
	callbackPayload(t, f, "core.callback.feedback", fbReq, &fb)
	assert.Equal(t, catalog.ErrUnexpected, fb.ErrorCode)
	assert.Equal(t, aiworker.MaxErrorMessage, utf8.RuneCountInString(fb.ErrorMessage), "errorMessage capped at 500 characters")
	assert.Equal(t, sessionOf(f, sidFb).FeedbackAttemptID, fb.AttemptID)
	_, err = f.store.Feedback(ctx, sidFb)
	assert.ErrorIs(t, err, core.ErrNotFound, "FAILED stores no feedback")

	eventually(t, "voice answer FAILED", func() bool { return msgOf(f, voiceAnswer).Status == core.MsgFailed })
	assert.Equal(t, "STT_FAILED", msgOf(f, voiceAnswer).VoiceErrorCode)

	_, dl := f.deadLetter("dlq.ai.generate.tts", ttsReq)
	assert.Equal(t, 3, dl.Attempts)
	assert.Equal(t, "transient", dl.Class)
	assert.Equal(t, "ai.generate.tts", dl.SourceQueue)
	assert.Contains(t, dl.Reason, "TTS API 503")
	assert.Equal(t, 3, f.proc.called(ttsQuestion))
	assertUnmarked(t, f.inbox, aiworker.RouteName("ai.generate.tts"), ttsReq)
	assert.Empty(t, msgOf(f, ttsQuestion).TTSStatus, "no callback")
}

// assertUnmarked checks that messageID may be processed again (§6: a message
// dead-lettered without a callback is unmarked, so a redrive is not
// swallowed). Marking it here is harmless: the fixture is discarded.
func assertUnmarked(t *testing.T, store inbox.Store, consumer, messageID string) {
	t.Helper()
	ran := false
	err := store.Process(context.Background(), consumer, messageID, func(context.Context) error { ran = true; return nil })
	require.NoError(t, err)
	assert.True(t, ran, "inbox mark of %s removed", messageID)
}

// encode builds a request envelope the way Core does.
func encode(t *testing.T, o catalog.Outgoing) (*message.Message, string) {
	t.Helper()
	if o.Publisher == "" {
		o.Publisher = envelope.PublisherCore
	}
	msg, topic, err := catalog.Default().Encode(context.Background(), o)
	require.NoError(t, err)
	return msg, topic
}

func rawEnvelope(id, messageType, version string, payload string) []byte {
	return []byte(fmt.Sprintf(`{"messageId":%q,"messageType":%q,"version":%q,"traceId":"t-%s","publishedAt":"2026-04-27T15:00:00Z","publisher":"core-server","payload":%s,"context":{"userId":1}}`,
		id, messageType, version, id, payload))
}

func testDeadLetters(t *testing.T, kind string) {
	f := newFixture(t, kind, fixtureOptions{dlqs: []string{"dlq.ai.analyze.resume", "dlq.ai.analyze.repository"}})
	topic := "stackup.core-to-ai/analyze.resume"
	resumePayload := `{"resumeId":1,"filePath":"resumes/raw/1/a.pdf","analyzedDocumentId":1}`

	cases := []struct {
		name, reason string
		body         func(id string) []byte
	}{
		{"not JSON", "body: not JSON", func(id string) []byte { return []byte(`{"messageId":"` + id + `", not json`) }},
		{"missing traceId", "field traceId: required", func(id string) []byte {
			return []byte(strings.Replace(string(rawEnvelope(id, catalog.AnalyzeResume, "v1", resumePayload)), `"traceId":"t-`+id+`",`, "", 1))
		}},
		{"wrong messageType for the routing key", `differs from the routing key "analyze.resume"`, func(id string) []byte {
			return rawEnvelope(id, catalog.AnalyzeWeb, "v1", `{"resumeId":1,"url":"https://example.com","analyzedDocumentId":1}`)
		}},
		{"version without a handler", `version "v9" has no handler`, func(id string) []byte {
			return rawEnvelope(id, catalog.AnalyzeResume, "v9", resumePayload)
		}},
		{"payload of the wrong shape", "resumeId", func(id string) []byte {
			return rawEnvelope(id, catalog.AnalyzeResume, "v1", `{"resumeId":"abc","filePath":"x","analyzedDocumentId":1}`)
		}},
	}
	for _, c := range cases {
		id := envelope.NewID()
		f.publishRaw(topic, id, c.body(id), nil)
		_, dl := f.deadLetter("dlq.ai.analyze.resume", id)
		assert.Equal(t, 1, dl.Attempts, c.name+": dead-lettered at once")
		assert.Equal(t, "permanent", dl.Class, c.name)
		assert.Equal(t, "ai.analyze.resume", dl.SourceQueue, c.name)
		assert.Contains(t, dl.Reason, c.reason, c.name)
	}

	if kind == "postgres" {
		// With the outbox table the callback is a row committed with the
		// processed marker: a broker that refuses it makes the relay
		// retry, never a dead letter, and it arrives once accepted.
		repo := newID()
		msg, reqTopic := encode(t, catalog.Outgoing{Type: catalog.AnalyzeRepository, Payload: &catalog.AnalyzeRepositoryV1{
			RepositoryID: repo, RepoFullName: "octocat/hello-world", DefaultBranch: "main", AnalyzedDocumentID: newID()}})
		f.failing.fail(msg.UUID)
		require.NoError(t, f.pub.Publish(reqTopic, msg))
		eventually(t, "request handled", func() bool { return f.handledCount(msg.UUID) == 1 })
		assert.Empty(t, f.deliveries("core.callback.analysis", msg.UUID), "refused, so not delivered yet")
		f.failing.recover(msg.UUID)
		eventually(t, "callback delivered by the relay", func() bool { return len(f.deliveries("core.callback.analysis", msg.UUID)) == 1 })
		assert.Equal(t, 1, f.proc.called(repo), "the work ran once")
	} else {
		// The success callback cannot be published: not reported as FAILED,
		// dead-lettered with the error, inbox mark removed.
		repo := newID()
		msg, reqTopic := encode(t, catalog.Outgoing{Type: catalog.AnalyzeRepository, Payload: &catalog.AnalyzeRepositoryV1{
			RepositoryID: repo, RepoFullName: "octocat/hello-world", DefaultBranch: "main", AnalyzedDocumentID: newID()}})
		f.failing.fail(msg.UUID)
		require.NoError(t, f.pub.Publish(reqTopic, msg))
		_, dl := f.deadLetter("dlq.ai.analyze.repository", msg.UUID)
		assert.Contains(t, dl.Reason, "success callback")
		assert.Contains(t, dl.Reason, errBrokerRefused.Error())
		assert.Equal(t, 1, f.proc.called(repo))
		assertUnmarked(t, f.inbox, aiworker.RouteName("ai.analyze.repository"), msg.UUID)
		assert.Empty(t, f.deliveries("core.callback.analysis", msg.UUID), "no FAILED callback either")

		// Even the FAILED callback cannot be published (the last safety net):
		// the original error goes to the DLQ, the inbox mark is removed.
		repo2 := newID()
		f.proc.on(repo2, func(int) error {
			return &aiworker.DomainError{Type: "RepoAnalyzeError", Code: "REPO_NOT_FOUND", Err: errors.New("404 from GitHub")}
		})
		msg2, _ := encode(t, catalog.Outgoing{Type: catalog.AnalyzeRepository, Payload: &catalog.AnalyzeRepositoryV1{
			RepositoryID: repo2, RepoFullName: "octocat/gone", DefaultBranch: "main", AnalyzedDocumentID: newID()}})
		f.failing.fail(msg2.UUID)
		require.NoError(t, f.pub.Publish(reqTopic, msg2))
		_, dl = f.deadLetter("dlq.ai.analyze.repository", msg2.UUID)
		assert.Contains(t, dl.Reason, "FAILED callback")
		assert.Contains(t, dl.Reason, "404 from GitHub", "the original error")
		assertUnmarked(t, f.inbox, aiworker.RouteName("ai.analyze.repository"), msg2.UUID)
	}

	// A duplicate messageId has one effect.
	web := newID()
	dup, webTopic := encode(t, catalog.Outgoing{Type: catalog.AnalyzeWeb, Payload: &catalog.AnalyzeWebV1{ResumeID: web, URL: "https://example.com/me", AnalyzedDocumentID: newID()}})
	require.NoError(t, f.pub.Publish(webTopic, dup))
	eventually(t, "first delivery handled", func() bool { return f.handledCount(dup.UUID) == 1 })
	again := message.NewMessage(dup.UUID, dup.Payload)
	again.Metadata = dup.Metadata
	require.NoError(t, f.pub.Publish(webTopic, again))
	eventually(t, "second delivery seen", func() bool { return len(f.attemptsOf(dup.UUID)) >= 2 })
	eventually(t, "callback applied", func() bool { return len(f.deliveries("core.callback.analysis", dup.UUID)) == 1 })
	time.Sleep(300 * time.Millisecond)
	assert.Equal(t, 1, f.proc.called(web), "processed once")
	assert.Len(t, f.deliveries("core.callback.analysis", dup.UUID), 1, "answered once")
}

// resumeV2 is a made-up breaking change of analyze.resume (§7): the ids move
// into an object. It exists only to show v1 and v2 handled side by side.
type resumeV2 struct {
	Resume struct {
		ID   int64  `json:"id"`
		File string `json:"file"`
	} `json:"resume"`
}

func (r *resumeV2) Validate(envelope.Envelope) error {
	if r.Resume.ID <= 0 {
		return errors.New("resume.id must be positive")
	}
	return nil
}

func testEdges(t *testing.T, kind string) {
	v2 := aiworker.VersionHandler{
		Schema: catalog.Schema{Version: "v2", New: func() catalog.Payload { return &resumeV2{} }},
		Process: func(_ context.Context, _ aiworker.Job, req catalog.Payload) (catalog.Payload, error) {
			r := req.(*resumeV2)
			return &catalog.AnalysisCallbackV1{TargetType: catalog.TargetResume, TargetID: r.Resume.ID, Status: catalog.StatusAnalyzed, Summary: "by the v2 handler"}, nil
		},
		Failed: func(req catalog.Payload, sig aiworker.FailureSignal) catalog.Payload {
			return &catalog.AnalysisCallbackV1{TargetType: catalog.TargetResume, TargetID: req.(*resumeV2).Resume.ID, Status: catalog.StatusFailed, ErrorCode: sig.Code}
		},
	}
	f := newFixture(t, kind, fixtureOptions{versions: map[string][]aiworker.VersionHandler{catalog.AnalyzeResume: {v2}}})
	ctx := context.Background()

	// A stale FAILED feedback callback (an earlier attempt) is dropped; the
	// current attempt's is applied.
	sid := newID()
	require.NoError(t, f.store.CreateSession(ctx, core.Session{ID: sid}))
	require.NoError(t, f.store.StartFeedbackAttempt(ctx, sid, "attempt-b"))
	failed := func(attempt string) *message.Message {
		m, topic := encode(t, catalog.Outgoing{Type: catalog.CallbackFeedback, Publisher: envelope.PublisherAI, Payload: &catalog.FeedbackCallbackV1{
			SessionID: sid, Status: catalog.StatusFailed, ErrorCode: catalog.ErrUnexpected, ErrorMessage: "RuntimeError: late", Retriable: ptr(true), AttemptID: &attempt}})
		require.NoError(t, f.pub.Publish(topic, m))
		return m
	}
	stale := failed("attempt-a")
	eventually(t, "stale callback handled", func() bool { return f.handledCount(stale.UUID) == 1 })
	assert.Nil(t, sessionOf(f, sid).FeedbackFailedAt, "a stale FAILED callback is dropped")
	failed("attempt-b")
	eventually(t, "current FAILED callback sets the marker", func() bool { return sessionOf(f, sid).FeedbackFailedAt != nil })

	// v1 and v2 of analyze.resume, side by side.
	r1, r2, d1, d2 := newID(), newID(), newID(), newID()
	require.NoError(t, f.store.CreateDocument(ctx, core.Document{ID: d1, TargetType: catalog.TargetResume, TargetID: r1}))
	require.NoError(t, f.store.CreateDocument(ctx, core.Document{ID: d2, TargetType: catalog.TargetResume, TargetID: r2}))
	m1, topic := encode(t, catalog.Outgoing{Type: catalog.AnalyzeResume, Payload: &catalog.AnalyzeResumeV1{ResumeID: r1, FilePath: "resumes/raw/1/v1.pdf", AnalyzedDocumentID: d1}})
	require.NoError(t, f.pub.Publish(topic, m1))
	id2 := envelope.NewID()
	f.publishRaw(topic, id2, rawEnvelope(id2, catalog.AnalyzeResume, "v2", fmt.Sprintf(`{"resume":{"id":%d,"file":"resumes/raw/1/v2.pdf"}}`, r2)), nil)
	eventually(t, "v1 handled", func() bool { return docStatus(f, d1) == core.DocAnalyzed })
	eventually(t, "v2 handled", func() bool { return docStatus(f, d2) == core.DocAnalyzed })
	assert.Equal(t, fmt.Sprintf("Sample analysis of resume %d.", r1), mustDoc(t, f, d1).Summary)
	assert.Equal(t, "by the v2 handler", mustDoc(t, f, d2).Summary)

	// §9: the smoke message, published to the exchange as rabbitmqadmin
	// does — no AMQP properties, no headers — is processed.
	smokeDoc := newID()
	require.NoError(t, f.store.CreateDocument(ctx, core.Document{ID: smokeDoc, TargetType: catalog.TargetResume, TargetID: 1}))
	smoke := []byte(`{"messageId":"smoke-1","messageType":"analyze.resume","version":"v1","traceId":"local-test","publishedAt":"2026-04-27T15:00:00Z","publisher":"manual","payload":{"resumeId":1,"filePath":"resumes/raw/1/test.pdf","analyzedDocumentId":1},"context":{"userId":1}}`)
	publishBare(t, f, "ai.analyze.resume", smoke)
	eventually(t, "smoke message answered", func() bool { return docStatus(f, smokeDoc) == core.DocAnalyzed })
	cb := f.deliveries("core.callback.analysis", "smoke-1")
	require.NotEmpty(t, cb, "the callback's correlation_id is the smoke message's messageId")
	assert.Equal(t, "local-test", cb[0].metadata.Get(metadata.TraceIDKey))
}

// publishBare publishes body with nothing but the body: on RabbitMQ with a
// bare AMQP publish to the exchange (what rabbitmqadmin does), elsewhere as a
// message without metadata straight to the queue.
func publishBare(t *testing.T, f *fixture, queue string, body []byte) {
	t.Helper()
	if f.kind != "rabbitmq" {
		require.NoError(t, f.ps.Publish(queue, message.NewMessage(envelope.NewID(), body)))
		return
	}
	conn, err := amqp.Dial(f.amqpURL)
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.PublishWithContext(context.Background(), catalog.ExchangeCoreToAI, catalog.AnalyzeResume, false, false, amqp.Publishing{Body: body}))
}

// TestProgressPublishFailureNeverFailsTheJob: §5.12's progress events are
// volatile — a broker refusing every one of them (here the AI worker's
// realtime publishes) costs the events, never the requests' callbacks.
func TestProgressPublishFailureNeverFailsTheJob(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "memory", fixtureOptions{})
	f.failing.refuseAINotifications()
	ctx := context.Background()
	c := f.h.Core
	user := newID()
	doc := newID()
	_, err := c.RequestAnalysis(ctx, user, &catalog.AnalyzeResumeV1{ResumeID: newID(), FilePath: "resumes/raw/1/a.pdf", AnalyzedDocumentID: doc})
	require.NoError(t, err)
	sid, question, answer := newSession(t, f, user)
	placeholder := newID()
	_, err = c.RequestQuestions(ctx, user, &catalog.GenerateQuestionsV1{SessionID: sid, Mode: "TECHNICAL", InitialQuestionCount: 2, MaxQuestions: 10, SelfIntroAnswer: "안녕하세요"})
	require.NoError(t, err)
	_, err = c.RequestFollowup(ctx, user, followupReq(sid, question, answer, placeholder))
	require.NoError(t, err)
	_, err = c.RequestFeedback(ctx, user, &catalog.GenerateFeedbackV1{SessionID: sid, Mode: "TECHNICAL",
		Messages: []catalog.TranscriptMessage{{ID: 1, SequenceNumber: 1, Role: "INTERVIEWER", Content: "자기소개", Category: ptr("SELF_INTRODUCTION")}}})
	require.NoError(t, err)

	eventually(t, "document ANALYZED", func() bool { return docStatus(f, doc) == core.DocAnalyzed })
	eventually(t, "question pool set", func() bool { return len(sessionOf(f, sid).QuestionPool) == 2 })
	eventually(t, "follow-up placeholder updated", func() bool { return msgOf(f, placeholder).Status == core.MsgNormal })
	eventually(t, "feedback stored", func() bool { _, err := f.store.Feedback(ctx, sid); return err == nil })
	eventually(t, "Core's own notifications still go out", func() bool {
		_, ok := f.sink.find("session", sid, catalog.EventFeedbackReady)
		return ok
	})
	for _, ev := range []string{catalog.EventPoolProgress, catalog.EventMessageDelta, catalog.EventMessageAudio, catalog.EventFeedbackProgress} {
		_, ok := f.sink.find("session", sid, ev)
		assert.False(t, ok, "%s was refused by the broker", ev)
	}
}
