package schemas_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/app/schemas"
	"github.com/eventpipe/eventpipe/handlers/booking"
	"github.com/eventpipe/eventpipe/handlers/disputes"
	"github.com/eventpipe/eventpipe/handlers/interviews"
	"github.com/eventpipe/eventpipe/handlers/joinlink"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/envelope"
)

// fixture is one body on one queue. A valid one must pass both the schema
// (strict) and the queue's route.Validate, the check `eventpipe publish`
// runs; goOnly, on an invalid one, says why only the Go check can refuse it.
type fixture struct {
	name, queue string
	body        []byte
	goOnly      string
}

// TestSchemasAgreeWithGoValidation runs every fixture — the specs' own
// examples, the sample generators' bodies, the handlers' fuzz seeds — and
// every mutation of the valid ones (a field removed, set to null, to another
// type, to an empty string, to 0, -1 or 1.5, an unknown field added) through
// the queue's strict schema and the route's Go validation. They must agree,
// except where a known rule says why they may not (knownDifference): each
// such rule is a thing a JSON Schema cannot say, or a quirk of Go's decoder
// that the contract does not adopt.
func TestSchemasAgreeWithGoValidation(t *testing.T) {
	t.Parallel()
	cat, err := schemas.Load()
	require.NoError(t, err)
	routes := app.Catalog()
	check := func(t *testing.T, f fixture) (goErr, schemaErr error) {
		t.Helper()
		r, err := routes.ByQueue(f.queue)
		require.NoError(t, err, f.queue)
		return r.Validate(f.body), cat.ValidateQueue(f.queue, f.body, schemas.Strict)
	}

	valid := validFixtures(t)
	covered := map[string]bool{}
	for _, f := range valid {
		goErr, schemaErr := check(t, f)
		require.NoError(t, goErr, "%s: the Go check refuses a valid fixture: %s", f.name, f.body)
		require.NoError(t, schemaErr, "%s: the schema refuses a valid fixture: %s", f.name, f.body)
		for _, m := range cat.ByQueue(f.queue) {
			if m.Validate(f.body, schemas.Strict) == nil {
				covered[m.Spec+"/"+m.Name] = true
			}
		}
	}
	for _, m := range cat.Messages() {
		require.True(t, covered[m.Spec+"/"+m.Name], "no valid fixture of %s/%s", m.Spec, m.Name)
	}

	for _, f := range append(invalidFixtures(t), fuzzSeeds(t)...) {
		goErr, schemaErr := check(t, f)
		switch {
		case f.goOnly != "":
			require.Error(t, goErr, "%s: marked go-only, but the Go check accepts it", f.name)
			require.NoError(t, schemaErr, "%s: marked go-only (%s), but the schema refuses it now: drop the mark", f.name, f.goOnly)
		default:
			require.Equal(t, goErr == nil, schemaErr == nil, "%s: Go says %v, the schema says %v: %s", f.name, goErr, schemaErr, f.body)
		}
	}

	mutations, differences := 0, map[string]int{}
	for _, f := range valid {
		for _, mu := range mutate(t, f.body) {
			mf := fixture{name: f.name + " " + mu.what, queue: f.queue, body: mu.body}
			goErr, schemaErr := check(t, mf)
			mutations++
			if (goErr == nil) == (schemaErr == nil) {
				continue
			}
			why := knownDifference(f, mu, goErr == nil)
			if why == "" {
				t.Errorf("%s: Go says %v, the schema says %v: %s", mf.name, goErr, schemaErr, mu.body)
				continue
			}
			differences[why]++
		}
	}
	t.Logf("%d valid fixtures, %d mutations; known differences: %v", len(valid), mutations, differences)
}

