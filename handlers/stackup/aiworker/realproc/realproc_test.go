package realproc_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/llm"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker/llmgen"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker/realproc"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/internalapi"
)

const summaryJSON = `{"summary":"Go backend developer with payments experience.","techStack":["Go","PostgreSQL","go"],"markdown":"## 요약\n\nGo 백엔드 개발자."}`

func domainCode(t *testing.T, err error) (string, bool) {
	t.Helper()
	var de *aiworker.DomainError
	require.True(t, errors.As(err, &de), "want a DomainError, got %v", err)
	return de.Code, de.Retriable
}

// analyze.resume end to end on the local services: the PDF from S3, its
// text summarised, the GFM document stored at documentPath, the chunks
// embedded and upserted through Core's internal API, and the three progress
// phases in order.
func TestAnalyzeResume(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	r.ai.chat["document_analysis"] = summaryJSON
	ctx := context.Background()
	require.NoError(t, r.bucket.Put(ctx, "resumes/raw/123/abc.pdf", textPDF("Jane Doe - Backend engineer", "Go, PostgreSQL, RabbitMQ"), "application/pdf"))

	a, err := r.p.AnalyzeResume(ctx, r.job(123), &catalog.AnalyzeResumeV1{ResumeID: 42, FilePath: "resumes/raw/123/abc.pdf", AnalyzedDocumentID: 101})
	require.NoError(t, err)
	assert.Equal(t, "Go backend developer with payments experience.", a.Summary)
	assert.Equal(t, []string{"Go", "PostgreSQL"}, a.TechStack, "deduplicated")
	assert.Equal(t, "analyzed/resume/42/summary.md", a.DocumentPath)
	assert.Equal(t, "## 요약\n\nGo 백엔드 개발자.", r.object(t, a.DocumentPath))
	require.NotNil(t, a.EmbeddingChunkCount)
	assert.Equal(t, 1, *a.EmbeddingChunkCount)
	require.Len(t, r.ai.lastInput, 1)
	assert.Contains(t, r.ai.lastInput[0], "Backend engineer")
	hits, err := r.coreAPI.Search(ctx, internalapi.SearchRequest{UserID: 123, QueryEmbedding: []float32{0, 1, 0, 0}, TopK: 5})
	require.NoError(t, err)
	require.Len(t, hits, 1, "the chunk is searchable in the user's documents")

	var phases []string
	for _, e := range r.events.all() {
		assert.Equal(t, catalog.RealtimeUserNotify, e.MessageType)
		assert.Equal(t, catalog.EventAnalysisProgress, e.EventType)
		assert.Equal(t, "RESUME", e.Data["targetType"])
		assert.EqualValues(t, 42, e.Data["targetId"])
		assert.NotEmpty(t, e.Data["message"])
		phases = append(phases, e.Data["phase"].(string))
	}
	assert.Equal(t, []string{"EXTRACTING", "SUMMARIZING", "EMBEDDING"}, phases)
}

func TestAnalyzeCoverLetter(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	r.ai.chat["document_analysis"] = summaryJSON
	ctx := context.Background()
	require.NoError(t, r.bucket.Put(ctx, "cover-letters/raw/1/c.pdf", textPDF("I want to build payments."), "application/pdf"))
	a, err := r.p.AnalyzeCoverLetter(ctx, r.job(1), &catalog.AnalyzeCoverLetterV1{CoverLetterID: 9, FilePath: "cover-letters/raw/1/c.pdf", AnalyzedDocumentID: 5})
	require.NoError(t, err)
	assert.Equal(t, "analyzed/cover_letter/9/summary.md", a.DocumentPath)
	assert.Equal(t, "COVER_LETTER", r.events.all()[0].Data["targetType"])
}

