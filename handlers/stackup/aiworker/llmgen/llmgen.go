// Package llmgen implements the AI worker's three generation processors
// (generate.questions, generate.followup, generate.feedback) on an
// OpenAI-compatible chat-completions client with structured output
// (app/llm). Output that does not fit the schema wraps
// aiworker.ErrSchemaInvalid (GENERATION_SCHEMA_INVALID); the client's own
// errors keep their classes (an outage is transient and retried, §6).
//
// The prompts are deliberately short: they state the contract's fields and
// rules (§5.6–§5.11) and leave style to the model. PromptVersion is sent
// with every request so outputs can be traced to the prompt that made them.
package llmgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/eventpipe/eventpipe/app/llm"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
)

// PromptVersion identifies this package's prompts and schemas.
const PromptVersion = "stackup-2026-11-30"

// Completer is the part of *llm.Client the generators use.
type Completer interface {
	Complete(ctx context.Context, req llm.Request) (llm.Response, error)
}

// Retriever finds context for a prompt in the user's documents (RAG: the
// pool's documents, §5.6; a follow-up's contextDocumentIds, §5.8). A failed search is not fatal (§10: "실패 시 AI
// 는 빈 결과로 폴백"): the Retriever logs it and returns what it has, none.
type Retriever interface {
	Retrieve(ctx context.Context, job aiworker.Job, documentIDs []int64, query string) []string
}

// CallLogger records one model call (Core's POST /api/internal/ai-logs).
// Fire-and-forget: it logs its own failures and returns nothing to fail on.
type CallLogger interface {
	LogCall(ctx context.Context, job aiworker.Job, call Call)
}

// Call is one model call, as CallLogger records it.
type Call struct {
	// RequestType names the call: its schema name (question_pool,
	// feedback_scores, followup_intent …) or followup_question_stream.
	RequestType string
	// Model is the model that answered, or the one asked for.
	Model   string
	Usage   llm.Usage
	Latency time.Duration
	Err     error
}

// Generator implements aiworker.QuestionGenerator, FollowupGenerator and
// FeedbackGenerator.
type Generator struct {
	Client Completer
	// Model overrides the client's model ("" keeps it).
	Model string
	// Retriever, when set, gives generate.questions context found in its
	// documents (their documentIds scope the search); nil generates
	// without.
	Retriever Retriever
	// Log, when set, records every model call.
	Log CallLogger
}

var (
	_ aiworker.QuestionGenerator = Generator{}
	_ aiworker.FollowupGenerator = Generator{}
	_ aiworker.FeedbackGenerator = Generator{}
)

func (g Generator) complete(ctx context.Context, job aiworker.Job, name, system string, input any, schema string, out any) error {
	user, err := json.Marshal(input)
	if err != nil {
		return fmt.Errorf("llmgen %s: encode input: %w", name, err)
	}
	start := time.Now()
	resp, err := g.Client.Complete(ctx, llm.Request{
		Model: g.Model,
		Messages: []llm.Message{
			{Role: "system", Content: system},
			{Role: "user", Content: string(user)},
		},
		Schema:        llm.Schema{Name: name, JSON: json.RawMessage(schema), Strict: true},
		PromptVersion: PromptVersion,
	})
	if g.Log != nil {
		model := resp.Model
		if model == "" {
			model = g.Model
		}
		g.Log.LogCall(ctx, job, Call{RequestType: name, Model: model, Usage: resp.Usage, Latency: time.Since(start), Err: err})
	}
	if err != nil {
		if errors.Is(err, llm.ErrInvalidOutput) {
			return fmt.Errorf("llmgen %s: %w: %w", name, aiworker.ErrSchemaInvalid, err)
		}
		return fmt.Errorf("llmgen %s: %w", name, err)
	}
	if err := json.Unmarshal(resp.Content, out); err != nil {
		return fmt.Errorf("llmgen %s: %w: %w", name, aiworker.ErrSchemaInvalid, err)
	}
	return nil
}