// TestLenientSchemasIgnoreUnknownFields: an unknown field anywhere a strict
// schema refuses one is accepted by the lenient schema and by the consumer's
// Go decoder, as both rulings say (strict on publish, lenient on consume).
func TestLenientSchemasIgnoreUnknownFields(t *testing.T) {
	t.Parallel()
	cat, err := schemas.Load()
	require.NoError(t, err)
	routes := app.Catalog()
	tried := 0
	for _, f := range validFixtures(t) {
		for _, mu := range mutate(t, f.body) {
			if !strings.HasPrefix(mu.what, "unknown") {
				continue
			}
			if cat.ValidateQueue(f.queue, mu.body, schemas.Strict) == nil {
				continue // an open object (data, voiceAnalysisSummary, an S3 record)
			}
			tried++
			require.NoError(t, cat.ValidateQueue(f.queue, mu.body, schemas.Lenient), "%s %s", f.name, mu.what)
			require.NoError(t, consumerDecode(t, f.queue, mu.body), "%s %s: the consumer's decoder", f.name, mu.what)
			r, err := routes.ByQueue(f.queue)
			require.NoError(t, err)
			require.Error(t, r.Validate(mu.body), "%s %s: the publish check must refuse it", f.name, mu.what)
		}
	}
	require.Greater(t, tried, 50)
}

// consumerDecode is what the consumer of queue decodes a body with.
func consumerDecode(t *testing.T, queue string, body []byte) error {
	t.Helper()
	switch queue {
	case interviews.InterviewCompletedQueue:
		_, err := interviews.DecodeInterviewEvent(body)
		return err
	case interviews.ReportGenerateQueue:
		_, err := interviews.DecodeReportGenerate(body)
		return err
	case disputes.DomainEventsQueue:
		_, _, err := disputes.DecodeEvent(body)
		return err
	case disputes.IngestQueue:
		_, err := disputes.DecodeS3Notification(body)
		return err
	case booking.Queue:
		_, err := booking.Decode(body)
		return err
	case joinlink.Queue:
		_, err := joinlink.Decode(body)
		return err
	default:
		env, err := envelope.Decode(body)
		if err != nil {
			return err
		}
		_, err = catalog.Default().DecodePayload(env)
		return err
	}
}

// knownDifference says why Go and the schema may disagree on a mutation of
// f, or "" when they must not.
func knownDifference(f fixture, mu mutation, goAccepts bool) string {
	// The StackUp check reads the body with the schema itself since the
	// consumers do (decision 0030): encoding/json's null-as-zero and the
	// empty status are no longer differences.
	switch {
	case f.queue == booking.Queue && !goAccepts && !derivedID(mu.body):
		return "eventId must be deriveEventId of the event: a hash no schema can compute"
	}
	return ""
}

// derivedID reports whether a booking body's eventId is the one its event
// derives.
func derivedID(body []byte) bool {
	ev, err := booking.Decode(body)
	if err != nil {
		return true // not this rule's business
	}
	id, err := booking.DeriveEventID(ev)
	return err != nil || id == ev.EventID
}

// --- mutations ----------------------------------------------------------

type mutation struct {
	what string
	path []any
	body []byte
}

func pathString(path []any) string {
	var b strings.Builder
	b.WriteString("$")
	for _, p := range path {
		if i, ok := p.(int); ok {
			fmt.Fprintf(&b, "[%d]", i)
		} else {
			fmt.Fprintf(&b, ".%s", p)
		}
	}
	return b.String()
}

// mutate returns body changed in one place each: every field removed, set
// to null, to a value of another type, strings emptied or blanked, numbers
// set to 0, -1 and 1.5; an unknown field added to every object.
func mutate(t *testing.T, body []byte) []mutation {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var root any
	require.NoError(t, dec.Decode(&root))
	var out []mutation
	add := func(what string, path []any, replace func(any) (any, bool)) {
		doc := deepCopy(root)
		doc, ok := edit(doc, path, replace)
		if !ok {
			return
		}
		b, err := json.Marshal(doc)
		require.NoError(t, err)
		out = append(out, mutation{what: what + " " + pathString(path), path: slices.Clone(path), body: b})
	}
	var walk func(v any, path []any)
	walk = func(v any, path []any) {
		switch x := v.(type) {
		case map[string]any:
			add("unknown", path, func(o any) (any, bool) {
				o.(map[string]any)["zzUnknownField"] = 1
				return o, true
			})
			for k, e := range x {
				p := append(slices.Clone(path), k)
				add("delete", p, func(any) (any, bool) { return deleted{}, true })
				walk(e, p)
			}
		case []any:
			for i, e := range x {
				walk(e, append(slices.Clone(path), i))
			}
		}
		if len(path) == 0 {
			return
		}
		add("null", path, func(any) (any, bool) { return nil, true })
		switch v.(type) {
		case string:
			add("empty", path, func(any) (any, bool) { return "", true })
			add("blank", path, func(any) (any, bool) { return " ", true })
			add("number", path, func(any) (any, bool) { return json.Number("7"), true })
		case json.Number:
			for _, n := range []string{"0", "-1", "1.5"} {
				add("set "+n, path, func(any) (any, bool) { return json.Number(n), true })
			}
			add("string", path, func(any) (any, bool) { return "7", true })
		case bool:
			add("string", path, func(any) (any, bool) { return "true", true })
		case []any, map[string]any:
			add("string", path, func(any) (any, bool) { return "x", true })
		}
	}
	walk(root, nil)
	return out
}

