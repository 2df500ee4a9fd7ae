package catalog

import (
	"encoding/json"
	"fmt"

	"github.com/eventpipe/eventpipe/handlers/stackup/envelope"
)

// Status values shared by the callbacks. A callback without status is OK
// (§5.7, §5.11: "status 미명시(구버전)는 OK 로 취급").
const (
	StatusOK        = "OK"
	StatusFailed    = "FAILED"
	StatusAnalyzed  = "ANALYZED"
	StatusSucceeded = "SUCCEEDED"
)

// Target types of callback.analysis. COVER_LETTER is our extension
// (eventpipe's rule: analyze.cover_letter mirrors analyze.resume).
const (
	TargetResume      = "RESUME"
	TargetRepository  = "REPOSITORY"
	TargetWeb         = "WEB"
	TargetCoverLetter = "COVER_LETTER"
)

// Kinds of callback.questions.
const (
	KindPool     = "POOL"
	KindFollowup = "FOLLOWUP"
)

// Answer intents of a FOLLOWUP callback (§5.8).
const (
	IntentNormal        = "NORMAL"
	IntentClarification = "CLARIFICATION"
	IntentDontKnow      = "DONT_KNOW"
)

// Error codes of the generation failure signal (§5.7, §5.11).
const (
	ErrGenerationFailed        = "GENERATION_FAILED"
	ErrGenerationSchemaInvalid = "GENERATION_SCHEMA_INVALID"
	ErrUnexpected              = "UNEXPECTED"
)

// AnalyzeResumeV1 is §5.1.
type AnalyzeResumeV1 struct {
	ResumeID           int64  `json:"resumeId"`
	FilePath           string `json:"filePath"`
	AnalyzedDocumentID int64  `json:"analyzedDocumentId"`
}

// Validate implements Payload: v1's rules are all its schema's (the
// StackUp catalog of app/schemas), which Decode and DecodePayload check first.
func (*AnalyzeResumeV1) Validate(envelope.Envelope) error { return nil }

// AnalyzeCoverLetterV1 is our extension for analyze.cover_letter, which §5
// routes (§1) but does not describe: it mirrors analyze.resume
// (coverLetterId for resumeId), with callback targetType COVER_LETTER.
type AnalyzeCoverLetterV1 struct {
	CoverLetterID      int64  `json:"coverLetterId"`
	FilePath           string `json:"filePath"`
	AnalyzedDocumentID int64  `json:"analyzedDocumentId"`
}

// Validate implements Payload: v1's rules are all its schema's (the
// StackUp catalog of app/schemas), which Decode and DecodePayload check first.
func (*AnalyzeCoverLetterV1) Validate(envelope.Envelope) error { return nil }

// AnalyzeRepositoryV1 is §5.2. It carries no token: the AI server borrows
// one from Core's internal API at analysis time (§5.2, §10).
type AnalyzeRepositoryV1 struct {
	RepositoryID       int64  `json:"repositoryId"`
	RepoFullName       string `json:"repoFullName"`
	DefaultBranch      string `json:"defaultBranch"`
	AnalyzedDocumentID int64  `json:"analyzedDocumentId"`
}

// Validate implements Payload: v1's rules are all its schema's (the
// StackUp catalog of app/schemas), which Decode and DecodePayload check first.
func (*AnalyzeRepositoryV1) Validate(envelope.Envelope) error { return nil }

// AnalyzeWebV1 is §5.3.
type AnalyzeWebV1 struct {
	ResumeID           int64  `json:"resumeId"`
	URL                string `json:"url"`
	AnalyzedDocumentID int64  `json:"analyzedDocumentId"`
}

// Validate implements Payload: v1's rules are all its schema's (the
// StackUp catalog of app/schemas), which Decode and DecodePayload check first.
func (*AnalyzeWebV1) Validate(envelope.Envelope) error { return nil }

// AnalysisCallbackV1 is §5.4 (success) and §5.5 (failure).
type AnalysisCallbackV1 struct {
	TargetType          string   `json:"targetType"`
	TargetID            int64    `json:"targetId"`
	Status              string   `json:"status,omitempty"`
	Summary             string   `json:"summary,omitempty"`
	TechStack           []string `json:"techStack,omitempty"`
	DocumentPath        string   `json:"documentPath,omitempty"`
	EmbeddingChunkCount *int     `json:"embeddingChunkCount,omitempty"`
	ErrorCode           string   `json:"errorCode,omitempty"`
	ErrorMessage        string   `json:"errorMessage,omitempty"`
	Retriable           *bool    `json:"retriable,omitempty"`
}