// The spec's permanent failures: a PDF without a text layer and a corrupt
// one are PDF_PARSE_FAILED, retriable false; a missing object and one over
// the store's limit have codes of their own.
func TestAnalyzeResumeFailures(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	r.ai.chat["document_analysis"] = summaryJSON
	ctx := context.Background()
	objects := map[string][]byte{
		"resumes/raw/1/scan.pdf":    pdfWith("q 612 0 0 792 0 0 cm Q"), // graphics only, no text
		"resumes/raw/1/corrupt.pdf": []byte("%PDF-1.4\n1 0 obj << /Type /Catalog >>\ngarbage without xref"),
		"resumes/raw/1/notpdf.pdf":  []byte("<html>not a pdf</html>"),
		"resumes/raw/1/big.pdf":     append(textPDF("x"), make([]byte, 2<<20)...),
	}
	for k, v := range objects {
		require.NoError(t, r.bucket.Put(ctx, k, v, "application/pdf"))
	}
	for key, want := range map[string]string{
		"resumes/raw/1/scan.pdf": realproc.CodePDFParseFailed, "resumes/raw/1/corrupt.pdf": realproc.CodePDFParseFailed,
		"resumes/raw/1/notpdf.pdf": realproc.CodePDFParseFailed, "resumes/raw/1/missing.pdf": realproc.CodeDocumentNotFound,
		"resumes/raw/1/big.pdf": realproc.CodeDocumentTooLarge,
	} {
		_, err := r.p.AnalyzeResume(ctx, r.job(1), &catalog.AnalyzeResumeV1{ResumeID: 1, FilePath: key, AnalyzedDocumentID: 1})
		code, retriable := domainCode(t, err)
		assert.Equal(t, want, code, key)
		assert.False(t, retriable, key)
		sig := aiworker.Signal(catalog.AnalyzeResume, err)
		assert.Equal(t, want, sig.Code, key)
		assert.False(t, sig.Retriable, key)
	}
	_, err := r.p.AnalyzeResume(ctx, r.job(1), &catalog.AnalyzeResumeV1{ResumeID: 1, FilePath: "resumes/raw/1/scan.pdf", AnalyzedDocumentID: 1})
	assert.ErrorIs(t, err, realproc.ErrNoTextLayer)
	assert.Equal(t, 0, r.ai.calls["/v1/chat/completions"], "no model call for a document that failed extraction")
}

// An unreachable model or object store is transient: the worker retries it,
// then answers FAILED with retriable true.
func TestAnalyzeOutagesAreTransient(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	ctx := context.Background()
	require.NoError(t, r.bucket.Put(ctx, "resumes/raw/1/ok.pdf", textPDF("Engineer"), "application/pdf"))
	r.ai.fail = http.StatusServiceUnavailable
	_, err := r.p.AnalyzeResume(ctx, r.job(1), &catalog.AnalyzeResumeV1{ResumeID: 1, FilePath: "resumes/raw/1/ok.pdf", AnalyzedDocumentID: 1})
	require.Error(t, err)
	assert.Equal(t, failure.Transient, failure.Of(err), "%v", err)
	sig := aiworker.Signal(catalog.AnalyzeResume, err)
	assert.True(t, sig.Retriable)

	down, err := llm.New(llm.Config{BaseURL: "http://127.0.0.1:1/v1", AllowNoKey: true, Timeout: 2 * time.Second})
	require.NoError(t, err)
	r2 := newRig(t, func(c *realproc.Config) { c.Model = down })
	require.NoError(t, r2.bucket.Put(ctx, "resumes/raw/1/ok.pdf", textPDF("Engineer"), "application/pdf"))
	_, err = r2.p.AnalyzeResume(ctx, r2.job(1), &catalog.AnalyzeResumeV1{ResumeID: 1, FilePath: "resumes/raw/1/ok.pdf", AnalyzedDocumentID: 1})
	assert.Equal(t, failure.Transient, failure.Of(err), "%v", err)

	// Core's internal API down at the embedding step.
	r3 := newRig(t, func(c *realproc.Config) { c.Core = &internalapi.Client{BaseURL: "http://127.0.0.1:1", APIKey: "k"} })
	r3.ai.chat["document_analysis"] = summaryJSON
	require.NoError(t, r3.bucket.Put(ctx, "resumes/raw/1/ok.pdf", textPDF("Engineer"), "application/pdf"))
	_, err = r3.p.AnalyzeResume(ctx, r3.job(1), &catalog.AnalyzeResumeV1{ResumeID: 1, FilePath: "resumes/raw/1/ok.pdf", AnalyzedDocumentID: 1})
	assert.Equal(t, failure.Transient, failure.Of(err), "%v", err)
}

