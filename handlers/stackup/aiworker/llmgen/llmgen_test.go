package llmgen_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/llm"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker/llmgen"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/envelope"
)

type fakeLLM struct {
	content string
	err     error
	// byName answers (or fails) a request by its schema name first.
	byName  map[string]string
	failing map[string]error
	mu      sync.Mutex
	got     llm.Request
	names   []string
}

func (f *fakeLLM) Complete(_ context.Context, req llm.Request) (llm.Response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = req
	f.names = append(f.names, req.Schema.Name)
	if err := f.failing[req.Schema.Name]; err != nil {
		return llm.Response{}, err
	}
	if f.err != nil {
		return llm.Response{}, f.err
	}
	content := f.content
	if c, ok := f.byName[req.Schema.Name]; ok {
		content = c
	}
	return llm.Response{Content: json.RawMessage(content), PromptVersion: req.PromptVersion}, nil
}

func TestSchemasAreValidJSON(t *testing.T) {
	t.Parallel()
	f := &fakeLLM{content: `{"questions":[{"category":"C","question":"Q?","jobCategory":null,"targetEvidence":"","expectedSignal":"s"}]}`}
	qs, err := llmgen.Generator{Client: f}.GenerateQuestions(context.Background(), aiworker.Job{}, &catalog.GenerateQuestionsV1{SessionID: 1, Mode: "TECHNICAL"})
	require.NoError(t, err)
	assert.Equal(t, "Q?", qs[0].Question)
	assert.True(t, json.Valid(f.got.Schema.JSON))
	assert.True(t, f.got.Schema.Strict)
	assert.Equal(t, llmgen.PromptVersion, f.got.PromptVersion)

	f = &fakeLLM{content: `{"answerIntent":"DONT_KNOW","followupQuestion":"","answerEvaluation":{"specificity":null,"logic":null,"structure":null,"correctness":null}}`}
	fu, err := llmgen.Generator{Client: f}.GenerateFollowup(context.Background(), aiworker.Job{}, &catalog.GenerateFollowupV1{SessionID: 1})
	require.NoError(t, err)
	assert.Equal(t, catalog.IntentDontKnow, fu.AnswerIntent)
	assert.True(t, json.Valid(f.got.Schema.JSON))

	f = &fakeLLM{content: `{"overallScore":70,"technicalAccuracy":70,"logicScore":70,"communicationScore":70,"strengthsSummary":"a","weaknessesSummary":"b","improvementKeywords":[],"studyPlan":[],"highlights":["a"],"answerCoaching":[],"panelBreakdown":[]}`}
	fb, err := llmgen.Generator{Client: f}.GenerateFeedback(context.Background(), aiworker.Job{}, &catalog.GenerateFeedbackV1{SessionID: 1})
	require.NoError(t, err)
	assert.Equal(t, 70.0, *fb.OverallScore)
	assert.True(t, json.Valid(f.got.Schema.JSON))
}

func TestErrorsClassified(t *testing.T) {
	t.Parallel()
	g := llmgen.Generator{Client: &fakeLLM{content: `{"questions":[{"category":"C","question":" ","jobCategory":null,"targetEvidence":"","expectedSignal":""}]}`}}
	_, err := g.GenerateQuestions(context.Background(), aiworker.Job{}, &catalog.GenerateQuestionsV1{SessionID: 1})
	assert.Equal(t, catalog.ErrGenerationSchemaInvalid, aiworker.Signal(catalog.GenerateQuestions, err).Code)

	g = llmgen.Generator{Client: &fakeLLM{err: failure.AsPermanent(fmt.Errorf("%w: refused", llm.ErrInvalidOutput))}}
	_, err = g.GenerateFollowup(context.Background(), aiworker.Job{}, &catalog.GenerateFollowupV1{SessionID: 1})
	assert.ErrorIs(t, err, aiworker.ErrSchemaInvalid)

	outage := failure.AsTransient(&llm.APIError{StatusCode: 503}, 0)
	g = llmgen.Generator{Client: &fakeLLM{err: outage}}
	_, err = g.GenerateFeedback(context.Background(), aiworker.Job{}, &catalog.GenerateFeedbackV1{SessionID: 1})
	assert.Equal(t, failure.Transient, failure.Of(err), "an outage stays transient: retried in process")
	var api *llm.APIError
	assert.True(t, errors.As(err, &api))
}

type recorded struct {
	eventType string
	data      map[string]any
}

type recorder struct {
	mu   sync.Mutex
	list []recorded
}

func (r *recorder) notify(_ context.Context, _, ev string, data any) {
	b, _ := json.Marshal(data)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, recorded{ev, m})
}

func (r *recorder) phases(eventType string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.list {
		if e.eventType != eventType {
			continue
		}
		if e.data["total"] != nil {
			out = append(out, fmt.Sprintf("%v %v/%v", e.data["phase"], e.data["completed"], e.data["total"]))
		} else {
			out = append(out, fmt.Sprint(e.data["phase"]))
		}
	}
	return out
}

func TestQuestionPoolProgress(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	f := &fakeLLM{content: `{"questions":[{"category":"C","question":"Q?","jobCategory":null,"targetEvidence":"","expectedSignal":"s"}]}`}
	_, err := llmgen.Generator{Client: f}.GenerateQuestions(context.Background(), aiworker.NewJob(envelope.Envelope{}, rec.notify), &catalog.GenerateQuestionsV1{SessionID: 1})
	require.NoError(t, err)
	assert.Equal(t, []string{"CONTEXT_BUILDING", "GENERATING", "FINALIZING"}, rec.phases(catalog.EventPoolProgress))
}