type deleted struct{}

// edit replaces the value at path with replace's result; deleted{} removes
// it from its object.
func edit(doc any, path []any, replace func(any) (any, bool)) (any, bool) {
	if len(path) == 0 {
		return replace(doc)
	}
	switch x := doc.(type) {
	case map[string]any:
		k := path[0].(string)
		v, ok := edit(x[k], path[1:], replace)
		if !ok {
			return nil, false
		}
		if _, del := v.(deleted); del {
			delete(x, k)
		} else {
			x[k] = v
		}
		return x, true
	case []any:
		i := path[0].(int)
		v, ok := edit(x[i], path[1:], replace)
		if !ok {
			return nil, false
		}
		if _, del := v.(deleted); del {
			return append(x[:i], x[i+1:]...), true
		}
		x[i] = v
		return x, true
	}
	return nil, false
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopy(e)
		}
		return out
	}
	return v
}

// --- fixtures -----------------------------------------------------------

// recorder is a publisher that keeps what the sample producers send.
type recorder struct{ msgs []*message.Message }

func (r *recorder) Publish(_ string, msgs ...*message.Message) error {
	r.msgs = append(r.msgs, msgs...)
	return nil
}

func (r *recorder) Close() error { return nil }

func validFixtures(t *testing.T) []fixture {
	t.Helper()
	var out []fixture
	add := func(name, queue string, body []byte) {
		out = append(out, fixture{name: name, queue: queue, body: body})
	}
	at := time.Date(2026, 11, 12, 9, 14, 3, 512e6, time.UTC)

	// interviews: the producers' bodies, and the spec's report.generate.
	rec := &recorder{}
	p := interviews.NewProducer(rec, slog.New(slog.DiscardHandler))
	org, iv := interviews.NewObjectID(), interviews.NewObjectID()
	_, err := p.PublishInterviewCompleted(context.Background(), interviews.InterviewCompleted{InterviewID: iv, OrganizationID: org, CompletedAt: at, DurationSeconds: 754})
	require.NoError(t, err)
	_, err = p.PublishInterviewFailed(context.Background(), interviews.InterviewFailed{Type: interviews.EventInterviewFailed, InterviewID: iv, OrganizationID: org, FailureReason: "bot disconnected", FailedAt: at})
	require.NoError(t, err)
	require.Len(t, rec.msgs, 2)
	add("interviews producer interview.completed", interviews.InterviewCompletedQueue, rec.msgs[0].Payload)
	add("interviews producer interview.failed", interviews.InterviewCompletedQueue, rec.msgs[1].Payload)
	add("interviews spec report.generate", interviews.ReportGenerateQueue, []byte(`{"interviewId":"`+iv+`","organizationId":"`+org+`"}`))

	// disputes: the encoder's envelopes of the three events, S3's notification.
	tat := at.Add(120 * time.Hour)
	for _, ev := range []struct {
		ev  disputes.Event
		agg string
	}{
		{disputes.Event{DisputeRaised: &disputes.DisputeRaised{TxnID: "txn_01", ReasonCode: "credit_not_received", TATDueAt: &tat, Rail: disputes.RailUPI}}, "dsp_01JD3K5Z7M2B8C4D6F8H0J2K4L"},
		{disputes.Event{TransactionFlagged: &disputes.TransactionFlagged{TxnID: "txn_02", RiskScore: 85.5, Reason: "velocity"}}, "txn_02"},
		{disputes.Event{DocumentIngested: &disputes.DocumentIngested{Bucket: "kb", Key: "docs/runbook.md"}}, "doc_01"},
	} {
		env, err := disputes.NewEnvelope(ev.ev, ev.agg, "4bf92f3577b34da6a3ce929d0e0e4736", at)
		require.NoError(t, err)
		body, err := disputes.Encode(env)
		require.NoError(t, err)
		add("disputes encoder "+env.EventType, disputes.DomainEventsQueue, body)
	}
	add("disputes S3 notification", disputes.IngestQueue, disputes.S3Notification("kb", "docs/run book+1.md", at))
	add("disputes S3 test event", disputes.IngestQueue, []byte(`{"Service":"Amazon S3","Event":"s3:TestEvent","Time":"2026-11-12T09:14:03.512Z","Bucket":"kb","RequestId":"R","HostId":"H"}`))

	// booking: the encoder's events, with and without the optional fields.
	for i, ev := range []booking.Event{
		{BookingSessionID: "bks_7f3a", Type: booking.TypeStepCompleted, OccurredAt: at, StepID: "pick-slot", Data: json.RawMessage(`{"slot":"10:00","durationMinutes":30}`)},
		{BookingSessionID: "bks_7f3a", Type: booking.TypeBookingAbandoned, OccurredAt: at},
	} {
		id, err := booking.DeriveEventID(ev)
		require.NoError(t, err)
		ev.EventID = id
		body, err := booking.Encode(ev)
		require.NoError(t, err)
		add(fmt.Sprintf("booking encoder %d", i), booking.Queue, body)
	}

	// join-link: the encoder's message, with and without the optional fields.
	for i, d := range []joinlink.Data{{ProgramSessionID: 42, Role: "attendee", BatchSize: 50, ActorUserID: 7}, {ProgramSessionID: 9}} {
		body, err := joinlink.Encode(joinlink.NewMessage(d, at))
		require.NoError(t, err)
		add(fmt.Sprintf("joinlink encoder %d", i), joinlink.Queue, body)
	}

	// StackUp: the contract's own section 5 examples and section 9's smoke
	// message, in full envelopes.
	for _, ex := range stackupExamples {
		body := stackupEnvelope(ex.messageType, ex.payload, ex.context)
		add("stackup "+ex.name, queueOf(t, ex.messageType), body)
	}
	add("stackup section 9 smoke", "ai.analyze.resume", []byte(`{"messageId":"smoke-1","messageType":"analyze.resume","version":"v1","traceId":"local-test","publishedAt":"2026-04-27T15:00:00Z","publisher":"manual","payload":{"resumeId":1,"filePath":"resumes/raw/1/test.pdf","analyzedDocumentId":1},"context":{"userId":1}}`))
	return out
}