// A failed progress publish never fails the job: the Job's notify is the
// worker's, which logs and drops; a Job without one still works.
func TestProgressIsOptional(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	r.ai.chat["document_analysis"] = summaryJSON
	ctx := context.Background()
	require.NoError(t, r.bucket.Put(ctx, "resumes/raw/1/ok.pdf", textPDF("Engineer"), "application/pdf"))
	_, err := r.p.AnalyzeResume(ctx, aiworker.Job{}, &catalog.AnalyzeResumeV1{ResumeID: 1, FilePath: "resumes/raw/1/ok.pdf", AnalyzedDocumentID: 1})
	require.NoError(t, err, "no userId: analysed, not embedded")
}

const page = `<!doctype html><html><head><title>Jane Doe</title></head><body>
<nav><a href="/">Home</a> <a href="/blog">Blog</a></nav>
<article><h1>Jane Doe</h1><p>I am a backend engineer who has built payment systems in Go and Kotlin for five years.
I care about correctness under concurrency, idempotent message handling and observability.</p>
<p>At Acme I led the migration of the settlement pipeline from cron jobs to an event-driven design on RabbitMQ,
cutting the settlement delay from hours to seconds while keeping every transfer exactly-once.</p></article>
<footer>© 2026 cookie banner</footer></body></html>`

func TestAnalyzeWeb(t *testing.T) {
	t.Parallel()
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		switch q.URL.Path {
		case "/me":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, page)
		case "/moved":
			http.Redirect(w, q, "/me", http.StatusFound)
		case "/big":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, "<html><body><p>"+strings.Repeat("x", 4096)+"</p></body></html>")
		case "/cv.png":
			w.Header().Set("Content-Type", "image/png")
			fmt.Fprint(w, "\x89PNG")
		case "/down":
			w.WriteHeader(http.StatusBadGateway)
		default:
			http.NotFound(w, q)
		}
	}))
	t.Cleanup(web.Close)
	r := newRig(t, func(c *realproc.Config) { c.MaxPageBytes = 2048 })
	r.ai.chat["document_analysis"] = summaryJSON
	ctx := context.Background()

	a, err := r.p.AnalyzeWeb(ctx, r.job(7), &catalog.AnalyzeWebV1{ResumeID: 42, URL: web.URL + "/moved", AnalyzedDocumentID: 103})
	require.NoError(t, err)
	assert.Equal(t, "analyzed/web/42/summary.md", a.DocumentPath)
	require.NotEmpty(t, r.ai.lastInput)
	text := strings.Join(r.ai.lastInput, "\n")
	assert.Contains(t, text, "settlement pipeline")
	assert.NotContains(t, text, "cookie banner", "readability drops the page's chrome")

	for path, want := range map[string]string{"/big": realproc.CodeDocumentTooLarge, "/cv.png": realproc.CodeUnsupportedContentType,
		"/gone": realproc.CodeWebFetchFailed} {
		_, err := r.p.AnalyzeWeb(ctx, r.job(7), &catalog.AnalyzeWebV1{ResumeID: 1, URL: web.URL + path, AnalyzedDocumentID: 1})
		code, retriable := domainCode(t, err)
		assert.Equal(t, want, code, path)
		assert.False(t, retriable, path)
	}
	_, err = r.p.AnalyzeWeb(ctx, r.job(7), &catalog.AnalyzeWebV1{ResumeID: 1, URL: web.URL + "/down", AnalyzedDocumentID: 1})
	assert.Equal(t, failure.Transient, failure.Of(err), "a 502 is worth another try")

	// The default client refuses the worker's own network.
	strict := newRig(t, func(c *realproc.Config) { c.AllowPrivateNetworks = false })
	_, err = strict.p.AnalyzeWeb(ctx, strict.job(7), &catalog.AnalyzeWebV1{ResumeID: 1, URL: web.URL + "/me", AnalyzedDocumentID: 1})
	code, _ := domainCode(t, err)
	assert.Equal(t, realproc.CodeWebFetchFailed, code)
}

