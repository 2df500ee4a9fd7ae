package catalog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/handlers/stackup"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/envelope"
)

func wrap(messageType, payload, context string) []byte {
	if context == "" {
		context = `{"userId":123}`
	}
	return []byte(fmt.Sprintf(`{"messageId":"9b2c7a6e-3a1f-4c55-8f1e-0f6a3e2b1c11","messageType":%q,"version":"v1","traceId":"9f4e5b","publishedAt":"2026-04-27T15:00:00Z","publisher":"core-server","payload":%s,"context":%s}`,
		messageType, payload, context))
}

// specExamples are §5's payloads, as the spec writes them.
var specExamples = []struct {
	messageType, payload, context string
}{
	{catalog.AnalyzeResume, `{"resumeId":42,"filePath":"resumes/raw/123/abc.pdf","analyzedDocumentId":101}`, ""},
	{catalog.AnalyzeRepository, `{"repositoryId":7,"repoFullName":"octocat/hello-world","defaultBranch":"main","analyzedDocumentId":102}`, ""},
	{catalog.AnalyzeWeb, `{"resumeId":42,"url":"https://example.com/me","analyzedDocumentId":103}`, ""},
	{catalog.AnalyzeCoverLetter, `{"coverLetterId":5,"filePath":"cover_letters/raw/123/c.pdf","analyzedDocumentId":104}`, ""},
	{catalog.CallbackAnalysis, `{"targetType":"RESUME","targetId":42,"status":"ANALYZED","summary":"Java/Spring 3년차, 결제 시스템 개발...","techStack":["Java","Spring Boot","PostgreSQL"],"documentPath":"analyzed/resume/42/summary.md","embeddingChunkCount":18}`, ""},
	{catalog.CallbackAnalysis, `{"targetType":"RESUME","targetId":42,"status":"FAILED","errorCode":"PDF_PARSE_FAILED","errorMessage":"PDF에 텍스트 레이어가 없습니다","retriable":false}`, ""},
	{catalog.GenerateQuestions, `{"sessionId":99,"mode":"JOB_TAILORED","jobCategories":["BACKEND","FRONTEND"],"documents":[{"documentId":42,"sourceType":"RESUME","summary":"...","techStack":["..."],"markdown":"..."}],"initialQuestionCount":2,"maxQuestions":10,"recentQuestions":["이전 면접 질문 텍스트","..."],"selfIntroAnswer":"안녕하세요, 결제 시스템을 만든 백엔드 3년차입니다…","targetCompanyName":"토스","targetJobDescription":"Kotlin/Spring 백엔드, 대용량 결제 시스템 경험 우대 …","focusAreas":["LOGIC","COMMUNICATION"]}`, `{"userId":123,"sessionId":99}`},
	{catalog.CallbackQuestions, `{"sessionId":99,"kind":"POOL","questions":[{"category":"PROJECT_DEEP_DIVE","question":"...","jobCategory":"BACKEND","targetEvidence":"이력서: 결제 시스템에서 재고 차감 동시성 문제를 낙관적 락으로 해결","expectedSignal":"락 전략 선택의 트레이드오프를 DB 레벨까지 설명하는지"},{"category":"CS_FUNDAMENTAL","question":"...","jobCategory":null,"targetEvidence":"","expectedSignal":""}],"status":"OK"}`, ""},
	{catalog.CallbackQuestions, `{"sessionId":99,"kind":"POOL","questions":[],"status":"FAILED","errorCode":"GENERATION_FAILED","errorMessage":"...","retriable":true}`, ""},
	{catalog.GenerateFollowup, `{"sessionId":99,"parentMessageId":501,"answerMessageId":502,"previousQuestion":"...","answerText":"...","mode":"TECHNICAL","jobCategory":"BACKEND","contextDocumentIds":[12,13],"parentCategory":"PROJECT_DEEP_DIVE","parentExpectedSignal":"동시성 제어를 DB 레벨까지 설명하는지","followupMessageId":503,"history":[{"role":"INTERVIEWER","content":"..."}]}`, `{}`},
	{catalog.CallbackQuestions, `{"sessionId":99,"kind":"FOLLOWUP","parentMessageId":502,"followupMessageId":503,"answerIntent":"NORMAL","followupQuestion":"...","answerEvaluation":{"specificity":3.5,"logic":4.0,"structure":"PARTIAL_STAR","correctness":null},"status":"OK"}`, ""},
	{catalog.CallbackQuestions, `{"sessionId":99,"kind":"FOLLOWUP","parentMessageId":502,"answerMessageId":502,"followupMessageId":503,"followupQuestion":"","status":"FAILED","errorCode":"GENERATION_FAILED","errorMessage":"...","retriable":true}`, ""},
	{catalog.GenerateTTS, `{"sessionId":99,"messageId":502,"text":"당신의 프로젝트에서 가장 어려웠던 점은 무엇인가요?","mode":"TECHNICAL","jobCategory":"BACKEND"}`, `{"userId":123,"sessionId":99}`},
	{catalog.CallbackTTS, `{"sessionId":99,"messageId":502,"status":"SUCCEEDED","audioKey":"interview/tts/99/502.mp3","durationSec":4.2,"errorCode":null}`, ""},
	{catalog.AnalyzeVoice, `{"sessionId":99,"messageId":502,"parentQuestionMessageId":501,"audioS3Key":"interview/answers/99/502.webm","contentType":"audio/webm","previousQuestionText":"...","mode":"TECHNICAL","jobCategory":"BACKEND"}`, `{"userId":123,"sessionId":99}`},
	{catalog.CallbackVoice, `{"sessionId":99,"interviewMessageId":502,"transcript":"네, 저는 결제 시스템에서...","speakingRateWpm":142.0,"silenceDurationSec":8.2,"fillerWordCounts":{"음":5,"어":3},"pronunciationAccuracy":0.93,"errorCode":null}`, ""},
	{catalog.GenerateFeedback, `{"sessionId":99,"mode":"JOB_TAILORED","jobCategory":"BACKEND","attemptId":"8b1f…-uuid","messages":[{"id":1,"sequenceNumber":1,"role":"INTERVIEWER","content":"자기소개…","category":"SELF_INTRODUCTION"},{"id":2,"sequenceNumber":2,"role":"INTERVIEWEE","content":"…","parentMessageId":1}],"targetCompanyName":"토스","targetJobDescription":"Kotlin/Spring 백엔드, 대용량 결제 …"}`, ""},
	{catalog.CallbackFeedback, `{"sessionId":99,"overallScore":76.5,"technicalAccuracy":80.0,"logicScore":72.0,"communicationScore":78.0,"strengthsSummary":"...","weaknessesSummary":"...","improvementKeywords":["JPA 영속성 컨텍스트","TCP 3-way handshake"],"studyPlan":["..."],"highlights":["결론부터 말하는 답변 구조","동시성 제어 경험"],"answerCoaching":[{"messageId":203,"modelAnswer":"이 질문에 강한 답변 예시…","answerRewrite":"내 답변을 이렇게 고치면…","coachingComment":"결론을 먼저 말하세요."}],"panelBreakdown":[{"evaluator":"백엔드","dimension":"기술 정확도·깊이","score":80.0,"detail":"...","scoreRationale":"..."},{"evaluator":"첫인상","dimension":"자기소개 전달력·구성·직무적합성","score":78.0,"detail":"...","scoreRationale":"..."}],"reportS3Key":"feedback/99/report.md"}`, ""},
	{catalog.CallbackFeedback, `{"sessionId":99,"status":"FAILED","errorCode":"UNEXPECTED","errorMessage":"...","retriable":true,"attemptId":"8b1f…-uuid"}`, ""},
	{catalog.RealtimeSessionNotify, `{"eventType":"question.created","data":{"any":["json"]}}`, `{"sessionId":99,"userId":123}`},
	{catalog.RealtimeUserNotify, `{"eventType":"ANALYSIS_PROGRESS","data":{"targetType":"RESUME","targetId":42,"phase":"EXTRACTING","message":"..."}}`, `{"userId":123}`},
	{catalog.RealtimeDocumentNotify, `{"eventType":"DOC_STATE","data":{}}`, `{"documentId":101}`},
}

