package core

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
)

// Document statuses (analyzed_documents).
const (
	DocProcessing = "PROCESSING"
	DocAnalyzed   = "ANALYZED"
	DocFailed     = "FAILED"
)

// Message roles and statuses (interview_messages).
const (
	RoleInterviewer = "INTERVIEWER"
	RoleInterviewee = "INTERVIEWEE"
	MsgNormal       = "NORMAL"
	MsgPending      = "PENDING"
	MsgFailed       = "FAILED"
)

// Texts Core writes into placeholders (§5.8, §5.9).
const (
	PlaceholderText    = "(생성 중)"
	FollowupFailedText = "질문 생성에 실패했습니다. 다음 질문으로 넘어갑니다."
)

// ErrNotFound is returned for a row that does not exist.
var ErrNotFound = errors.New("not found")

// Document is an analysed document: created PROCESSING before its analyze.*
// request is published (§5.1), finished by callback.analysis.
type Document struct {
	ID                  int64
	UserID              int64
	TargetType          string
	TargetID            int64
	Status              string
	Summary             string
	TechStack           []string
	DocumentPath        string
	EmbeddingChunkCount *int
	ErrorCode           string
	ErrorMessage        string
	Retriable           *bool
}

// Session is an interview session.
type Session struct {
	ID     int64
	UserID int64
	// QuestionPool is nil until a POOL callback sets it.
	QuestionPool []catalog.Question
	// FeedbackAttemptID is the current generate.feedback attempt.
	FeedbackAttemptID *string
	// FeedbackFailedAt and FeedbackFailRetriable are the failure marker.
	FeedbackFailedAt      *time.Time
	FeedbackFailRetriable *bool
}

// VoiceMetrics are a voice answer's metrics (§5.9d).
type VoiceMetrics struct {
	SpeakingRateWpm       *float64       `json:"speakingRateWpm"`
	SilenceDurationSec    *float64       `json:"silenceDurationSec"`
	FillerWordCounts      map[string]int `json:"fillerWordCounts"`
	PronunciationAccuracy *float64       `json:"pronunciationAccuracy"`
}

// Message is an interview message.
type Message struct {
	ID               int64
	SessionID        int64
	Role             string
	Content          string
	Status           string
	AnswerIntent     string
	AnswerEvaluation *catalog.AnswerEvaluation
	TTSStatus        string
	AudioKey         *string
	AudioDurationSec *float64
	TTSErrorCode     string
	VoiceMetrics     *VoiceMetrics
	VoiceErrorCode   string
}

// Feedback is a session's stored feedback.
type Feedback struct {
	SessionID      int64
	AttemptID      *string
	Feedback       json.RawMessage
	ReportFilePath *string
}

// Store is Core's state. Two implementations with one test suite: Postgres
// and Memory (the embedded mode). Every method called inside Atomically
// belongs to its transaction.
type Store interface {
	// Atomically runs fn so that its writes commit together or not at all.
	// The Postgres store joins the transaction ctx carries (dbtx.From: the
	// inbox's, so effect and dedupe marker commit together) or begins one.
	Atomically(ctx context.Context, fn func(ctx context.Context) error) error

	CreateDocument(ctx context.Context, d Document) error
	Document(ctx context.Context, id int64) (Document, error)
	// FinishAnalysis sets status (ANALYZED or FAILED) and the result on the
	// PROCESSING documents of the target and returns them.
	FinishAnalysis(ctx context.Context, targetType string, targetID int64, result Document) ([]Document, error)

	CreateSession(ctx context.Context, s Session) error
	Session(ctx context.Context, id int64) (Session, error)
	SetQuestionPool(ctx context.Context, sessionID int64, pool []catalog.Question) error
	// StartFeedbackAttempt records a new attempt and clears the failure
	// marker (§5.11: "마커는 … 재생성 요청 시 클리어").
	StartFeedbackAttempt(ctx context.Context, sessionID int64, attemptID string) error
	MarkFeedbackFailed(ctx context.Context, sessionID int64, retriable bool, at time.Time) error
	// SaveFeedback stores the feedback and clears the failure marker; a
	// session that has one already is left as it is (inserted false).
	SaveFeedback(ctx context.Context, f Feedback) (inserted bool, err error)
	Feedback(ctx context.Context, sessionID int64) (Feedback, error)

	CreateMessage(ctx context.Context, m Message) error
	// AppendMessage creates m with an id the store assigns (one above the
	// highest message id; m.ID is ignored) and returns it: a message Core
	// writes on its own, such as the next general question.
	AppendMessage(ctx context.Context, m Message) (Message, error)
	// SessionMessages returns the session's messages in id order.
	SessionMessages(ctx context.Context, sessionID int64) ([]Message, error)
	// Message returns the message; inside Atomically it is held until the
	// transaction ends, so a read-modify-write (UpdateMessage) never loses
	// a concurrent one.
	Message(ctx context.Context, id int64) (Message, error)
	UpdateMessage(ctx context.Context, m Message) error
	DeleteMessage(ctx context.Context, id int64) (deleted bool, err error)
}