func TestSynthesizeSpeech(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	r.ai.speech = []byte("ID3\x03fake-mp3")
	ctx := context.Background()
	s, err := r.p.SynthesizeSpeech(ctx, r.job(1), &catalog.GenerateTTSV1{SessionID: 99, MessageID: 502, Text: "가장 어려웠던 점은?"})
	require.NoError(t, err)
	assert.Equal(t, "interview/tts/99/502.mp3", s.AudioKey)
	assert.Nil(t, s.DurationSec)
	assert.Equal(t, "ID3\x03fake-mp3", r.object(t, s.AudioKey))
	assert.Equal(t, "interview/tts/99/502/seg-3.mp3", realproc.SegmentKey(99, 502, 3, "mp3"))

	// An outage on the last attempt (attempt 0: called outside the
	// worker counts as the last) is TTS_API_ERROR, retriable.
	r.ai.fail = http.StatusInternalServerError
	_, err = r.p.SynthesizeSpeech(ctx, r.job(1), &catalog.GenerateTTSV1{SessionID: 99, MessageID: 502, Text: "q"})
	code, retriable := domainCode(t, err)
	assert.Equal(t, realproc.CodeTTSAPIError, code)
	assert.True(t, retriable)
	r.ai.fail = http.StatusBadRequest
	_, err = r.p.SynthesizeSpeech(ctx, r.job(1), &catalog.GenerateTTSV1{SessionID: 99, MessageID: 502, Text: "q"})
	code, retriable = domainCode(t, err)
	assert.Equal(t, realproc.CodeTTSAPIError, code)
	assert.False(t, retriable)
}

const verbose = `{"text":"음 저는 결제 시스템을 어 만들었습니다","duration":6.0,"words":[
{"word":"음","start":0.5,"end":0.8},{"word":"저는","start":0.9,"end":1.2},{"word":"결제","start":2.2,"end":2.5},
{"word":"시스템을","start":2.5,"end":3.0},{"word":"어","start":3.1,"end":3.2},{"word":"만들었습니다","start":3.3,"end":4.0}]}`

func TestAnalyzeVoice(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(c *realproc.Config) { c.MaxAudioBytes = 1024 })
	r.ai.transcript = verbose
	ctx := context.Background()
	require.NoError(t, r.bucket.Put(ctx, "interview/answers/99/502.webm", []byte("webm-bytes"), "audio/webm"))
	require.NoError(t, r.bucket.Put(ctx, "interview/answers/99/503.webm", make([]byte, 2048), "audio/webm"))
	v, err := r.p.AnalyzeVoice(ctx, r.job(1), &catalog.AnalyzeVoiceV1{SessionID: 99, MessageID: 502, AudioS3Key: "interview/answers/99/502.webm", ContentType: "audio/webm"})
	require.NoError(t, err)
	assert.Equal(t, "음 저는 결제 시스템을 어 만들었습니다", *v.Transcript)
	assert.InDelta(t, 60.0, *v.SpeakingRateWpm, 0.01, "6 words in 6 s")
	// gaps ≥ 0.3 s: 0.5 before the first word, 1.0 after 저는, 2.0 after the last.
	assert.InDelta(t, 3.5, *v.SilenceDurationSec, 0.01)
	assert.Equal(t, map[string]int{"음": 1, "어": 1}, v.FillerWordCounts)
	assert.Nil(t, v.PronunciationAccuracy)
	assert.Equal(t, "answer.webm", r.ai.lastForm["filename"])
	assert.Equal(t, "verbose_json", r.ai.lastForm["response_format"])

	_, err = r.p.AnalyzeVoice(ctx, r.job(1), &catalog.AnalyzeVoiceV1{SessionID: 99, MessageID: 503, AudioS3Key: "interview/answers/99/503.webm", ContentType: "audio/webm"})
	code, _ := domainCode(t, err)
	assert.Equal(t, realproc.CodeAudioTooLarge, code)
	_, err = r.p.AnalyzeVoice(ctx, r.job(1), &catalog.AnalyzeVoiceV1{SessionID: 99, MessageID: 502, AudioS3Key: "interview/answers/99/502.webm", ContentType: "text/plain"})
	code, _ = domainCode(t, err)
	assert.Equal(t, realproc.CodeUnsupportedContentType, code)

	// Metrics are nullable: a plain-json server gives text only.
	m := realproc.VoiceMetrics(llm.Transcription{Text: "um I think uh yes"})
	assert.Nil(t, m.SpeakingRateWpm)
	assert.Nil(t, m.SilenceDurationSec)
	assert.Equal(t, map[string]int{"um": 1, "uh": 1}, m.FillerWordCounts)
}