func queueOf(t *testing.T, messageType string) string {
	t.Helper()
	typ, ok := catalog.Default().Type(messageType)
	require.True(t, ok, messageType)
	return typ.Queue
}

func stackupEnvelope(messageType, payload, context string) []byte {
	if context == "" {
		context = `{"userId":123}`
	}
	return []byte(`{"messageId":"0b7c2f4e-3a1d-4c5e-9f60-1d2e3f4a5b6c","messageType":"` + messageType +
		`","version":"v1","traceId":"9f4e5b2a","publishedAt":"2026-04-27T15:00:00Z","publisher":"core-server","payload":` +
		payload + `,"context":` + context + `}`)
}

// stackupExamples are the StackUp contract's section 5 examples (ids and
// texts as the contract gives them, "..." kept), one per message type and
// outcome.
var stackupExamples = []struct{ name, messageType, payload, context string }{
	{"5.1 analyze.resume", "analyze.resume", `{"resumeId":42,"filePath":"resumes/raw/123/abc.pdf","analyzedDocumentId":101}`, ""},
	{"5.2 analyze.repository", "analyze.repository", `{"repositoryId":7,"repoFullName":"octocat/hello-world","defaultBranch":"main","analyzedDocumentId":102}`, ""},
	{"5.3 analyze.web", "analyze.web", `{"resumeId":42,"url":"https://example.com/me","analyzedDocumentId":103}`, ""},
	{"analyze.cover_letter (extension)", "analyze.cover_letter", `{"coverLetterId":5,"filePath":"cover-letters/raw/123/c.pdf","analyzedDocumentId":104}`, ""},
	{"5.4 callback.analysis", "callback.analysis", `{"targetType":"RESUME","targetId":42,"status":"ANALYZED","summary":"Java/Spring 3년차, 결제 시스템 개발...","techStack":["Java","Spring Boot","PostgreSQL"],"documentPath":"analyzed/resume/42/summary.md","embeddingChunkCount":18}`, "{}"},
	{"5.5 callback.analysis failed", "callback.analysis", `{"targetType":"RESUME","targetId":42,"status":"FAILED","errorCode":"PDF_PARSE_FAILED","errorMessage":"PDF에 텍스트 레이어가 없습니다","retriable":false}`, "{}"},
	{"5.6 generate.questions", "generate.questions", `{"sessionId":99,"mode":"JOB_TAILORED","jobCategories":["BACKEND","FRONTEND"],"documents":[{"documentId":42,"sourceType":"RESUME","summary":"...","techStack":["..."],"markdown":"..."}],"initialQuestionCount":2,"maxQuestions":10,"recentQuestions":["이전 면접 질문 텍스트","..."],"selfIntroAnswer":"안녕하세요, 결제 시스템을 만든 백엔드 3년차입니다…","targetCompanyName":"토스","targetJobDescription":"Kotlin/Spring 백엔드, 대용량 결제 시스템 경험 우대 …","focusAreas":["LOGIC","COMMUNICATION"]}`, `{"userId":123,"sessionId":99}`},
	{"5.7 callback.questions pool", "callback.questions", `{"sessionId":99,"kind":"POOL","questions":[{"category":"PROJECT_DEEP_DIVE","question":"...","jobCategory":"BACKEND","targetEvidence":"이력서: 결제 시스템에서 재고 차감 동시성 문제를 낙관적 락으로 해결","expectedSignal":"락 전략 선택의 트레이드오프를 DB 레벨까지 설명하는지"},{"category":"CS_FUNDAMENTAL","question":"...","jobCategory":null,"targetEvidence":"","expectedSignal":""}],"status":"OK"}`, "{}"},
	{"5.7 callback.questions pool failed", "callback.questions", `{"sessionId":99,"kind":"POOL","questions":[],"status":"FAILED","errorCode":"GENERATION_FAILED","errorMessage":"...","retriable":true}`, "{}"},
	{"5.8 generate.followup", "generate.followup", `{"sessionId":99,"parentMessageId":501,"answerMessageId":502,"previousQuestion":"...","answerText":"...","mode":"TECHNICAL","jobCategory":"BACKEND","contextDocumentIds":[12,13],"parentCategory":"PROJECT_DEEP_DIVE","parentExpectedSignal":"동시성 제어를 DB 레벨까지 설명하는지","followupMessageId":503,"history":[{"role":"INTERVIEWER","content":"..."}]}`, ""},
	{"5.9 callback.questions followup", "callback.questions", `{"sessionId":99,"kind":"FOLLOWUP","parentMessageId":502,"followupMessageId":503,"answerIntent":"NORMAL","followupQuestion":"...","answerEvaluation":{"specificity":3.5,"logic":4.0,"structure":"PARTIAL_STAR","correctness":null},"status":"OK"}`, "{}"},
	{"5.9 callback.questions followup failed", "callback.questions", `{"sessionId":99,"kind":"FOLLOWUP","parentMessageId":502,"answerMessageId":502,"followupMessageId":503,"followupQuestion":"","status":"FAILED","errorCode":"GENERATION_FAILED","errorMessage":"...","retriable":true}`, "{}"},
	{"5.9a generate.tts", "generate.tts", `{"sessionId":99,"messageId":502,"text":"당신의 프로젝트에서 가장 어려웠던 점은 무엇인가요?","mode":"TECHNICAL","jobCategory":"BACKEND"}`, `{"userId":123,"sessionId":99}`},
	{"5.9b callback.tts", "callback.tts", `{"sessionId":99,"messageId":502,"status":"SUCCEEDED","audioKey":"interview/tts/99/502.mp3","durationSec":4.2,"errorCode":null}`, "{}"},
	{"5.9b callback.tts failed", "callback.tts", `{"sessionId":99,"messageId":502,"status":"FAILED","audioKey":null,"durationSec":null,"errorCode":"TTS_API_ERROR"}`, "{}"},
	{"5.9c analyze.voice", "analyze.voice", `{"sessionId":99,"messageId":502,"parentQuestionMessageId":501,"audioS3Key":"interview/answers/99/502.webm","contentType":"audio/webm","previousQuestionText":"...","mode":"TECHNICAL","jobCategory":"BACKEND"}`, `{"userId":123,"sessionId":99}`},
	{"5.9d callback.voice", "callback.voice", `{"sessionId":99,"interviewMessageId":502,"transcript":"네, 저는 결제 시스템에서...","speakingRateWpm":142.0,"silenceDurationSec":8.2,"fillerWordCounts":{"음":5,"어":3},"pronunciationAccuracy":0.93,"errorCode":null}`, "{}"},
	{"5.10 generate.feedback", "generate.feedback", `{"sessionId":99,"mode":"JOB_TAILORED","jobCategory":"BACKEND","attemptId":"8b1f…-uuid","messages":[{"id":1,"sequenceNumber":1,"role":"INTERVIEWER","content":"자기소개…","category":"SELF_INTRODUCTION"},{"id":2,"sequenceNumber":2,"role":"INTERVIEWEE","content":"…","parentMessageId":1}],"targetCompanyName":"토스","targetJobDescription":"Kotlin/Spring 백엔드, 대용량 결제 …","voiceAnalysisSummary":{"avgWpm":140}}`, ""},
	{"5.11 callback.feedback", "callback.feedback", `{"sessionId":99,"overallScore":76.5,"technicalAccuracy":80.0,"logicScore":72.0,"communicationScore":78.0,"strengthsSummary":"...","weaknessesSummary":"...","improvementKeywords":["JPA 영속성 컨텍스트","TCP 3-way handshake"],"studyPlan":["..."],"highlights":["결론부터 말하는 답변 구조","동시성 제어 경험"],"answerCoaching":[{"messageId":203,"modelAnswer":"이 질문에 강한 답변 예시…","answerRewrite":"내 답변을 이렇게 고치면…","coachingComment":"결론을 먼저 말하세요."}],"panelBreakdown":[{"evaluator":"백엔드","dimension":"기술 정확도·깊이","score":80.0,"detail":"...","scoreRationale":"..."},{"evaluator":"첫인상","dimension":"자기소개 전달력·구성·직무적합성","score":78.0,"detail":"...","scoreRationale":"..."}],"reportS3Key":"feedback/99/report.md"}`, "{}"},
	{"5.11 callback.feedback failed", "callback.feedback", `{"sessionId":99,"status":"FAILED","errorCode":"UNEXPECTED","errorMessage":"...","retriable":true,"attemptId":"8b1f…-uuid"}`, "{}"},
	{"5.12 realtime.session.notify", "realtime.session.notify", `{"eventType":"question.created","data":{"questionId":1}}`, `{"sessionId":99,"userId":123}`},
	{"5.12-1 realtime.session.notify delta", "realtime.session.notify", `{"eventType":"SESSION_MESSAGE_DELTA","data":{"messageId":503,"seq":1,"text":"그"}}`, `{"sessionId":99}`},
	{"5.13 realtime.user.notify progress", "realtime.user.notify", `{"eventType":"ANALYSIS_PROGRESS","data":{"targetType":"RESUME","targetId":42,"phase":"EXTRACTING","message":"..."}}`, `{"userId":123}`},
	{"5.13 realtime.document.notify", "realtime.document.notify", `{"eventType":"DOC_STATE","data":{"status":"ANALYZED"}}`, `{"documentId":101,"userId":123}`},
}

