package interviews

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/eventpipe/eventpipe/app/llm"
)

// Thresholds of the insufficient-evidence short-circuit (spec: "duration <
// 60s or < 2 substantive answers").
const (
	MinReportDurationSeconds = 60
	MinSubstantiveAnswers    = 2
	// MinSubstantiveWords makes an answer substantive. The spec does not
	// define "substantive"; five words rules out "yes", "I don't know" and
	// silence while keeping any real attempt at an answer.
	MinSubstantiveWords = 5
)

// Recommendations a report may carry.
const (
	RecommendStrongHire           = "strong_hire"
	RecommendHire                 = "hire"
	RecommendNoHire               = "no_hire"
	RecommendStrongNoHire         = "strong_no_hire"
	RecommendInsufficientEvidence = "insufficient_evidence"
)

// ReportGenerator writes a report from an interview. Errors are returned to
// the broker for a retry (after three attempts the message is
// dead-lettered); Retry-After hints (failure.AsTransient) are honoured.
type ReportGenerator interface {
	Generate(ctx context.Context, iv Interview) (ReportContent, error)
}

// substantiveAnswers counts the answers of at least MinSubstantiveWords
// words.
func substantiveAnswers(transcript []QA) int {
	n := 0
	for _, qa := range transcript {
		if len(strings.Fields(qa.Answer)) >= MinSubstantiveWords {
			n++
		}
	}
	return n
}

// InsufficientEvidence reports whether an interview is too short or too
// thin for the model, and why.
func InsufficientEvidence(iv Interview) (bool, string) {
	if iv.DurationSeconds < MinReportDurationSeconds {
		return true, fmt.Sprintf("the interview lasted %d s, under %d s", iv.DurationSeconds, MinReportDurationSeconds)
	}
	if n := substantiveAnswers(iv.Transcript); n < MinSubstantiveAnswers {
		return true, fmt.Sprintf("%d substantive answers, fewer than %d", n, MinSubstantiveAnswers)
	}
	return false, ""
}

// insufficientEvidenceReport is the report written without the model.
func insufficientEvidenceReport(why string, now time.Time) ReportContent {
	return ReportContent{
		Recommendation:       RecommendInsufficientEvidence,
		Summary:              "Not enough evidence for an assessment: " + why + ".",
		InsufficientEvidence: true,
		SkillAssessments:     []SkillAssessment{},
		QuestionAnalysis:     []QuestionReview{},
		Generation:           Generation{Model: "none", PromptVersion: "insufficient-evidence-v1", GeneratedAt: now},
	}
}

// PromptVersion identifies the prompt and schema below; bump it with any
// change to either, so stored reports say which one made them.
const PromptVersion = "interview-report-v1"

// Completer is the part of *llm.Client the generator uses.
type Completer interface {
	CompleteJSON(ctx context.Context, req llm.Request, out any) (llm.Response, error)
}

// LLMGenerator writes reports with an OpenAI-compatible chat model and
// structured output.
type LLMGenerator struct {
	Client Completer
	// Now stamps GeneratedAt; time.Now when nil.
	Now func() time.Time
}

var _ ReportGenerator = LLMGenerator{}

const systemPrompt = `You are an experienced technical interviewer. You assess a candidate from the
transcript of an interview. Judge only what the answers show; do not invent facts.
Scores: overallScore 0-100; each skill and question 1-5. Recommendation is one of
strong_hire, hire, no_hire, strong_no_hire. Write concise, specific evidence.`

var reportSchema = json.RawMessage(`{
  "type": "object",
  "additionalProperties": false,
  "required": ["overallScore", "recommendation", "summary", "skillAssessments", "questionAnalysis"],
  "properties": {
    "overallScore": {"type": "integer", "minimum": 0, "maximum": 100},
    "recommendation": {"type": "string", "enum": ["strong_hire", "hire", "no_hire", "strong_no_hire"]},
    "summary": {"type": "string"},
    "skillAssessments": {"type": "array", "items": {
      "type": "object", "additionalProperties": false, "required": ["skill", "score", "evidence"],
      "properties": {"skill": {"type": "string"}, "score": {"type": "integer", "minimum": 1, "maximum": 5}, "evidence": {"type": "string"}}}},
    "questionAnalysis": {"type": "array", "items": {
      "type": "object", "additionalProperties": false, "required": ["question", "score", "strengths", "concerns"],
      "properties": {"question": {"type": "string"}, "score": {"type": "integer", "minimum": 1, "maximum": 5},
        "strengths": {"type": "string"}, "concerns": {"type": "string"}}}}
  }
}`)