// analyze.repository reads GitHub with the token Core delegates, never one
// from the envelope.
func TestAnalyzeRepository(t *testing.T) {
	t.Parallel()
	var auth []string
	gh := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		auth = append(auth, q.Header.Get("Authorization"))
		switch q.URL.Path {
		case "/repos/octocat/hello-world":
			fmt.Fprint(w, `{"full_name":"octocat/hello-world","description":"Payments demo","language":"Go","topics":["payments"],"default_branch":"main"}`)
		case "/repos/octocat/hello-world/languages":
			fmt.Fprint(w, `{"Go":9000,"Shell":100}`)
		case "/repos/octocat/hello-world/readme":
			fmt.Fprint(w, "# Hello\nA settlement service.")
		case "/repos/octocat/hello-world/git/trees/main":
			fmt.Fprint(w, `{"tree":[{"path":"go.mod","type":"blob"},{"path":"cmd/main.go","type":"blob"}]}`)
		case "/repos/octocat/hello-world/contents/go.mod":
			fmt.Fprint(w, "module example.com/hello\nrequire github.com/jackc/pgx/v5 v5.7.0\n")
		case "/repos/octocat/revoked":
			w.WriteHeader(http.StatusUnauthorized)
		default:
			http.NotFound(w, q)
		}
	}))
	t.Cleanup(gh.Close)
	r := newRig(t, func(c *realproc.Config) { c.GitHubAPIURL = gh.URL })
	r.ai.chat["document_analysis"] = summaryJSON
	ctx := context.Background()
	require.NoError(t, r.core.SetGitHubToken(ctx, 123, "gho_delegated", time.Now().Add(time.Hour)))

	a, err := r.p.AnalyzeRepository(ctx, r.job(123), &catalog.AnalyzeRepositoryV1{RepositoryID: 7, RepoFullName: "octocat/hello-world", DefaultBranch: "main", AnalyzedDocumentID: 102})
	require.NoError(t, err)
	assert.Equal(t, "analyzed/repository/7/summary.md", a.DocumentPath)
	for _, h := range auth {
		assert.Equal(t, "Bearer gho_delegated", h)
	}
	text := strings.Join(r.ai.lastInput, "\n")
	assert.Contains(t, text, "A settlement service.")
	assert.Contains(t, text, "github.com/jackc/pgx/v5")

	_, err = r.p.AnalyzeRepository(ctx, r.job(123), &catalog.AnalyzeRepositoryV1{RepositoryID: 8, RepoFullName: "octocat/private", AnalyzedDocumentID: 1})
	code, retriable := domainCode(t, err)
	assert.Equal(t, realproc.CodeRepositoryNotFound, code)
	assert.False(t, retriable)
	_, err = r.p.AnalyzeRepository(ctx, r.job(123), &catalog.AnalyzeRepositoryV1{RepositoryID: 9, RepoFullName: "octocat/revoked", AnalyzedDocumentID: 1})
	code, _ = domainCode(t, err)
	assert.Equal(t, realproc.CodeGitHubAuthFailed, code)

	// A user without a token: read anonymously.
	auth = nil
	_, err = r.p.AnalyzeRepository(ctx, r.job(555), &catalog.AnalyzeRepositoryV1{RepositoryID: 7, RepoFullName: "octocat/hello-world", DefaultBranch: "main", AnalyzedDocumentID: 104})
	require.NoError(t, err)
	assert.Equal(t, "", auth[0])
}