// invalidFixtures are bodies the Go check refuses, each for one reason; the
// goOnly ones for a reason a JSON Schema cannot state.
func invalidFixtures(t *testing.T) []fixture {
	t.Helper()
	at := time.Date(2026, 11, 12, 9, 14, 3, 512e6, time.UTC)
	ev := booking.Event{BookingSessionID: "bks_7f3a", Type: booking.TypeStepCompleted, OccurredAt: at}
	id, err := booking.DeriveEventID(ev)
	require.NoError(t, err)
	ev.EventID = id
	goodBooking, err := booking.Encode(ev)
	require.NoError(t, err)
	wrongID := strings.Replace(string(goodBooking), id, "bse_"+strings.Repeat("0", 64), 1)

	oid := "65a1b2c3d4e5f60718293a4b"
	return []fixture{
		{name: "interviews not an object", queue: interviews.InterviewCompletedQueue, body: []byte(`null`)},
		{name: "interviews array", queue: interviews.InterviewCompletedQueue, body: []byte(`[]`)},
		{name: "interviews type key takes the failed path", queue: interviews.InterviewCompletedQueue,
			body: []byte(`{"type":"interview.completed","interviewId":"` + oid + `","organizationId":"` + oid + `","completedAt":"2026-11-12T09:14:03Z","durationSeconds":60}`)},
		{name: "interviews negative duration", queue: interviews.InterviewCompletedQueue,
			body: []byte(`{"interviewId":"` + oid + `","organizationId":"` + oid + `","completedAt":"2026-11-12T09:14:03Z","durationSeconds":-1}`)},
		{name: "interviews not a datetime", queue: interviews.InterviewCompletedQueue,
			body: []byte(`{"interviewId":"` + oid + `","organizationId":"` + oid + `","completedAt":"yesterday","durationSeconds":1}`)},
		{name: "booking eventId not the derived one", queue: booking.Queue, body: []byte(wrongID),
			goOnly: "eventId must be deriveEventId of the event: a hash no schema can compute"},
		{name: "joinlink correlationId of another session", queue: joinlink.Queue,
			body:   []byte(`{"queueType":"EVENT","subType":"JOIN_LINK_GENERATION","timestamp":"2026-11-12T09:14:03.512Z","correlationId":"join-link-8","data":{"programSessionId":9}}`),
			goOnly: "correlationId must be join-link-<data.programSessionId>: a cross-field equality"},
		{name: "stackup initialQuestionCount over maxQuestions", queue: "ai.generate.questions",
			body:   stackupEnvelope("generate.questions", `{"sessionId":99,"mode":"TECHNICAL","initialQuestionCount":11,"maxQuestions":10}`, ""),
			goOnly: "initialQuestionCount <= maxQuestions is a comparison of two fields"},
		{name: "stackup secret inside realtime data", queue: "q.realtime.session.notify",
			body:   stackupEnvelope("realtime.session.notify", `{"eventType":"X","data":{"accessToken":"t"}}`, `{"sessionId":1}`),
			goOnly: "the section 5.2 secrets rule reads key names inside free-form JSON (data)"},
		{name: "stackup secret in the envelope", queue: "ai.analyze.resume",
			body: []byte(`{"messageId":"m","messageType":"analyze.resume","version":"v1","traceId":"t","publishedAt":"2026-04-27T15:00:00Z","publisher":"core-server","githubAccessTokenEncrypted":"x","payload":{"resumeId":1,"filePath":"a/b.pdf","analyzedDocumentId":1}}`)},
		{name: "stackup type of another queue", queue: "ai.analyze.resume",
			body: stackupEnvelope("analyze.web", `{"resumeId":42,"url":"https://example.com/me","analyzedDocumentId":103}`, "")},
		{name: "stackup unknown version", queue: "ai.analyze.resume",
			body: bytes.Replace(stackupEnvelope("analyze.resume", `{"resumeId":42,"filePath":"a/b.pdf","analyzedDocumentId":101}`, ""), []byte(`"v1"`), []byte(`"v2"`), 1)},
		{name: "stackup storage key with ..", queue: "ai.analyze.resume",
			body: stackupEnvelope("analyze.resume", `{"resumeId":42,"filePath":"resumes/../etc/passwd","analyzedDocumentId":101}`, "")},
		{name: "stackup followup without a question", queue: "core.callback.questions",
			body: stackupEnvelope("callback.questions", `{"sessionId":99,"kind":"FOLLOWUP","answerIntent":"NORMAL","followupQuestion":"  "}`, "")},
		{name: "stackup realtime user without userId", queue: "q.realtime.session.notify",
			body: stackupEnvelope("realtime.user.notify", `{"eventType":"DOC_STATE","data":{}}`, `{"sessionId":1}`)},
		{name: "disputes aggregate of another event", queue: disputes.DomainEventsQueue,
			body: []byte(`{"event_id":"evt_01JD3K5Z8Q3W6X2N4P7R9T1V0B","event_type":"DisputeRaised","event_version":1,"aggregate_type":"transaction","aggregate_id":"dsp_1","occurred_at":"2026-11-12T09:14:03.512Z","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","payload":{"txn_id":"t","reason_code":"r"}}`)},
		{name: "disputes occurred_at without milliseconds", queue: disputes.DomainEventsQueue,
			body: []byte(`{"event_id":"evt_01JD3K5Z8Q3W6X2N4P7R9T1V0B","event_type":"DisputeRaised","event_version":1,"aggregate_type":"dispute","aggregate_id":"dsp_1","occurred_at":"2026-11-12T09:14:03Z","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","payload":{"txn_id":"t","reason_code":"r"}}`)},
		{name: "disputes event_id ULID overflow", queue: disputes.DomainEventsQueue,
			body: []byte(`{"event_id":"evt_81JD3K5Z8Q3W6X2N4P7R9T1V0B","event_type":"DisputeRaised","event_version":1,"aggregate_type":"dispute","aggregate_id":"dsp_1","occurred_at":"2026-11-12T09:14:03.512Z","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","payload":{"txn_id":"t","reason_code":"r"}}`)},
		{name: "disputes S3 key not URL-encoded", queue: disputes.IngestQueue,
			body: []byte(`{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"kb"},"object":{"key":"a%zz"}}}]}`)},
		{name: "disputes S3 without records", queue: disputes.IngestQueue, body: []byte(`{"Records":[]}`)},
	}
}

