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

// Generator implements aiworker.QuestionGenerator, FollowupGenerator and
// FeedbackGenerator.
type Generator struct {
	Client Completer
	// Model overrides the client's model ("" keeps it).
	Model string
}

var (
	_ aiworker.QuestionGenerator = Generator{}
	_ aiworker.FollowupGenerator = Generator{}
	_ aiworker.FeedbackGenerator = Generator{}
)

func (g Generator) complete(ctx context.Context, name, system string, input any, schema string, out any) error {
	user, err := json.Marshal(input)
	if err != nil {
		return fmt.Errorf("llmgen %s: encode input: %w", name, err)
	}
	resp, err := g.Client.Complete(ctx, llm.Request{
		Model: g.Model,
		Messages: []llm.Message{
			{Role: "system", Content: system},
			{Role: "user", Content: string(user)},
		},
		Schema:        llm.Schema{Name: name, JSON: json.RawMessage(schema), Strict: true},
		PromptVersion: PromptVersion,
	})
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
Do not repeat recentQuestions. For JOB_TAILORED mode use targetCompanyName and targetJobDescription for fit and motivation questions.
For each question: category (e.g. PROJECT_DEEP_DIVE, TECH_STACK, CS_FUNDAMENTAL, BEHAVIORAL), question, jobCategory (one of jobCategories or null),
targetEvidence (a quote of the material the question rests on; required for PROJECT and TECH categories, else may be empty),
expectedSignal (what a strong answer must show; internal, never shown to the candidate). Plain text, no markdown.`

const questionsSchema = `{"type":"object","additionalProperties":false,"required":["questions"],"properties":{"questions":{"type":"array","items":{
"type":"object","additionalProperties":false,"required":["category","question","jobCategory","targetEvidence","expectedSignal"],"properties":{
"category":{"type":"string"},"question":{"type":"string"},"jobCategory":{"type":["string","null"]},
"targetEvidence":{"type":"string"},"expectedSignal":{"type":"string"}}}}}}`

// GenerateQuestions implements aiworker.QuestionGenerator.
func (g Generator) GenerateQuestions(ctx context.Context, job aiworker.Job, req *catalog.GenerateQuestionsV1) ([]catalog.Question, error) {
	job.NotifySession(ctx, catalog.EventPoolProgress, map[string]any{"sessionId": req.SessionID, "phase": "GENERATING", "message": "질문을 생성하고 있습니다"})
	var out struct {
		Questions []catalog.Question `json:"questions"`
	}
	if err := g.complete(ctx, "question_pool", questionsSystem, req, questionsSchema, &out); err != nil {
		return nil, err
	}
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
func (g Generator) GenerateFollowup(ctx context.Context, _ aiworker.Job, req *catalog.GenerateFollowupV1) (aiworker.Followup, error) {
	var out struct {
		AnswerIntent     string                   `json:"answerIntent"`
		FollowupQuestion string                   `json:"followupQuestion"`
		AnswerEvaluation catalog.AnswerEvaluation `json:"answerEvaluation"`
	}
	if err := g.complete(ctx, "followup", followupSystem, req, followupSchema, &out); err != nil {
		return aiworker.Followup{}, err
	}
	if out.AnswerIntent != catalog.IntentDontKnow && strings.TrimSpace(out.FollowupQuestion) == "" {
		return aiworker.Followup{}, fmt.Errorf("llmgen followup: empty followupQuestion for %s: %w", out.AnswerIntent, aiworker.ErrSchemaInvalid)
	}
	return aiworker.Followup{AnswerIntent: out.AnswerIntent, FollowupQuestion: out.FollowupQuestion, AnswerEvaluation: &out.AnswerEvaluation}, nil
}

const feedbackSystem = `You are an interview panel writing the final feedback of a session from its messages.
Scores are 0 to 100. Evaluate the SELF_INTRODUCTION answer separately as a panel item with evaluator "첫인상".
For JOB_TAILORED mode add panel items "직무 적합도" and "직무 이해도" using targetCompanyName and targetJobDescription.
answerCoaching: one item per INTERVIEWEE answer except the self-introduction (messageId = that answer's id).
highlights must be exact substrings of strengthsSummary or weaknessesSummary. Plain text everywhere except modelAnswer and answerRewrite (markdown allowed).`

const feedbackSchema = `{"type":"object","additionalProperties":false,"required":["overallScore","technicalAccuracy","logicScore","communicationScore",
"strengthsSummary","weaknessesSummary","improvementKeywords","studyPlan","highlights","answerCoaching","panelBreakdown"],"properties":{
"overallScore":{"type":"number"},"technicalAccuracy":{"type":"number"},"logicScore":{"type":"number"},"communicationScore":{"type":"number"},
"strengthsSummary":{"type":"string"},"weaknessesSummary":{"type":"string"},
"improvementKeywords":{"type":"array","items":{"type":"string"}},"studyPlan":{"type":"array","items":{"type":"string"}},
"highlights":{"type":"array","items":{"type":"string"}},
"answerCoaching":{"type":"array","items":{"type":"object","additionalProperties":false,"required":["messageId","modelAnswer","answerRewrite","coachingComment"],
"properties":{"messageId":{"type":"integer"},"modelAnswer":{"type":"string"},"answerRewrite":{"type":"string"},"coachingComment":{"type":"string"}}}},
"panelBreakdown":{"type":"array","items":{"type":"object","additionalProperties":false,"required":["evaluator","dimension","score","detail","scoreRationale"],
"properties":{"evaluator":{"type":"string"},"dimension":{"type":"string"},"score":{"type":["number","null"]},"detail":{"type":"string"},"scoreRationale":{"type":"string"}}}}}}`

// GenerateFeedback implements aiworker.FeedbackGenerator. No report is
// rendered (reportS3Key null: §5.11 allows it).
func (g Generator) GenerateFeedback(ctx context.Context, job aiworker.Job, req *catalog.GenerateFeedbackV1) (catalog.FeedbackCallbackV1, error) {
	job.NotifySession(ctx, catalog.EventFeedbackProgress, map[string]any{"sessionId": req.SessionID, "phase": "SCORING", "message": "피드백을 생성하고 있습니다", "completed": 0, "total": 1})
	var out catalog.FeedbackCallbackV1
	if err := g.complete(ctx, "feedback", feedbackSystem, req, feedbackSchema, &out); err != nil {
		return catalog.FeedbackCallbackV1{}, err
	}
	return out, nil
}