func TestSpecExamplesValidate(t *testing.T) {
	t.Parallel()
	c := catalog.Default()
	for i, ex := range specExamples {
		body := wrap(ex.messageType, ex.payload, ex.context)
		require.NoError(t, c.ValidateStrict(body), "example %d (%s)", i, ex.messageType)
		env, err := envelope.Decode(body)
		require.NoError(t, err)
		_, err = c.DecodePayload(env)
		require.NoError(t, err, "example %d (%s)", i, ex.messageType)
	}
}

func TestEveryTypeIsInTheCatalogWithItsQueue(t *testing.T) {
	t.Parallel()
	c := catalog.Default()
	assert.Len(t, c.Types(), 17)
	for _, typ := range c.Types() {
		assert.Contains(t, []string{catalog.ExchangeCoreToAI, catalog.ExchangeAIToCore, catalog.ExchangeRealtime}, typ.Exchange)
		if typ.Kind == catalog.Request {
			assert.Equal(t, "ai."+typ.Name, typ.Queue)
			assert.NotEmpty(t, typ.Callback)
		}
		if typ.Kind == catalog.Callback {
			assert.Equal(t, "core."+typ.Name, typ.Queue)
		}
	}
	// Every catalog queue is a queue of the provisioned topology, whose
	// routing delivers the type there.
	top, err := stackup.LoadTopology("../../../" + stackup.TopologyFile)
	require.NoError(t, err)
	for _, typ := range c.Types() {
		assert.Equal(t, []string{typ.Queue}, top.Route(typ.Exchange, typ.Name), typ.Name)
	}
}