// TestFeedbackPanelInParallel: every evaluator is called, their parts merge
// into one feedback, and FEEDBACK_PROGRESS counts them.
func TestFeedbackPanelInParallel(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	f := &fakeLLM{byName: map[string]string{
		"feedback_scores":   `{"overallScore":72,"technicalAccuracy":70,"logicScore":75,"communicationScore":71}`,
		"feedback_summary":  `{"strengthsSummary":"Clear structure.","weaknessesSummary":"Little depth.","highlights":["Clear structure"]}`,
		"feedback_panel":    `{"panelBreakdown":[{"evaluator":"첫인상","dimension":"전달력","score":80,"detail":"calm","scoreRationale":"r"}]}`,
		"feedback_coaching": `{"answerCoaching":[{"messageId":2,"modelAnswer":"m","answerRewrite":"a","coachingComment":"c"}]}`,
		"feedback_study":    `{"improvementKeywords":["locking"],"studyPlan":["Read about MVCC"]}`,
	}}
	fb, err := llmgen.Generator{Client: f}.GenerateFeedback(context.Background(), aiworker.NewJob(envelope.Envelope{}, rec.notify), &catalog.GenerateFeedbackV1{SessionID: 1})
	require.NoError(t, err)
	assert.ElementsMatch(t, llmgen.FeedbackEvaluators(), f.names)
	assert.Len(t, llmgen.FeedbackEvaluators(), 5)
	assert.Equal(t, 72.0, *fb.OverallScore)
	assert.Equal(t, 71.0, *fb.CommunicationScore)
	assert.Equal(t, "Little depth.", fb.WeaknessesSummary)
	assert.Equal(t, []string{"Clear structure"}, fb.Highlights)
	assert.Equal(t, "첫인상", fb.PanelBreakdown[0].Evaluator)
	assert.EqualValues(t, 2, fb.AnswerCoaching[0].MessageID)
	assert.Equal(t, []string{"Read about MVCC"}, fb.StudyPlan)
	assert.Equal(t, []string{"locking"}, fb.ImprovementKeywords)
	assert.Equal(t, []string{"PREPARING", "SCORING 0/5", "SCORING 1/5", "SCORING 2/5", "SCORING 3/5", "SCORING 4/5", "SCORING 5/5", "FINALIZING"},
		rec.phases(catalog.EventFeedbackProgress))

	// One failing evaluator fails the feedback with its error; no FINALIZING.
	rec = &recorder{}
	f.failing = map[string]error{"feedback_panel": failure.AsPermanent(fmt.Errorf("%w: refused", llm.ErrInvalidOutput))}
	_, err = llmgen.Generator{Client: f}.GenerateFeedback(context.Background(), aiworker.NewJob(envelope.Envelope{}, rec.notify), &catalog.GenerateFeedbackV1{SessionID: 1})
	require.ErrorIs(t, err, aiworker.ErrSchemaInvalid)
	assert.NotContains(t, rec.phases(catalog.EventFeedbackProgress), "FINALIZING")
}

type fakeRetriever struct {
	ids   []int64
	query string
}

func (f *fakeRetriever) Retrieve(_ context.Context, _ aiworker.Job, ids []int64, query string) []string {
	f.ids, f.query = ids, query
	return []string{"chunk about locks"}
}

type callLog struct {
	mu    sync.Mutex
	calls []llmgen.Call
}

func (l *callLog) LogCall(_ context.Context, _ aiworker.Job, c llmgen.Call) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, c)
}

// TestRetrieverAndCallLog: the pool's documents scope its search, the chunks
// reach the prompt, and every model call is logged (the failing one too).
func TestRetrieverAndCallLog(t *testing.T) {
	t.Parallel()
	ret, log := &fakeRetriever{}, &callLog{}
	f := &fakeLLM{content: `{"questions":[{"category":"C","question":"Q?","jobCategory":null,"targetEvidence":"","expectedSignal":"s"}]}`}
	g := llmgen.Generator{Client: f, Retriever: ret, Log: log}
	_, err := g.GenerateQuestions(context.Background(), aiworker.Job{}, &catalog.GenerateQuestionsV1{SessionID: 1, SelfIntroAnswer: "백엔드",
		Documents: []catalog.SourceDocument{{DocumentID: 42}, {DocumentID: 43}}})
	require.NoError(t, err)
	assert.Equal(t, []int64{42, 43}, ret.ids)
	assert.Equal(t, "백엔드", ret.query)
	assert.Contains(t, f.got.Messages[1].Content, `"retrievedContext":["chunk about locks"]`)
	require.Len(t, log.calls, 1)
	assert.Equal(t, "question_pool", log.calls[0].RequestType)
	assert.NoError(t, log.calls[0].Err)

	ret.ids = nil
	_, err = g.GenerateQuestions(context.Background(), aiworker.Job{}, &catalog.GenerateQuestionsV1{SessionID: 1})
	require.NoError(t, err)
	assert.Nil(t, ret.ids, "no documents: no search")
	assert.NotContains(t, f.got.Messages[1].Content, "retrievedContext")

	log.calls = nil
	g.Client = &fakeLLM{err: failure.AsTransient(&llm.APIError{StatusCode: 503}, 0)}
	_, err = g.GenerateFeedback(context.Background(), aiworker.Job{}, &catalog.GenerateFeedbackV1{SessionID: 1})
	require.Error(t, err)
	require.Len(t, log.calls, len(llmgen.FeedbackEvaluators()), "one row per evaluator's call")
	assert.Error(t, log.calls[0].Err)
}