// fuzzSeeds are the handlers' committed fuzz seeds, each on its queue.
func fuzzSeeds(t *testing.T) []fixture {
	t.Helper()
	dirs := map[string]string{
		"../../handlers/booking/testdata/fuzz/FuzzDecode":                booking.Queue,
		"../../handlers/disputes/testdata/fuzz/FuzzDecodeEvent":          disputes.DomainEventsQueue,
		"../../handlers/disputes/testdata/fuzz/FuzzDecodeS3Notification": disputes.IngestQueue,
		"../../handlers/joinlink/testdata/fuzz/FuzzDecode":               joinlink.Queue,
		"../../handlers/stackup/envelope/testdata/fuzz/FuzzDecode":       "ai.analyze.resume",
	}
	var out []fixture
	for dir, queue := range dirs {
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, e := range entries {
			data, err := os.ReadFile(filepath.Join(dir, e.Name()))
			require.NoError(t, err)
			body := fuzzBytes(t, data)
			out = append(out, fixture{name: "fuzz seed " + filepath.Base(dir) + "/" + e.Name(), queue: queue, body: body})
		}
	}
	require.NotEmpty(t, out)
	return out
}

// fuzzBytes reads the one []byte value of a Go fuzz corpus file.
func fuzzBytes(t *testing.T, data []byte) []byte {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	require.Equal(t, "go test fuzz v1", lines[0])
	v := strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")")
	s, err := strconv.Unquote(v)
	require.NoError(t, err, lines[1])
	return []byte(s)
}