func TestStatusMissingIsOK(t *testing.T) {
	t.Parallel()
	env, err := envelope.Decode(wrap(catalog.CallbackQuestions, `{"sessionId":99,"kind":"POOL","questions":[{"category":"X","question":"Q?"}]}`, ""))
	require.NoError(t, err)
	p, err := catalog.Default().DecodePayload(env)
	require.NoError(t, err)
	assert.False(t, p.(*catalog.QuestionsCallbackV1).Failed())
}

func TestValidationRefuses(t *testing.T) {
	t.Parallel()
	c := catalog.Default()
	cases := map[string]struct {
		body   []byte
		reason string
	}{
		"unknown type":                     {wrap("analyze.everything", `{}`, ""), "unknown messageType"},
		"unknown version":                  {[]byte(strings.Replace(string(wrap(catalog.AnalyzeResume, `{"resumeId":1,"filePath":"a","analyzedDocumentId":1}`, "")), `"v1"`, `"v2"`, 1)), `version "v2" has no handler`},
		"missing id":                       {wrap(catalog.AnalyzeResume, `{"filePath":"a","analyzedDocumentId":1}`, ""), "field payload.resumeId: required"},
		"absolute file path":               {wrap(catalog.AnalyzeResume, `{"resumeId":1,"filePath":"s3://bucket/a","analyzedDocumentId":1}`, ""), "field payload.filePath: must not match"},
		"bad repo name":                    {wrap(catalog.AnalyzeRepository, `{"repositoryId":7,"repoFullName":"hello","defaultBranch":"main","analyzedDocumentId":1}`, ""), "field payload.repoFullName: must match \"^[^/]+/[^/]+$\" (owner/name)"},
		"bad url":                          {wrap(catalog.AnalyzeWeb, `{"resumeId":1,"url":"file:///etc/passwd","analyzedDocumentId":1}`, ""), "field payload.url: must match"},
		"bad target":                       {wrap(catalog.CallbackAnalysis, `{"targetType":"PHOTO","targetId":1}`, ""), "field payload.targetType: must be one of RESUME, REPOSITORY, WEB, COVER_LETTER"},
		"failed without code":              {wrap(catalog.CallbackFeedback, `{"sessionId":1,"status":"FAILED"}`, ""), "field payload.errorCode: required"},
		"bad kind":                         {wrap(catalog.CallbackQuestions, `{"sessionId":1,"kind":"OTHER"}`, ""), "field payload.kind: must be one of POOL, FOLLOWUP"},
		"followup no question":             {wrap(catalog.CallbackQuestions, `{"sessionId":1,"kind":"FOLLOWUP","answerIntent":"NORMAL"}`, ""), "field payload.followupQuestion: required"},
		"session notify without sessionId": {wrap(catalog.RealtimeSessionNotify, `{"eventType":"X","data":{}}`, `{"userId":1}`), "field context.sessionId: required"},
		"wrong field type":                 {wrap(catalog.AnalyzeResume, `{"resumeId":"42","filePath":"a","analyzedDocumentId":1}`, ""), "field payload.resumeId: want integer, got string"},
	}
	for name, tc := range cases {
		env, err := envelope.Decode(tc.body)
		if err == nil {
			_, err = c.DecodePayload(env)
		}
		require.Error(t, err, name)
		assert.Equal(t, failure.Permanent, failure.Of(err), name)
		assert.Contains(t, err.Error(), tc.reason, name)
		require.Error(t, c.ValidateStrict(tc.body), name)
	}
}