// Failed reports a FAILED callback.
func (c *AnalysisCallbackV1) Failed() bool { return c.Status == StatusFailed }

// Validate implements Payload: v1's rules are all its schema's (the
// StackUp catalog of app/schemas), which Decode and DecodePayload check first.
func (*AnalysisCallbackV1) Validate(envelope.Envelope) error { return nil }

// SourceDocument is one analysed document given to generate.questions.
type SourceDocument struct {
	DocumentID int64    `json:"documentId"`
	SourceType string   `json:"sourceType"`
	Summary    string   `json:"summary"`
	TechStack  []string `json:"techStack"`
	Markdown   string   `json:"markdown"`
}

// GenerateQuestionsV1 is §5.6.
type GenerateQuestionsV1 struct {
	SessionID            int64            `json:"sessionId"`
	Mode                 string           `json:"mode"`
	JobCategories        []string         `json:"jobCategories"`
	Documents            []SourceDocument `json:"documents"`
	InitialQuestionCount int              `json:"initialQuestionCount"`
	MaxQuestions         int              `json:"maxQuestions"`
	RecentQuestions      []string         `json:"recentQuestions"`
	SelfIntroAnswer      string           `json:"selfIntroAnswer"`
	TargetCompanyName    *string          `json:"targetCompanyName"`
	TargetJobDescription *string          `json:"targetJobDescription"`
	FocusAreas           []string         `json:"focusAreas"`
}

// ModeJobTailored is the interview mode whose requests carry a target
// company and job description (§5.6, §5.10).
const ModeJobTailored = "JOB_TAILORED"

// Validate implements Payload. The schema states every rule of §5.6 but
// one, a comparison of two fields: initialQuestionCount <= maxQuestions
// (when maxQuestions is set).
func (g *GenerateQuestionsV1) Validate(envelope.Envelope) error {
	if g.MaxQuestions > 0 && g.InitialQuestionCount > g.MaxQuestions {
		return fmt.Errorf("want initialQuestionCount (%d) <= maxQuestions (%d)", g.InitialQuestionCount, g.MaxQuestions)
	}
	return nil
}

// Question is one generated question of a POOL callback (§5.7).
type Question struct {
	Category       string  `json:"category"`
	Question       string  `json:"question"`
	JobCategory    *string `json:"jobCategory"`
	TargetEvidence string  `json:"targetEvidence"`
	ExpectedSignal string  `json:"expectedSignal"`
}

// AnswerEvaluation scores an answer in a FOLLOWUP callback (§5.9).
type AnswerEvaluation struct {
	Specificity *float64 `json:"specificity"`
	Logic       *float64 `json:"logic"`
	Structure   *string  `json:"structure"`
	Correctness *float64 `json:"correctness"`
}

// QuestionsCallbackV1 is §5.7 (POOL) and §5.9 (FOLLOWUP), success and
// failure.
type QuestionsCallbackV1 struct {
	SessionID         int64             `json:"sessionId"`
	Kind              string            `json:"kind"`
	Questions         []Question        `json:"questions,omitempty"`
	ParentMessageID   *int64            `json:"parentMessageId,omitempty"`
	AnswerMessageID   *int64            `json:"answerMessageId,omitempty"`
	FollowupMessageID *int64            `json:"followupMessageId,omitempty"`
	AnswerIntent      string            `json:"answerIntent,omitempty"`
	FollowupQuestion  *string           `json:"followupQuestion,omitempty"`
	AnswerEvaluation  *AnswerEvaluation `json:"answerEvaluation,omitempty"`
	Status            string            `json:"status,omitempty"`
	ErrorCode         string            `json:"errorCode,omitempty"`
	ErrorMessage      string            `json:"errorMessage,omitempty"`
	Retriable         *bool             `json:"retriable,omitempty"`
}

// Failed reports a FAILED callback.
func (c *QuestionsCallbackV1) Failed() bool { return c.Status == StatusFailed }

// Validate implements Payload: v1's rules are all its schema's (the
// StackUp catalog of app/schemas), which Decode and DecodePayload check first.
func (*QuestionsCallbackV1) Validate(envelope.Envelope) error { return nil }