// modelReport is the model's answer, checked beyond what the schema can
// say (the server enforces it only in strict mode, and a compatible server
// may not at all).
type modelReport struct {
	OverallScore     int               `json:"overallScore"`
	Recommendation   string            `json:"recommendation"`
	Summary          string            `json:"summary"`
	SkillAssessments []SkillAssessment `json:"skillAssessments"`
	QuestionAnalysis []QuestionReview  `json:"questionAnalysis"`
}

// Validate implements llm.Validator.
func (r *modelReport) Validate() error {
	var errs []error
	if r.OverallScore < 0 || r.OverallScore > 100 {
		errs = append(errs, fmt.Errorf("overallScore %d out of 0..100", r.OverallScore))
	}
	switch r.Recommendation {
	case RecommendStrongHire, RecommendHire, RecommendNoHire, RecommendStrongNoHire:
	default:
		errs = append(errs, fmt.Errorf("recommendation %q unknown", truncate(r.Recommendation, 40)))
	}
	if strings.TrimSpace(r.Summary) == "" {
		errs = append(errs, errors.New("summary is empty"))
	}
	for _, s := range r.SkillAssessments {
		if s.Score < 1 || s.Score > 5 {
			errs = append(errs, fmt.Errorf("skill %q score %d out of 1..5", truncate(s.Skill, 40), s.Score))
		}
	}
	for _, q := range r.QuestionAnalysis {
		if q.Score < 1 || q.Score > 5 {
			errs = append(errs, fmt.Errorf("question score %d out of 1..5", q.Score))
		}
	}
	return errors.Join(errs...)
}

// Generate implements ReportGenerator.
func (g LLMGenerator) Generate(ctx context.Context, iv Interview) (ReportContent, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "Interview duration: %d seconds.\n\n", iv.DurationSeconds)
	for i, qa := range iv.Transcript {
		fmt.Fprintf(&b, "Question %d: %s\nAnswer %d: %s\n\n", i+1, qa.Question, i+1, qa.Answer)
	}
	temperature := 0.2
	var out modelReport
	resp, err := g.Client.CompleteJSON(ctx, llm.Request{
		Messages: []llm.Message{
			{Role: "system", Content: systemPrompt},
			{Role: "user", Content: b.String()},
		},
		Schema:        llm.Schema{Name: "interview_report", Description: "An assessment of one interview.", JSON: reportSchema, Strict: true},
		Temperature:   &temperature,
		PromptVersion: PromptVersion,
	}, &out)
	if err != nil {
		return ReportContent{}, fmt.Errorf("generate report for interview %s: %w", iv.ID, err)
	}
	now := time.Now
	if g.Now != nil {
		now = g.Now
	}
	return ReportContent{
		OverallScore:     out.OverallScore,
		Recommendation:   out.Recommendation,
		Summary:          out.Summary,
		SkillAssessments: nonNil(out.SkillAssessments),
		QuestionAnalysis: nonNil(out.QuestionAnalysis),
		Generation: Generation{
			Model:            resp.Model,
			PromptVersion:    resp.PromptVersion,
			PromptTokens:     resp.Usage.PromptTokens,
			CompletionTokens: resp.Usage.CompletionTokens,
			TotalTokens:      resp.Usage.TotalTokens,
			GeneratedAt:      now().UTC(),
		},
	}, nil
}

// SampleGenerator writes a fixed, clearly labelled report without any
// model: the embedded demo's generator when no API key is configured, so
// that `make run` shows a report being made with no account anywhere. Never
// use it for real interviews.
type SampleGenerator struct{}

var _ ReportGenerator = SampleGenerator{}

// Generate implements ReportGenerator.
func (SampleGenerator) Generate(_ context.Context, iv Interview) (ReportContent, error) {
	qs := make([]QuestionReview, 0, len(iv.Transcript))
	for _, qa := range iv.Transcript {
		qs = append(qs, QuestionReview{Question: qa.Question, Score: 3, Strengths: "sample", Concerns: "sample"})
	}
	return ReportContent{
		OverallScore:     60,
		Recommendation:   RecommendHire,
		Summary:          "Sample report (no LLM configured): the pipeline ran end to end.",
		SkillAssessments: []SkillAssessment{{Skill: "communication", Score: 3, Evidence: "sample"}},
		QuestionAnalysis: qs,
		Generation:       Generation{Model: "sample", PromptVersion: "sample-v1", GeneratedAt: time.Now().UTC()},
	}, nil
}