func TestSecretsRefusedOnPublishIgnoredOnConsume(t *testing.T) {
	t.Parallel()
	c := catalog.Default()
	// §5.2: the retired spec carried githubAccessTokenEncrypted.
	body := wrap(catalog.AnalyzeRepository, `{"repositoryId":7,"repoFullName":"octocat/hello-world","defaultBranch":"main","analyzedDocumentId":102,"githubAccessTokenEncrypted":"gAAAA-secret"}`, "")
	err := c.ValidateStrict(body)
	var se *catalog.SecretError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "$.payload.githubAccessTokenEncrypted", se.Path)
	assert.NotContains(t, err.Error(), "gAAAA-secret", "the value is never in an error")

	env, err := envelope.Decode(body)
	require.NoError(t, err)
	p, err := c.DecodePayload(env)
	require.NoError(t, err, "lenient on consume")
	assert.Equal(t, int64(7), p.(*catalog.AnalyzeRepositoryV1).RepositoryID)
	assert.Equal(t, []string{"$.payload.githubAccessTokenEncrypted"}, catalog.SecretFields(body))

	_, _, err = c.Encode(context.Background(), catalog.Outgoing{Type: catalog.RealtimeUserNotify, Publisher: envelope.PublisherCore,
		Payload: &catalog.NotifyV1{EventType: "X", Data: []byte(`{"apiKey":"k"}`)}, Context: envelope.Context{UserID: new(int64(1))}})
	require.ErrorAs(t, err, &se, "not even inside free-form data")
}

func TestEncode(t *testing.T) {
	t.Parallel()
	c := catalog.Default()
	now := time.Date(2026, 4, 27, 15, 0, 0, 0, time.UTC)
	msg, topic, err := c.Encode(context.Background(), catalog.Outgoing{Type: catalog.CallbackAnalysis, Publisher: envelope.PublisherAI,
		Payload: &catalog.AnalysisCallbackV1{TargetType: catalog.TargetResume, TargetID: 42, Status: catalog.StatusFailed, ErrorCode: "X", Retriable: new(false)},
		TraceID: "trace-1", CorrelationID: "req-1", Now: now})
	require.NoError(t, err)
	assert.Equal(t, "stackup.ai-to-core/callback.analysis", topic)
	assert.Equal(t, "req-1", msg.Metadata.Get(envelope.CorrelationIDKey))
	env, err := envelope.DecodeStrict(msg.Payload)
	require.NoError(t, err)
	assert.Equal(t, msg.UUID, env.MessageID)
	assert.Equal(t, "2026-04-27T15:00:00.000Z", env.PublishedAt)
	assert.JSONEq(t, `{"targetType":"RESUME","targetId":42,"status":"FAILED","errorCode":"X","retriable":false}`, string(env.Payload))

	_, _, err = c.Encode(context.Background(), catalog.Outgoing{Type: catalog.AnalyzeResume, Publisher: envelope.PublisherCore, Payload: &catalog.AnalyzeResumeV1{}})
	require.ErrorContains(t, err, "refused")

	// Lists left nil go out as [], nested ones too; the caller's value is
	// not changed.
	req := &catalog.GenerateQuestionsV1{SessionID: 9, Mode: "TECHNICAL", InitialQuestionCount: 2, MaxQuestions: 10,
		Documents: []catalog.SourceDocument{{DocumentID: 1, SourceType: "RESUME", Summary: "s", Markdown: "m"}}}
	msg, _, err = c.Encode(context.Background(), catalog.Outgoing{Type: catalog.GenerateQuestions, Publisher: envelope.PublisherCore, Payload: req})
	require.NoError(t, err)
	env, err = envelope.DecodeStrict(msg.Payload)
	require.NoError(t, err)
	assert.NotContains(t, string(env.Payload), `"recentQuestions":null`)
	assert.Contains(t, string(env.Payload), `"techStack":[]`)
	assert.Contains(t, string(env.Payload), `"jobCategories":[]`)
	assert.Nil(t, req.JobCategories)
	assert.Nil(t, req.Documents[0].TechStack)
}

