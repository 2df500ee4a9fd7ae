package aiworker

import (
	"context"
	"fmt"

	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
)

// The work of each request type sits behind one small interface, declared
// here by its consumer. Implementations may return a *DomainError for a
// failure with its own errorCode (PDF_PARSE_FAILED, TTS_API_ERROR, …), an
// error wrapping ErrSchemaInvalid (or llm.ErrInvalidOutput) when the model's
// output does not fit the schema, a failure.Transient error for an outage
// worth retrying, or anything else.

// Analysis is a successful document analysis (§5.4).
type Analysis struct {
	Summary             string
	TechStack           []string
	DocumentPath        string
	EmbeddingChunkCount *int
}

// ResumeAnalyzer analyses a resume PDF (analyze.resume).
type ResumeAnalyzer interface {
	AnalyzeResume(ctx context.Context, job Job, req *catalog.AnalyzeResumeV1) (Analysis, error)
}

// CoverLetterAnalyzer analyses a cover letter (analyze.cover_letter, our
// extension).
type CoverLetterAnalyzer interface {
	AnalyzeCoverLetter(ctx context.Context, job Job, req *catalog.AnalyzeCoverLetterV1) (Analysis, error)
}

// RepositoryAnalyzer analyses a GitHub repository (analyze.repository). The
// token it needs is borrowed from Core at analysis time, never carried in
// the message (§5.2).
type RepositoryAnalyzer interface {
	AnalyzeRepository(ctx context.Context, job Job, req *catalog.AnalyzeRepositoryV1) (Analysis, error)
}

// WebAnalyzer analyses a web resume (analyze.web).
type WebAnalyzer interface {
	AnalyzeWeb(ctx context.Context, job Job, req *catalog.AnalyzeWebV1) (Analysis, error)
}

// QuestionGenerator generates a session's question pool (generate.questions).
type QuestionGenerator interface {
	GenerateQuestions(ctx context.Context, job Job, req *catalog.GenerateQuestionsV1) ([]catalog.Question, error)
}

// Followup is a generated follow-up (§5.9).
type Followup struct {
	AnswerIntent     string
	FollowupQuestion string
	AnswerEvaluation *catalog.AnswerEvaluation
}

// FollowupGenerator generates a follow-up question (generate.followup).
type FollowupGenerator interface {
	GenerateFollowup(ctx context.Context, job Job, req *catalog.GenerateFollowupV1) (Followup, error)
}

// FeedbackGenerator generates a session's feedback (generate.feedback). It
// returns the success payload's content; sessionId, attemptId and status
// are filled in by the worker.
type FeedbackGenerator interface {
	GenerateFeedback(ctx context.Context, job Job, req *catalog.GenerateFeedbackV1) (catalog.FeedbackCallbackV1, error)
}

// Speech is a synthesised question (§5.9b).
type Speech struct {
	AudioKey string
	// DurationSec is nil when the TTS API does not report it.
	DurationSec *float64
}

// SpeechSynthesizer synthesises a question (generate.tts).
type SpeechSynthesizer interface {
	SynthesizeSpeech(ctx context.Context, job Job, req *catalog.GenerateTTSV1) (Speech, error)
}

// VoiceAnalysis is a transcribed answer with its metrics (§5.9d), all
// nullable.
type VoiceAnalysis struct {
	Transcript            *string
	SpeakingRateWpm       *float64
	SilenceDurationSec    *float64
	FillerWordCounts      map[string]int
	PronunciationAccuracy *float64
}

// VoiceAnalyzer transcribes and measures a voice answer (analyze.voice).
type VoiceAnalyzer interface {
	AnalyzeVoice(ctx context.Context, job Job, req *catalog.AnalyzeVoiceV1) (VoiceAnalysis, error)
}

// Processors are the implementations; nil means not configured, and the
// worker refuses to start a queue whose processor is nil.
type Processors struct {
	Resume      ResumeAnalyzer
	CoverLetter CoverLetterAnalyzer
	Repository  RepositoryAnalyzer
	Web         WebAnalyzer
	Questions   QuestionGenerator
	Followup    FollowupGenerator
	Feedback    FeedbackGenerator
	TTS         SpeechSynthesizer
	Voice       VoiceAnalyzer
}

// DomainError is a failure the processor classified itself (§6: "도메인 예외
// … 각 컨슈머의 FAILED payload 팩토리가 코드·retriable 분류를 보존한다").
// The FAILED callback carries Code and Retriable as they are; Type names the
// exception in errorMessage ("Type: message").
type DomainError struct {
	Type      string
	Code      string
	Retriable bool
	Err       error
}

// Error implements error.
func (e *DomainError) Error() string {
	return fmt.Sprintf("%s (%s): %v", e.Type, e.Code, e.Err)
}

// Unwrap returns the cause.
func (e *DomainError) Unwrap() error { return e.Err }