// Turn is one line of a follow-up's history.
type Turn struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// GenerateFollowupV1 is §5.8.
type GenerateFollowupV1 struct {
	SessionID            int64   `json:"sessionId"`
	ParentMessageID      int64   `json:"parentMessageId"`
	AnswerMessageID      int64   `json:"answerMessageId"`
	PreviousQuestion     string  `json:"previousQuestion"`
	AnswerText           string  `json:"answerText"`
	Mode                 string  `json:"mode"`
	JobCategory          *string `json:"jobCategory"`
	ContextDocumentIDs   []int64 `json:"contextDocumentIds"`
	ParentCategory       *string `json:"parentCategory"`
	ParentExpectedSignal *string `json:"parentExpectedSignal"`
	// FollowupMessageID is Core's placeholder message; absent on the
	// legacy path (§5.9).
	FollowupMessageID *int64 `json:"followupMessageId"`
	History           []Turn `json:"history"`
}

// Validate implements Payload: v1's rules are all its schema's (the
// StackUp catalog of app/schemas), which Decode and DecodePayload check first.
func (*GenerateFollowupV1) Validate(envelope.Envelope) error { return nil }

// GenerateTTSV1 is §5.9a.
type GenerateTTSV1 struct {
	SessionID   int64   `json:"sessionId"`
	MessageID   int64   `json:"messageId"`
	Text        string  `json:"text"`
	Mode        string  `json:"mode"`
	JobCategory *string `json:"jobCategory"`
}

// Validate implements Payload: v1's rules are all its schema's (the
// StackUp catalog of app/schemas), which Decode and DecodePayload check first.
func (*GenerateTTSV1) Validate(envelope.Envelope) error { return nil }

// TTSCallbackV1 is §5.9b.
type TTSCallbackV1 struct {
	SessionID   int64    `json:"sessionId"`
	MessageID   int64    `json:"messageId"`
	Status      string   `json:"status"`
	AudioKey    *string  `json:"audioKey"`
	DurationSec *float64 `json:"durationSec"`
	ErrorCode   *string  `json:"errorCode"`
}

// Failed reports a FAILED callback.
func (c *TTSCallbackV1) Failed() bool { return c.Status == StatusFailed }

// Validate implements Payload: v1's rules are all its schema's (the
// StackUp catalog of app/schemas), which Decode and DecodePayload check first.
func (*TTSCallbackV1) Validate(envelope.Envelope) error { return nil }

// AnalyzeVoiceV1 is §5.9c.
type AnalyzeVoiceV1 struct {
	SessionID               int64   `json:"sessionId"`
	MessageID               int64   `json:"messageId"`
	ParentQuestionMessageID int64   `json:"parentQuestionMessageId"`
	AudioS3Key              string  `json:"audioS3Key"`
	ContentType             string  `json:"contentType"`
	PreviousQuestionText    string  `json:"previousQuestionText"`
	Mode                    string  `json:"mode"`
	JobCategory             *string `json:"jobCategory"`
}

// Validate implements Payload: v1's rules are all its schema's (the
// StackUp catalog of app/schemas), which Decode and DecodePayload check first.
func (*AnalyzeVoiceV1) Validate(envelope.Envelope) error { return nil }

// VoiceCallbackV1 is §5.9d. Every metric is nullable; errorCode set means
// the analysis failed.
type VoiceCallbackV1 struct {
	SessionID             int64          `json:"sessionId"`
	InterviewMessageID    int64          `json:"interviewMessageId"`
	Transcript            *string        `json:"transcript"`
	SpeakingRateWpm       *float64       `json:"speakingRateWpm"`
	SilenceDurationSec    *float64       `json:"silenceDurationSec"`
	FillerWordCounts      map[string]int `json:"fillerWordCounts"`
	PronunciationAccuracy *float64       `json:"pronunciationAccuracy"`
	ErrorCode             *string        `json:"errorCode"`
}

// Failed reports a failed analysis (errorCode set).
func (c *VoiceCallbackV1) Failed() bool { return c.ErrorCode != nil && *c.ErrorCode != "" }

// Validate implements Payload: v1's rules are all its schema's (the
// StackUp catalog of app/schemas), which Decode and DecodePayload check first.
func (*VoiceCallbackV1) Validate(envelope.Envelope) error { return nil }

// TranscriptMessage is one message of a session given to generate.feedback.
type TranscriptMessage struct {
	ID              int64   `json:"id"`
	SequenceNumber  int     `json:"sequenceNumber"`
	Role            string  `json:"role"`
	Content         string  `json:"content"`
	Category        *string `json:"category,omitempty"`
	ParentMessageID *int64  `json:"parentMessageId,omitempty"`
}

