package realproc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/eventpipe/eventpipe/app/llm"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker/llmgen"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
)

// ReportKey is the feedback report's key (§5.11: feedback/{session_id}/report.md).
func ReportKey(sessionID int64) string { return fmt.Sprintf("feedback/%d/report.md", sessionID) }

// GenerateFeedback implements aiworker.FeedbackGenerator: the llmgen
// feedback, then the deterministic GFM report (RenderReport, no model call)
// stored at ReportKey. A report that cannot be stored leaves reportS3Key
// null and the feedback a success (§5.11: "렌더·업로드 실패는 … None 폴백").
func (p *Processors) GenerateFeedback(ctx context.Context, job aiworker.Job, r *catalog.GenerateFeedbackV1) (catalog.FeedbackCallbackV1, error) {
	// llmgen publishes PREPARING, SCORING and FINALIZING; the report is
	// rendered within FINALIZING.
	fb, err := p.cfg.Generator.GenerateFeedback(ctx, job, r)
	if err != nil {
		return fb, err
	}
	key := ReportKey(r.SessionID)
	if err := p.cfg.Objects.Put(ctx, key, []byte(RenderReport(r, fb)), "text/markdown; charset=utf-8"); err != nil {
		p.cfg.Logger.WarnContext(ctx, "stackup feedback report not stored; reportS3Key null", slog.String("message_id", job.Envelope.MessageID),
			slog.String("key", key), slog.Any("error", err))
		fb.ReportS3Key = nil
		return fb, nil
	}
	fb.ReportS3Key = &key
	return fb, nil
}

// RenderReport renders the feedback as a GFM learning report: scores,
// summaries, panel items, coaching per answer and the study plan, in the
// order given. The same input renders the same bytes.
func RenderReport(r *catalog.GenerateFeedbackV1, fb catalog.FeedbackCallbackV1) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# 면접 피드백 리포트 (세션 %d)\n\n", r.SessionID)
	if r.TargetCompanyName != nil && *r.TargetCompanyName != "" {
		fmt.Fprintf(&b, "지원 회사: %s  \n", md(*r.TargetCompanyName))
	}
	if r.Mode != "" {
		fmt.Fprintf(&b, "모드: %s\n\n", md(r.Mode))
	}
	b.WriteString("## 점수\n\n| 항목 | 점수 |\n| --- | ---: |\n")
	for _, s := range []struct {
		name string
		v    *float64
	}{{"종합", fb.OverallScore}, {"기술 정확도", fb.TechnicalAccuracy}, {"논리", fb.LogicScore}, {"전달력", fb.CommunicationScore}} {
		fmt.Fprintf(&b, "| %s | %s |\n", s.name, score(s.v))
	}
	section := func(title, body string) {
		if strings.TrimSpace(body) != "" {
			fmt.Fprintf(&b, "\n## %s\n\n%s\n", title, strings.TrimSpace(body))
		}
	}
	section("강점", fb.StrengthsSummary)
	section("개선할 점", fb.WeaknessesSummary)
	if len(fb.PanelBreakdown) > 0 {
		b.WriteString("\n## 평가위원별 평가\n\n| 평가위원 | 관점 | 점수 | 평가 |\n| --- | --- | ---: | --- |\n")
		for _, ps := range fb.PanelBreakdown {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", cell(ps.Evaluator), cell(ps.Dimension), score(ps.Score), cell(ps.Detail))
		}
	}
	if len(fb.AnswerCoaching) > 0 {
		questions := map[int64]string{}
		for _, m := range r.Messages {
			questions[m.ID] = m.Content
		}
		parents := map[int64]int64{}
		for _, m := range r.Messages {
			if m.ParentMessageID != nil {
				parents[m.ID] = *m.ParentMessageID
			}
		}
		b.WriteString("\n## 답변별 코칭\n")
		for i, c := range fb.AnswerCoaching {
			fmt.Fprintf(&b, "\n### %d. %s\n\n", i+1, md(firstLine(questions[parents[c.MessageID]], fmt.Sprintf("답변 %d", c.MessageID))))
			if a := questions[c.MessageID]; a != "" {
				fmt.Fprintf(&b, "> %s\n\n", strings.ReplaceAll(strings.TrimSpace(a), "\n", "\n> "))
			}
			if c.CoachingComment != "" {
				fmt.Fprintf(&b, "**코칭:** %s\n\n", strings.TrimSpace(c.CoachingComment))
			}
			if c.ModelAnswer != "" {
				fmt.Fprintf(&b, "**모범 답안**\n\n%s\n\n", strings.TrimSpace(c.ModelAnswer))
			}
			if c.AnswerRewrite != "" {
				fmt.Fprintf(&b, "**다시 쓴 답변**\n\n%s\n", strings.TrimSpace(c.AnswerRewrite))
			}
		}
	}
	list := func(title string, items []string) {
		if len(items) == 0 {
			return
		}
		fmt.Fprintf(&b, "\n## %s\n\n", title)
		for _, it := range items {
			fmt.Fprintf(&b, "- %s\n", md(it))
		}
	}
	list("키워드", fb.ImprovementKeywords)
	list("학습 계획", fb.StudyPlan)
	return b.String()
}

func score(v *float64) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf("%.1f", *v)
}

// md keeps a one-line value from opening markdown structure.
func md(s string) string { return strings.Join(strings.Fields(s), " ") }

// cell is md for a table cell (pipes escaped).
func cell(s string) string { return strings.ReplaceAll(md(s), "|", `\|`) }

func firstLine(s, fallback string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if s == "" {
		return fallback
	}
	return s
}