const feedbackJSON = `{"overallScore":72,"technicalAccuracy":70,"logicScore":75,"communicationScore":71,"strengthsSummary":"Clear structure.",
"weaknessesSummary":"Little depth on concurrency.","improvementKeywords":["locking"],"studyPlan":["Read about MVCC"],"highlights":["Clear structure"],
"answerCoaching":[{"messageId":2,"modelAnswer":"Use SELECT … FOR UPDATE","answerRewrite":"I would lock the row","coachingComment":"Name the isolation level"}],
"panelBreakdown":[{"evaluator":"첫인상","dimension":"전달력","score":80,"detail":"Confident | calm","scoreRationale":"r"}]}`

func TestGenerateFeedbackStoresTheReport(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	for _, name := range llmgen.FeedbackEvaluators() {
		r.ai.chat[name] = feedbackJSON // each evaluator takes its own fields
	}
	ctx := context.Background()
	parent := int64(1)
	req := &catalog.GenerateFeedbackV1{SessionID: 99, Mode: "TECHNICAL", Messages: []catalog.TranscriptMessage{
		{ID: 1, SequenceNumber: 1, Role: "INTERVIEWER", Content: "How do you avoid double payments?"},
		{ID: 2, SequenceNumber: 2, Role: "INTERVIEWEE", Content: "With a unique key.", ParentMessageID: &parent}}}
	fb, err := r.p.GenerateFeedback(ctx, r.job(1), req)
	require.NoError(t, err)
	require.NotNil(t, fb.ReportS3Key)
	assert.Equal(t, "feedback/99/report.md", *fb.ReportS3Key)
	report := r.object(t, *fb.ReportS3Key)
	assert.Equal(t, realproc.RenderReport(req, fb), report, "deterministic")
	assert.Contains(t, report, "| 종합 | 72.0 |")
	assert.Contains(t, report, "### 1. How do you avoid double payments?")
	assert.Contains(t, report, `Confident \| calm`)

	// A report that cannot be stored leaves the feedback a success.
	broken := newRig(t, func(c *realproc.Config) { c.Objects = failingObjects{} })
	for _, name := range llmgen.FeedbackEvaluators() {
		broken.ai.chat[name] = feedbackJSON
	}
	fb, err = broken.p.GenerateFeedback(ctx, broken.job(1), req)
	require.NoError(t, err)
	assert.Nil(t, fb.ReportS3Key)
}

type failingObjects struct{}

func (failingObjects) Get(context.Context, string) ([]byte, error) {
	return nil, failure.AsTransient(errors.New("S3 down"), 0)
}

func (failingObjects) Put(context.Context, string, []byte, string) error {
	return failure.AsTransient(errors.New("S3 down"), 0)
}