func TestWith(t *testing.T) {
	t.Parallel()
	type v2 struct{ catalog.AnalyzeResumeV1 }
	c, err := catalog.Default().With(catalog.AnalyzeResume, catalog.Schema{Version: "v2", New: func() catalog.Payload { return &catalog.AnalyzeResumeV1{} }})
	require.NoError(t, err)
	typ, _ := c.Type(catalog.AnalyzeResume)
	assert.Len(t, typ.Versions, 2)
	orig, _ := catalog.Default().Type(catalog.AnalyzeResume)
	assert.Len(t, orig.Versions, 1, "Default is not changed")
	_, err = catalog.Default().With("nope", catalog.Schema{Version: "v2", New: func() catalog.Payload { return &v2{} }})
	require.Error(t, err)
}

func TestPolicyFor(t *testing.T) {
	t.Parallel()
	top, err := stackup.LoadTopology("../../../" + stackup.TopologyFile)
	require.NoError(t, err)
	p, err := catalog.PolicyFor(top, "ai.generate.questions", catalog.Retry{})
	require.NoError(t, err)
	assert.Equal(t, route.Policy{MaxAttempts: 3, Redelivery: route.InProcess, Backoff: catalog.DefaultRetry().Backoff,
		OnPermanent: route.DeadLetter, DeadLetterQueue: "dlq.ai.generate.questions"}, p)
	_, err = catalog.PolicyFor(top, "nope", catalog.Retry{})
	require.Error(t, err)
	assert.True(t, errors.Is(fmt.Errorf("x: %w", catalog.ErrNotConfigured), catalog.ErrNotConfigured))
}