const intentSystem = `You are an interviewer. Read previousQuestion, answerText and history.
Classify answerIntent: NORMAL (an answer), CLARIFICATION (the candidate asks what is meant), DONT_KNOW (the candidate does not know).
Score the answer: specificity and logic from 1 to 5, structure one of STAR, PARTIAL_STAR, NONE,
correctness from 1 to 5 judged against parentExpectedSignal and retrievedContext (excerpts of the candidate's documents) when given (else null).`

const intentSchema = `{"type":"object","additionalProperties":false,"required":["answerIntent","answerEvaluation"],"properties":{
"answerIntent":{"type":"string","enum":["NORMAL","CLARIFICATION","DONT_KNOW"]},
"answerEvaluation":{"type":"object","additionalProperties":false,"required":["specificity","logic","structure","correctness"],"properties":{
"specificity":{"type":["number","null"]},"logic":{"type":["number","null"]},"structure":{"type":["string","null"]},"correctness":{"type":["number","null"]}}}}}`

const questionNormalSystem = `You are an interviewer. Write one follow-up question probing the weakest part of the candidate's answer to previousQuestion.
Output only the question, plain text, no markdown, in the language of the interview.`

const questionClarifySystem = `You are an interviewer. The candidate asked what previousQuestion means. Restate previousQuestion more clearly, in one or two sentences.
Output only the restated question, plain text, no markdown, in the language of the interview.`

// GenerateFollowup implements aiworker.FollowupGenerator with a streamed
// question: first the answer's intent and evaluation (structured output),
// then — for NORMAL and CLARIFICATION — the question streamed from the
// chat-completions API through an aiworker.FollowupStream: each piece
// published as SESSION_MESSAGE_DELTA {messageId: followupMessageId, seq,
// text} (§5.12-1), each sentence synthesised in the background
// (synthesizeSegment) and announced as SESSION_MESSAGE_AUDIO (§5.12-2), all
// gathered before the callback. Both are volatile: a failed publish or
// synthesis is only logged. Without a followupMessageId (the legacy path)
// nothing is streamed to the session.
func (p *Processors) GenerateFollowup(ctx context.Context, job aiworker.Job, r *catalog.GenerateFollowupV1) (aiworker.Followup, error) {
	// RAG (§5.8: "contextDocumentIds 로 RAG 검색 → correctness 판정"):
	// the answer's context from the user's documents, for the evaluation
	// and the question.
	in := struct {
		*catalog.GenerateFollowupV1
		RetrievedContext []string `json:"retrievedContext,omitempty"`
	}{GenerateFollowupV1: r}
	if len(r.ContextDocumentIDs) > 0 {
		in.RetrievedContext = p.Retrieve(ctx, job, r.ContextDocumentIDs, r.PreviousQuestion+"\n"+r.AnswerText)
	}
	input, err := json.Marshal(in)
	if err != nil {
		return aiworker.Followup{}, fmt.Errorf("followup: encode input: %w", err)
	}
	resp, err := p.complete(ctx, job, llm.Request{
		Messages:      []llm.Message{{Role: "system", Content: intentSystem}, {Role: "user", Content: string(input)}},
		Schema:        llm.Schema{Name: "followup_intent", JSON: json.RawMessage(intentSchema), Strict: true},
		PromptVersion: "stackup-followup-stream-2026-12-01",
	})
	if err != nil {
		if errors.Is(err, llm.ErrInvalidOutput) {
			return aiworker.Followup{}, fmt.Errorf("followup intent: %w: %w", aiworker.ErrSchemaInvalid, err)
		}
		return aiworker.Followup{}, fmt.Errorf("followup intent: %w", err)
	}
	var out struct {
		AnswerIntent     string                   `json:"answerIntent"`
		AnswerEvaluation catalog.AnswerEvaluation `json:"answerEvaluation"`
	}
	if err := json.Unmarshal(resp.Content, &out); err != nil {
		return aiworker.Followup{}, fmt.Errorf("followup intent: %w: %w", aiworker.ErrSchemaInvalid, err)
	}
	f := aiworker.Followup{AnswerIntent: out.AnswerIntent, AnswerEvaluation: &out.AnswerEvaluation}
	var system string
	switch out.AnswerIntent {
	case catalog.IntentDontKnow:
		return f, nil
	case catalog.IntentNormal:
		system = questionNormalSystem
	default:
		system = questionClarifySystem
	}
	stream := job.StreamFollowup(ctx, r, p.synthesizeSegment)
	start := time.Now()
	q, err := p.cfg.Model.Stream(ctx, llm.StreamRequest{Messages: []llm.Message{{Role: "system", Content: system}, {Role: "user", Content: string(input)}}},
		func(delta string) error {
			stream.Delta(delta)
			return nil
		})
	// The stream reports no usage: the row has the latency and the outcome.
	p.LogCall(ctx, job, llmgen.Call{RequestType: "followup_question_stream", Model: p.streamModel(), Latency: time.Since(start), Err: err})
	if err != nil {
		stream.Abort()
	} else {
		stream.Finish()
	}
	if err != nil {
		if errors.Is(err, llm.ErrInvalidOutput) {
			return aiworker.Followup{}, fmt.Errorf("followup question: %w: %w", aiworker.ErrSchemaInvalid, err)
		}
		return aiworker.Followup{}, fmt.Errorf("followup question: %w", err)
	}
	if f.FollowupQuestion = strings.TrimSpace(q); f.FollowupQuestion == "" {
		return aiworker.Followup{}, fmt.Errorf("followup question: empty for %s: %w", out.AnswerIntent, aiworker.ErrSchemaInvalid)
	}
	return f, nil
}

// streamModel names the model of the streamed question for its ai-logs row:
// the client's, when it says.
func (p *Processors) streamModel() string {
	if m, ok := p.cfg.Model.(interface{ Model() string }); ok {
		return m.Model()
	}
	return ""
}