const questionsSystem = `You are an interviewer preparing a technical interview. The first question (self-introduction) is already fixed.
Generate exactly initialQuestionCount questions (at most maxQuestions) grounded first in selfIntroAnswer, then in the documents.
Do not repeat recentQuestions. retrievedContext, when present, holds excerpts of the candidate's documents found for this interview: prefer them as targetEvidence. For JOB_TAILORED mode use targetCompanyName and targetJobDescription for fit and motivation questions.
For each question: category (e.g. PROJECT_DEEP_DIVE, TECH_STACK, CS_FUNDAMENTAL, BEHAVIORAL), question, jobCategory (one of jobCategories or null),
targetEvidence (a quote of the material the question rests on; required for PROJECT and TECH categories, else may be empty),
expectedSignal (what a strong answer must show; internal, never shown to the candidate). Plain text, no markdown.`

const questionsSchema = `{"type":"object","additionalProperties":false,"required":["questions"],"properties":{"questions":{"type":"array","items":{
"type":"object","additionalProperties":false,"required":["category","question","jobCategory","targetEvidence","expectedSignal"],"properties":{
"category":{"type":"string"},"question":{"type":"string"},"jobCategory":{"type":["string","null"]},
"targetEvidence":{"type":"string"},"expectedSignal":{"type":"string"}}}}}}`

// documentIDs are the ids of the session's documents (§5.6 documents[]):
// the scope of the pool's search.
func documentIDs(docs []catalog.SourceDocument) []int64 {
	var ids []int64
	for _, d := range docs {
		if d.DocumentID > 0 {
			ids = append(ids, d.DocumentID)
		}
	}
	return ids
}

// questionsQuery is what the pool's context is searched with: what the
// interview is about.
func questionsQuery(req *catalog.GenerateQuestionsV1) string {
	parts := []string{req.SelfIntroAnswer}
	if req.TargetJobDescription != nil {
		parts = append(parts, *req.TargetJobDescription)
	}
	parts = append(parts, req.JobCategories...)
	return strings.TrimSpace(strings.Join(parts, "\n"))
}

// GenerateQuestions implements aiworker.QuestionGenerator: CONTEXT_BUILDING
// (the Retriever's search of contextDocumentIds), GENERATING (the model
// call), FINALIZING (the pool checked) on the session.
func (g Generator) GenerateQuestions(ctx context.Context, job aiworker.Job, req *catalog.GenerateQuestionsV1) ([]catalog.Question, error) {
	job.PoolProgress(ctx, req.SessionID, aiworker.PhaseContextBuilding, "면접 맥락을 준비하고 있습니다")
	input := struct {
		*catalog.GenerateQuestionsV1
		RetrievedContext []string `json:"retrievedContext,omitempty"`
	}{GenerateQuestionsV1: req}
	if ids := documentIDs(req.Documents); g.Retriever != nil && len(ids) > 0 {
		input.RetrievedContext = g.Retriever.Retrieve(ctx, job, ids, questionsQuery(req))
	}
	job.PoolProgress(ctx, req.SessionID, aiworker.PhaseGenerating, "질문을 생성하고 있습니다")
	var out struct {
		Questions []catalog.Question `json:"questions"`
	}
	if err := g.complete(ctx, job, "question_pool", questionsSystem, input, questionsSchema, &out); err != nil {
		return nil, err
	}
	job.PoolProgress(ctx, req.SessionID, aiworker.PhaseFinalizing, "질문을 정리하고 있습니다")
	for i, q := range out.Questions {
		if strings.TrimSpace(q.Question) == "" {
			return nil, fmt.Errorf("llmgen question_pool: questions[%d] is empty: %w", i, aiworker.ErrSchemaInvalid)
		}
	}
	return out.Questions, nil
}

const followupSystem = `You are an interviewer. Read previousQuestion, answerText and history.
Classify answerIntent: NORMAL (an answer), CLARIFICATION (the candidate asks what is meant), DONT_KNOW (the candidate does not know).
For NORMAL write one follow-up question probing the weakest part of the answer; for CLARIFICATION restate previousQuestion more clearly;
for DONT_KNOW leave followupQuestion empty. Score the answer: specificity and logic from 1 to 5, structure one of STAR, PARTIAL_STAR, NONE,
correctness from 1 to 5 judged against parentExpectedSignal when given (else null). Plain text, no markdown.`