func TestGenerateFollowupStreams(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	r.ai.chat["followup_intent"] = `{"answerIntent":"NORMAL","answerEvaluation":{"specificity":3.5,"logic":4,"structure":"PARTIAL_STAR","correctness":null}}`
	r.ai.stream = []string{"그 락은 ", "어느 격리 수준에서 ", "필요했나요? ", "왜요?"}
	r.ai.speech = []byte("ID3-sentence")
	ctx := context.Background()
	placeholder := int64(503)
	f, err := r.p.GenerateFollowup(ctx, r.job(1), &catalog.GenerateFollowupV1{SessionID: 99, ParentMessageID: 501, AnswerMessageID: 502,
		PreviousQuestion: "동시성은?", AnswerText: "락을 썼습니다", FollowupMessageID: &placeholder})
	require.NoError(t, err)
	assert.Equal(t, catalog.IntentNormal, f.AnswerIntent)
	assert.Equal(t, "그 락은 어느 격리 수준에서 필요했나요? 왜요?", f.FollowupQuestion)
	assert.Equal(t, 3.5, *f.AnswerEvaluation.Specificity)
	var deltas, audio []event
	for _, e := range r.events.all() {
		assert.Equal(t, catalog.RealtimeSessionNotify, e.MessageType)
		switch e.EventType {
		case catalog.EventMessageDelta:
			deltas = append(deltas, e)
		case catalog.EventMessageAudio:
			audio = append(audio, e)
		default:
			t.Errorf("unexpected event %s", e.EventType)
		}
	}
	require.Len(t, deltas, 4)
	for i, e := range deltas {
		assert.EqualValues(t, 503, e.Data["messageId"])
		assert.EqualValues(t, i, e.Data["seq"])
		assert.Equal(t, r.ai.stream[i], e.Data["text"])
	}
	// One segment per sentence, stored at the shared key, announced after
	// it is stored — all before GenerateFollowup returned (the callback).
	require.Len(t, audio, 2)
	for i, e := range audio {
		assert.Equal(t, map[string]any{"messageId": 503.0, "seq": float64(i), "ext": "mp3", "durationSec": nil}, e.Data)
		assert.Equal(t, "ID3-sentence", r.object(t, realproc.SegmentKey(99, 503, i, "mp3")))
	}
	assert.Equal(t, 2, r.ai.calls["/v1/audio/speech"])

	// A TTS outage costs the audio, never the follow-up.
	noSpeech := newRig(t, func(c *realproc.Config) { c.Objects = failingObjects{} })
	noSpeech.ai.chat["followup_intent"] = r.ai.chat["followup_intent"]
	noSpeech.ai.stream = r.ai.stream
	f, err = noSpeech.p.GenerateFollowup(ctx, noSpeech.job(1), &catalog.GenerateFollowupV1{SessionID: 99, FollowupMessageID: &placeholder})
	require.NoError(t, err)
	assert.Equal(t, "그 락은 어느 격리 수준에서 필요했나요? 왜요?", f.FollowupQuestion)
	for _, e := range noSpeech.events.all() {
		assert.Equal(t, catalog.EventMessageDelta, e.EventType, "no segment stored, none announced")
	}

	r.ai.chat["followup_intent"] = `{"answerIntent":"DONT_KNOW","answerEvaluation":{"specificity":null,"logic":null,"structure":null,"correctness":null}}`
	f, err = r.p.GenerateFollowup(ctx, r.job(1), &catalog.GenerateFollowupV1{SessionID: 99, FollowupMessageID: &placeholder})
	require.NoError(t, err)
	assert.Equal(t, "", f.FollowupQuestion)
}

func TestNewRefusesMissingServices(t *testing.T) {
	t.Parallel()
	_, err := realproc.New(realproc.Config{})
	require.Error(t, err)
	for _, s := range []string{"object store", "model API", "internal API", "chat client"} {
		assert.Contains(t, err.Error(), s)
	}
}

func TestChunks(t *testing.T) {
	t.Parallel()
	text := strings.Repeat("가나다라마바사. ", 400)
	chunks := realproc.Chunks(text, 500, 64)
	assert.Greater(t, len(chunks), 5)
	for _, c := range chunks {
		assert.LessOrEqual(t, len([]rune(c)), 500)
	}
	assert.Len(t, realproc.Chunks(text, 100, 3), 3)
}