// GenerateFeedbackV1 is §5.10.
type GenerateFeedbackV1 struct {
	SessionID            int64               `json:"sessionId"`
	Mode                 string              `json:"mode"`
	JobCategory          *string             `json:"jobCategory"`
	AttemptID            *string             `json:"attemptId"`
	Messages             []TranscriptMessage `json:"messages"`
	TargetCompanyName    *string             `json:"targetCompanyName"`
	TargetJobDescription *string             `json:"targetJobDescription"`
	// VoiceAnalysisSummary is Core's aggregate of the callback.voice metrics
	// (§5.9d); its shape is not specified, so it is carried as is.
	VoiceAnalysisSummary json.RawMessage `json:"voiceAnalysisSummary,omitempty"`
}

// Validate implements Payload: v1's rules are all its schema's (the
// StackUp catalog of app/schemas), which Decode and DecodePayload check first.
func (*GenerateFeedbackV1) Validate(envelope.Envelope) error { return nil }

// Coaching is one answer's review in callback.feedback.
type Coaching struct {
	MessageID       int64  `json:"messageId"`
	ModelAnswer     string `json:"modelAnswer"`
	AnswerRewrite   string `json:"answerRewrite"`
	CoachingComment string `json:"coachingComment"`
}

// PanelScore is one evaluator's item in callback.feedback.
type PanelScore struct {
	Evaluator      string   `json:"evaluator"`
	Dimension      string   `json:"dimension"`
	Score          *float64 `json:"score"`
	Detail         string   `json:"detail"`
	ScoreRationale string   `json:"scoreRationale"`
}

// FeedbackCallbackV1 is §5.11, success and failure.
type FeedbackCallbackV1 struct {
	SessionID           int64        `json:"sessionId"`
	OverallScore        *float64     `json:"overallScore,omitempty"`
	TechnicalAccuracy   *float64     `json:"technicalAccuracy,omitempty"`
	LogicScore          *float64     `json:"logicScore,omitempty"`
	CommunicationScore  *float64     `json:"communicationScore,omitempty"`
	StrengthsSummary    string       `json:"strengthsSummary,omitempty"`
	WeaknessesSummary   string       `json:"weaknessesSummary,omitempty"`
	ImprovementKeywords []string     `json:"improvementKeywords,omitempty"`
	StudyPlan           []string     `json:"studyPlan,omitempty"`
	Highlights          []string     `json:"highlights,omitempty"`
	AnswerCoaching      []Coaching   `json:"answerCoaching,omitempty"`
	PanelBreakdown      []PanelScore `json:"panelBreakdown,omitempty"`
	ReportS3Key         *string      `json:"reportS3Key,omitempty"`
	Status              string       `json:"status,omitempty"`
	ErrorCode           string       `json:"errorCode,omitempty"`
	ErrorMessage        string       `json:"errorMessage,omitempty"`
	Retriable           *bool        `json:"retriable,omitempty"`
	AttemptID           *string      `json:"attemptId,omitempty"`
}

// Failed reports a FAILED callback.
func (c *FeedbackCallbackV1) Failed() bool { return c.Status == StatusFailed }

// Validate implements Payload: v1's rules are all its schema's (the
// StackUp catalog of app/schemas), which Decode and DecodePayload check first.
func (*FeedbackCallbackV1) Validate(envelope.Envelope) error { return nil }

// NotifyV1 is §5.12 / §5.13: realtime.{session,user,document}.notify. Data
// is arbitrary JSON that RealTime forwards as the SSE data field.
type NotifyV1 struct {
	EventType string          `json:"eventType"`
	Data      json.RawMessage `json:"data"`
}

// Validate implements Payload: v1's rules are all its schema's (the
// StackUp catalog of app/schemas), which Decode and DecodePayload check first.
func (*NotifyV1) Validate(envelope.Envelope) error { return nil }

// Realtime event types used by this package's producers (SseEventType
// names, §5.12-§5.13).
const (
	EventError            = "ERROR"
	EventDocState         = "DOC_STATE"
	EventRepoState        = "REPO_STATE"
	EventSessionMessage   = "SESSION_MESSAGE"
	EventFeedbackReady    = "FEEDBACK_READY"
	EventAnalysisProgress = "ANALYSIS_PROGRESS"
	EventPoolProgress     = "QUESTION_POOL_PROGRESS"
	EventFeedbackProgress = "FEEDBACK_PROGRESS"
	EventMessageDelta     = "SESSION_MESSAGE_DELTA"
	EventMessageAudio     = "SESSION_MESSAGE_AUDIO"
)