const followupSchema = `{"type":"object","additionalProperties":false,"required":["answerIntent","followupQuestion","answerEvaluation"],"properties":{
"answerIntent":{"type":"string","enum":["NORMAL","CLARIFICATION","DONT_KNOW"]},"followupQuestion":{"type":"string"},
"answerEvaluation":{"type":"object","additionalProperties":false,"required":["specificity","logic","structure","correctness"],"properties":{
"specificity":{"type":["number","null"]},"logic":{"type":["number","null"]},"structure":{"type":["string","null"]},"correctness":{"type":["number","null"]}}}}}`

// GenerateFollowup implements aiworker.FollowupGenerator.
func (g Generator) GenerateFollowup(ctx context.Context, job aiworker.Job, req *catalog.GenerateFollowupV1) (aiworker.Followup, error) {
	var out struct {
		AnswerIntent     string                   `json:"answerIntent"`
		FollowupQuestion string                   `json:"followupQuestion"`
		AnswerEvaluation catalog.AnswerEvaluation `json:"answerEvaluation"`
	}
	if err := g.complete(ctx, job, "followup", followupSystem, req, followupSchema, &out); err != nil {
		return aiworker.Followup{}, err
	}
	if out.AnswerIntent != catalog.IntentDontKnow && strings.TrimSpace(out.FollowupQuestion) == "" {
		return aiworker.Followup{}, fmt.Errorf("llmgen followup: empty followupQuestion for %s: %w", out.AnswerIntent, aiworker.ErrSchemaInvalid)
	}
	return aiworker.Followup{AnswerIntent: out.AnswerIntent, FollowupQuestion: out.FollowupQuestion, AnswerEvaluation: &out.AnswerEvaluation}, nil
}

// feedbackPanel is the preamble of every feedback evaluator's prompt.
const feedbackPanel = `You are one evaluator of an interview panel writing the final feedback of a session from its messages
(messages, mode, targetCompanyName, targetJobDescription). Plain text unless told otherwise. `

// feedbackEvaluator is one of the panel's parallel calls: its schema name,
// its part of the prompt and of the schema (feedbackPart), and the fields of
// the callback it owns.
type feedbackEvaluator struct {
	name, system, properties string
	required                 []string
	take                     func(dst *catalog.FeedbackCallbackV1, part catalog.FeedbackCallbackV1)
}