// TestBadBodiesPerType: every message type's payload, valid and then broken
// one way each — a required field missing, a field of the wrong type, a
// value outside its enum — is refused permanently with the field named; an
// unknown field is accepted on consume and not kept (re-encoding the decoded
// payload cannot forward it).
func TestBadBodiesPerType(t *testing.T) {
	t.Parallel()
	c := catalog.Default()
	session := `{"userId":1,"sessionId":9}`
	cases := []struct {
		messageType, valid, context string
		missing, wrongType, badEnum [2]string // [payload, the error's field and reason]
	}{
		{catalog.AnalyzeResume, `{"resumeId":1,"filePath":"a/b.pdf","analyzedDocumentId":2}`, "",
			[2]string{`{"filePath":"a/b.pdf","analyzedDocumentId":2}`, "field payload.resumeId: required"},
			[2]string{`{"resumeId":1,"filePath":7,"analyzedDocumentId":2}`, "field payload.filePath: want string, got number"}, [2]string{}},
		{catalog.AnalyzeCoverLetter, `{"coverLetterId":1,"filePath":"a/b.pdf","analyzedDocumentId":2}`, "",
			[2]string{`{"coverLetterId":1,"filePath":"a/b.pdf"}`, "field payload.analyzedDocumentId: required"},
			[2]string{`{"coverLetterId":true,"filePath":"a/b.pdf","analyzedDocumentId":2}`, "field payload.coverLetterId: want integer, got boolean"}, [2]string{}},
		{catalog.AnalyzeRepository, `{"repositoryId":1,"repoFullName":"o/n","defaultBranch":"main","analyzedDocumentId":2}`, "",
			[2]string{`{"repositoryId":1,"repoFullName":"o/n","analyzedDocumentId":2}`, "field payload.defaultBranch: required"},
			[2]string{`{"repositoryId":1.5,"repoFullName":"o/n","defaultBranch":"main","analyzedDocumentId":2}`, "field payload.repositoryId: want integer, got number"}, [2]string{}},
		{catalog.AnalyzeWeb, `{"resumeId":1,"url":"https://example.com","analyzedDocumentId":2}`, "",
			[2]string{`{"resumeId":1,"analyzedDocumentId":2}`, "field payload.url: required"},
			[2]string{`{"resumeId":1,"url":["https://example.com"],"analyzedDocumentId":2}`, "field payload.url: want string, got array"}, [2]string{}},
		{catalog.CallbackAnalysis, `{"targetType":"RESUME","targetId":1,"status":"ANALYZED"}`, "",
			[2]string{`{"targetType":"RESUME","status":"ANALYZED"}`, "field payload.targetId: required"},
			[2]string{`{"targetType":"RESUME","targetId":1,"techStack":"Go"}`, "field payload.techStack: want array, got string"},
			[2]string{`{"targetType":"RESUME","targetId":1,"status":"DONE"}`, "field payload.status: must be one of ANALYZED, OK, FAILED"}},
		{catalog.GenerateQuestions, `{"sessionId":9,"mode":"TECHNICAL"}`, session,
			[2]string{`{"sessionId":9}`, "field payload.mode: required"},
			[2]string{`{"sessionId":9,"mode":"TECHNICAL","maxQuestions":"10"}`, "field payload.maxQuestions: want integer, got string"}, [2]string{}},
		{catalog.GenerateFollowup, `{"sessionId":9,"parentMessageId":1,"answerMessageId":2,"mode":"TECHNICAL"}`, session,
			[2]string{`{"sessionId":9,"parentMessageId":1,"mode":"TECHNICAL"}`, "field payload.answerMessageId: required"},
			[2]string{`{"sessionId":9,"parentMessageId":1,"answerMessageId":2,"mode":"TECHNICAL","contextDocumentIds":[1,"2"]}`, "field payload.contextDocumentIds[1]: want integer, got string"}, [2]string{}},
		{catalog.GenerateFeedback, `{"sessionId":9,"mode":"TECHNICAL"}`, session,
			[2]string{`{"mode":"TECHNICAL"}`, "field payload.sessionId: required"},
			[2]string{`{"sessionId":9,"mode":"TECHNICAL","messages":{}}`, "field payload.messages: want array, got object"}, [2]string{}},
		{catalog.AnalyzeVoice, `{"sessionId":9,"messageId":1,"audioS3Key":"a/b.webm","contentType":"audio/webm"}`, session,
			[2]string{`{"sessionId":9,"messageId":1,"audioS3Key":"a/b.webm"}`, "field payload.contentType: required"},
			[2]string{`{"sessionId":9,"messageId":"1","audioS3Key":"a/b.webm","contentType":"audio/webm"}`, "field payload.messageId: want integer, got string"}, [2]string{}},
		{catalog.GenerateTTS, `{"sessionId":9,"messageId":1,"text":"q?"}`, session,
			[2]string{`{"sessionId":9,"messageId":1}`, "field payload.text: required"},
			[2]string{`{"sessionId":9,"messageId":1,"text":{}}`, "field payload.text: want string, got object"}, [2]string{}},
		{catalog.CallbackQuestions, `{"sessionId":9,"kind":"POOL","questions":[]}`, "",
			[2]string{`{"kind":"POOL"}`, "field payload.sessionId: required"},
			[2]string{`{"sessionId":9,"kind":"POOL","questions":"q"}`, "field payload.questions: want array, got string"},
			[2]string{`{"sessionId":9,"kind":"POOL","status":"DONE"}`, "field payload.status: must be one of OK, FAILED"}},
		{catalog.CallbackFeedback, `{"sessionId":9,"overallScore":70}`, "",
			[2]string{`{"overallScore":70}`, "field payload.sessionId: required"},
			[2]string{`{"sessionId":9,"overallScore":"70"}`, "field payload.overallScore: want null or number, got string"},
			[2]string{`{"sessionId":9,"status":"DONE"}`, "field payload.status: must be one of OK, FAILED"}},
		{catalog.CallbackVoice, `{"sessionId":9,"interviewMessageId":1}`, "",
			[2]string{`{"sessionId":9}`, "field payload.interviewMessageId: required"},
			[2]string{`{"sessionId":9,"interviewMessageId":1,"transcript":7}`, "field payload.transcript: want null or string, got number"}, [2]string{}},
		{catalog.CallbackTTS, `{"sessionId":9,"messageId":1,"status":"SUCCEEDED","audioKey":"a/b.mp3"}`, "",
			[2]string{`{"sessionId":9,"messageId":1,"status":"SUCCEEDED"}`, "field payload.audioKey: required"},
			[2]string{`{"sessionId":9,"messageId":1,"audioKey":"a/b.mp3","durationSec":"4"}`, "field payload.durationSec: want null or number, got string"},
			[2]string{`{"sessionId":9,"messageId":1,"status":"OK","audioKey":"a/b.mp3"}`, "field payload.status: must be one of SUCCEEDED, FAILED"}},
		{catalog.RealtimeSessionNotify, `{"eventType":"X","data":{"a":1}}`, session,
			[2]string{`{"data":{}}`, "field payload.eventType: required"},
			[2]string{`{"eventType":1}`, "field payload.eventType: want string, got number"}, [2]string{}},
		{catalog.RealtimeUserNotify, `{"eventType":"X","data":{}}`, `{"userId":1}`,
			[2]string{`{}`, "field payload.eventType: required"},
			[2]string{`{"eventType":null}`, "field payload.eventType: want string, got null"}, [2]string{}},
		{catalog.RealtimeDocumentNotify, `{"eventType":"X","data":{}}`, `{"documentId":1}`,
			[2]string{`{}`, "field payload.eventType: required"},
			[2]string{`{"eventType":[]}`, "field payload.eventType: want string, got array"}, [2]string{}},
	}
	tested := map[string]bool{}
	for _, tc := range cases {
		tested[tc.messageType] = true
		decode := func(payload string) (catalog.Payload, error) {
			env, err := envelope.Decode(wrap(tc.messageType, payload, tc.context))
			if err != nil {
				return nil, err
			}
			return c.DecodePayload(env)
		}
		_, err := decode(tc.valid)
		require.NoError(t, err, tc.messageType)
		for _, bad := range [][2]string{tc.missing, tc.wrongType, tc.badEnum} {
			if bad[0] == "" {
				continue
			}
			_, err := decode(bad[0])
			require.Error(t, err, "%s %s", tc.messageType, bad[0])
			assert.Equal(t, failure.Permanent, failure.Of(err), tc.messageType)
			assert.Contains(t, err.Error(), bad[1], "%s %s", tc.messageType, bad[0])
		}
		unknown := strings.Replace(tc.valid, "{", `{"zzUnknown":"forward-me",`, 1)
		p, err := decode(unknown)
		require.NoError(t, err, "%s: an unknown field is ignored on consume", tc.messageType)
		out, err := json.Marshal(p)
		require.NoError(t, err)
		assert.NotContains(t, string(out), "forward-me", "%s: and not kept", tc.messageType)
		require.Error(t, c.ValidateStrict(wrap(tc.messageType, unknown, tc.context)), "%s: publishers may not add it", tc.messageType)
	}
	for _, typ := range c.Types() {
		assert.True(t, tested[typ.Name], "no bad bodies for %s", typ.Name)
	}
}