// TestRAGAndAILogs: generate.followup's contextDocumentIds and
// generate.questions' documents are searched through Core's internal API,
// scoped to the request's user, and the chunks found go into the prompt;
// every model call leaves an ai-logs row. Neither can fail the job.
func TestRAGAndAILogs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRig(t, nil)
	_, err := r.core.PutEmbeddings(ctx, 1, 12, []internalapi.Chunk{{Index: 0, Text: "결제 시스템에서 낙관적 락으로 재고 차감", Embedding: []float32{0, 1, 0, 0}}})
	require.NoError(t, err)
	_, err = r.core.PutEmbeddings(ctx, 2, 13, []internalapi.Chunk{{Index: 0, Text: "someone else's resume", Embedding: []float32{0, 1, 0, 0}}})
	require.NoError(t, err)
	r.ai.chat["followup_intent"] = `{"answerIntent":"NORMAL","answerEvaluation":{"specificity":3,"logic":3,"structure":"NONE","correctness":4}}`
	r.ai.stream = []string{"왜 낙관적 락이었나요?"}
	placeholder := int64(503)
	req := &catalog.GenerateFollowupV1{SessionID: 99, ParentMessageID: 501, AnswerMessageID: 502, PreviousQuestion: "동시성은?",
		AnswerText: "락을 썼습니다", FollowupMessageID: &placeholder, ContextDocumentIDs: []int64{12, 13}}
	job := r.job(1)
	job.Envelope.TraceID = "trace-rag"
	_, err = r.p.GenerateFollowup(ctx, job, req)
	require.NoError(t, err)
	for _, name := range []string{"followup_intent", "stream"} {
		assert.Contains(t, r.ai.prompts[name], "결제 시스템에서 낙관적 락으로 재고 차감", "%s: the user's chunk is in the prompt", name)
		assert.NotContains(t, r.ai.prompts[name], "someone else's resume", "%s: §10.1, another user's document is never searched", name)
	}
	var types []string
	for _, l := range r.coreDB.AILogs() {
		types = append(types, l.RequestType)
		require.NotNil(t, l.UserID)
		assert.EqualValues(t, 1, *l.UserID)
		assert.True(t, l.Success)
		assert.NotEmpty(t, l.Model)
		assert.Equal(t, "trace-rag", l.TraceID, "the request's trace")
	}
	assert.Equal(t, []string{"followup_intent", "followup_question_stream"}, types)

	r.ai.chat["question_pool"] = `{"questions":[{"category":"C","question":"Q?","jobCategory":null,"targetEvidence":"","expectedSignal":"s"}]}`
	_, err = r.p.All().Questions.GenerateQuestions(ctx, r.job(1), &catalog.GenerateQuestionsV1{SessionID: 99, Mode: "TECHNICAL",
		SelfIntroAnswer: "결제 시스템 백엔드 개발자입니다", Documents: []catalog.SourceDocument{{DocumentID: 12, SourceType: "RESUME"}}})
	require.NoError(t, err)
	assert.Contains(t, r.ai.prompts["question_pool"], "결제 시스템에서 낙관적 락으로 재고 차감", "the pool's documents are searched")
	logs := r.coreDB.AILogs()
	assert.Equal(t, "question_pool", logs[len(logs)-1].RequestType)

	// No user id: no search (§10.1), no context.
	embeds := r.ai.calls["/v1/embeddings"]
	anon := r.job(0)
	_, err = r.p.GenerateFollowup(ctx, anon, req)
	require.NoError(t, err)
	assert.Equal(t, embeds, r.ai.calls["/v1/embeddings"], "nothing embedded, nothing searched")
	assert.NotContains(t, r.ai.prompts["followup_intent"], "retrievedContext")

	// Core unreachable (search and ai-logs fail): no context, the follow-up
	// still done.
	down := newRig(t, func(c *realproc.Config) { c.Core = &internalapi.Client{BaseURL: "http://127.0.0.1:1", APIKey: "k"} })
	down.ai.chat["followup_intent"] = r.ai.chat["followup_intent"]
	down.ai.stream = r.ai.stream
	f, err := down.p.GenerateFollowup(ctx, down.job(1), req)
	require.NoError(t, err, "a failed search or ai-log never fails the job")
	assert.Equal(t, "왜 낙관적 락이었나요?", f.FollowupQuestion)
	assert.NotContains(t, down.ai.prompts["followup_intent"], "retrievedContext")
}