// feedbackEvaluators are the panel (§5.11, §5.12-3: "세부 평가 … 병렬"):
// each owns disjoint fields of the callback, so their outputs merge without
// conflict. highlights come with the summaries they must quote.
var feedbackEvaluators = []feedbackEvaluator{
	{
		name:       "feedback_scores",
		system:     `Score the session from 0 to 100: overallScore, technicalAccuracy, logicScore, communicationScore.`,
		properties: `"overallScore":{"type":"number"},"technicalAccuracy":{"type":"number"},"logicScore":{"type":"number"},"communicationScore":{"type":"number"}`,
		required:   []string{"overallScore", "technicalAccuracy", "logicScore", "communicationScore"},
		take: func(d *catalog.FeedbackCallbackV1, p catalog.FeedbackCallbackV1) {
			d.OverallScore, d.TechnicalAccuracy, d.LogicScore, d.CommunicationScore = p.OverallScore, p.TechnicalAccuracy, p.LogicScore, p.CommunicationScore
		},
	},
	{
		name:       "feedback_summary",
		system:     `Write strengthsSummary and weaknessesSummary; highlights must be exact substrings of strengthsSummary or weaknessesSummary.`,
		properties: `"strengthsSummary":{"type":"string"},"weaknessesSummary":{"type":"string"},"highlights":{"type":"array","items":{"type":"string"}}`,
		required:   []string{"strengthsSummary", "weaknessesSummary", "highlights"},
		take: func(d *catalog.FeedbackCallbackV1, p catalog.FeedbackCallbackV1) {
			d.StrengthsSummary, d.WeaknessesSummary, d.Highlights = p.StrengthsSummary, p.WeaknessesSummary, p.Highlights
		},
	},
	{
		name: "feedback_panel",
		system: `Write panelBreakdown: evaluate the SELF_INTRODUCTION answer separately as a panel item with evaluator "첫인상"; ` +
			`for JOB_TAILORED mode add panel items "직무 적합도" and "직무 이해도" using targetCompanyName and targetJobDescription. Scores 0 to 100.`,
		properties: `"panelBreakdown":{"type":"array","items":{"type":"object","additionalProperties":false,"required":["evaluator","dimension","score","detail","scoreRationale"],
"properties":{"evaluator":{"type":"string"},"dimension":{"type":"string"},"score":{"type":["number","null"]},"detail":{"type":"string"},"scoreRationale":{"type":"string"}}}}`,
		required: []string{"panelBreakdown"},
		take:     func(d *catalog.FeedbackCallbackV1, p catalog.FeedbackCallbackV1) { d.PanelBreakdown = p.PanelBreakdown },
	},
	{
		name: "feedback_coaching",
		system: `Write answerCoaching: one item per INTERVIEWEE answer except the self-introduction (messageId = that answer's id); ` +
			`modelAnswer and answerRewrite may use markdown.`,
		properties: `"answerCoaching":{"type":"array","items":{"type":"object","additionalProperties":false,"required":["messageId","modelAnswer","answerRewrite","coachingComment"],
"properties":{"messageId":{"type":"integer"},"modelAnswer":{"type":"string"},"answerRewrite":{"type":"string"},"coachingComment":{"type":"string"}}}}`,
		required: []string{"answerCoaching"},
		take:     func(d *catalog.FeedbackCallbackV1, p catalog.FeedbackCallbackV1) { d.AnswerCoaching = p.AnswerCoaching },
	},
	{
		name:       "feedback_study",
		system:     `Write improvementKeywords (short topics to study) and studyPlan (concrete steps, in order).`,
		properties: `"improvementKeywords":{"type":"array","items":{"type":"string"}},"studyPlan":{"type":"array","items":{"type":"string"}}`,
		required:   []string{"improvementKeywords", "studyPlan"},
		take: func(d *catalog.FeedbackCallbackV1, p catalog.FeedbackCallbackV1) {
			d.ImprovementKeywords, d.StudyPlan = p.ImprovementKeywords, p.StudyPlan
		},
	},
}

func (e feedbackEvaluator) schema() string {
	req, _ := json.Marshal(e.required)
	return `{"type":"object","additionalProperties":false,"required":` + string(req) + `,"properties":{` + e.properties + `}}`
}

// FeedbackEvaluators names the panel's evaluators: the schema name of each
// of GenerateFeedback's parallel calls.
func FeedbackEvaluators() []string {
	names := make([]string, len(feedbackEvaluators))
	for i, e := range feedbackEvaluators {
		names[i] = e.name
	}
	return names
}

// GenerateFeedback implements aiworker.FeedbackGenerator as a panel of
// evaluators called in parallel, each with its own part of the schema,
// merged into one feedback. Progress goes to the session as
// FEEDBACK_PROGRESS: PREPARING, SCORING completed/total as the evaluators
// finish, FINALIZING. The first evaluator to fail cancels the others and
// is the error. No report is rendered (reportS3Key null: §5.11 allows it).
func (g Generator) GenerateFeedback(ctx context.Context, job aiworker.Job, req *catalog.GenerateFeedbackV1) (catalog.FeedbackCallbackV1, error) {
	job.FeedbackProgress(ctx, req.SessionID, aiworker.PhasePreparing, "면접 기록을 정리하고 있습니다")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	scoring := job.StartScoring(ctx, req.SessionID, len(feedbackEvaluators), "평가위원이 답변을 평가하고 있습니다")
	parts := make([]catalog.FeedbackCallbackV1, len(feedbackEvaluators))
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for i, e := range feedbackEvaluators {
		wg.Go(func() {
			defer scoring.Done()
			if err := g.complete(ctx, job, e.name, feedbackPanel+e.system, req, e.schema(), &parts[i]); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
					cancel()
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return catalog.FeedbackCallbackV1{}, firstErr
	}
	job.FeedbackProgress(ctx, req.SessionID, aiworker.PhaseFinalizing, "리포트를 정리하고 있습니다")
	var out catalog.FeedbackCallbackV1
	for i, e := range feedbackEvaluators {
		e.take(&out, parts[i])
	}
	return out, nil
}
