package interviews

import (
	"context"
	"errors"
	"time"
)

// Report statuses (InterviewReportModel's lifecycle).
const (
	ReportNotStarted = "NOT_STARTED"
	ReportProcessing = "PROCESSING"
	ReportCompleted  = "COMPLETED"
	ReportFailed     = "FAILED"
)

// Credit lot statuses.
const (
	LotActive   = "ACTIVE"
	LotDepleted = "DEPLETED"
	LotExpired  = "EXPIRED"
)

// Ledger entry kinds and the reference kind of this spec's entries.
const (
	LedgerSettle  = "SETTLE"
	LedgerRelease = "RELEASE"
	LedgerForfeit = "FORFEIT"

	ReferenceInterview = "INTERVIEW"
)

// RetentionPeriod is how long an interview is kept after its completion or
// failure anchor (spec: "retentionExpiresAt (60 days from completion
// anchor)").
const RetentionPeriod = 60 * 24 * time.Hour

// Errors a store returns; the handlers turn them into permanent failures
// (no retry can make an unknown interview known).
var (
	ErrUnknownOrganization = errors.New("unknown organization")
	ErrUnknownInterview    = errors.New("unknown interview")
	// ErrOrganizationMismatch: the message names an organisation other than
	// the interview's.
	ErrOrganizationMismatch = errors.New("interview belongs to another organization")
	// ErrInsufficientCredits: a reservation larger than what the
	// organisation has available (seeding only).
	ErrInsufficientCredits = errors.New("insufficient credits")
	// ErrExists: a seeded row already exists.
	ErrExists = errors.New("already exists")
	// ErrReportNotFailed: a retry asked for a report that is not FAILED
	// (or has none).
	ErrReportNotFailed = errors.New("report is not FAILED")
)

// Organization is an organisation's credit balances.
type Organization struct {
	ID               string
	Name             string
	AvailableCredits int64
	ReservedCredits  int64
}

// CreditLot is one purchase or grant of credits.
type CreditLot struct {
	ID             string
	OrganizationID string
	// Remaining is what is not consumed yet, reserved credits included.
	Remaining int64
	// Reserved is the part of Remaining held by unsettled interviews.
	Reserved  int64
	Status    string
	ExpiresAt *time.Time
	CreatedAt time.Time
}

// QA is one question of an interview and the candidate's answer.
type QA struct {
	Question string `json:"question"`
	Answer   string `json:"answer"`
}

// NewInterview is an interview the API has created and reserved credits for
// (seeding: the embedded mode and tests stand in for the API).
type NewInterview struct {
	ID              string
	OrganizationID  string
	Status          string
	DurationSeconds int
	Transcript      []QA
	// CreditsReserved are taken from the organisation's active lots, the
	// soonest to expire first.
	CreditsReserved int64
}

// Interview is the interview as the consumers see it.
type Interview struct {
	ID                 string
	OrganizationID     string
	Status             string
	DurationSeconds    int
	Transcript         []QA
	CreditsReserved    int64
	CreditsConsumed    *int64
	SettledAt          *time.Time
	RetentionExpiresAt *time.Time
	DeletedAt          *time.Time
}

// LedgerEntry is one movement of credits.
type LedgerEntry struct {
	OrganizationID string
	LotID          string
	Kind           string
	Credits        int64
	ReferenceKind  string
	ReferenceID    string
	CreatedAt      time.Time
}

// Settlement asks for an interview's credits to be settled.
type Settlement struct {
	InterviewID    string
	OrganizationID string
	// Consumed is what the interview used before capping to its
	// reservation (0 for a failed interview).
	Consumed int64
	// Anchor is completedAt or failedAt; retention runs from it.
	Anchor time.Time
}

// FollowUp runs inside the settlement's transaction, only when this call
// really settled, with ctx carrying that transaction: it writes the
// report.generate request to the outbox (outbox.Writer), so the request is
// published after, and only if, the settlement commits. nil for none.
type FollowUp func(ctx context.Context) error

// SettleResult is what a settlement did.
type SettleResult struct {
	// Settled is true when this call made the claim; false when the
	// interview was already settled (a redelivery: nothing changed).
	Settled            bool
	CreditsReserved    int64
	CreditsConsumed    int64
	RetentionExpiresAt time.Time
}

// Claim is the outcome of a report claim.
type Claim struct {
	// Claimed is true when this worker now holds the report (PROCESSING).
	Claimed bool
	// AttemptCount is the report's attemptCount after the call.
	AttemptCount int
	// Status is the report's status after the call.
	Status string
}

// ReportContent is a generated report.
type ReportContent struct {
	OverallScore         int               `json:"overallScore"`
	Recommendation       string            `json:"recommendation"`
	Summary              string            `json:"summary"`
	InsufficientEvidence bool              `json:"insufficientEvidence"`
	SkillAssessments     []SkillAssessment `json:"skillAssessments"`
	QuestionAnalysis     []QuestionReview  `json:"questionAnalysis"`
	Generation           Generation        `json:"generation"`
}

// SkillAssessment scores one skill.
type SkillAssessment struct {
	Skill    string `json:"skill"`
	Score    int    `json:"score"`
	Evidence string `json:"evidence"`
}

// QuestionReview analyses one answer.
type QuestionReview struct {
	Question  string `json:"question"`
	Score     int    `json:"score"`
	Strengths string `json:"strengths"`
	Concerns  string `json:"concerns"`
}

// Generation is how a report was made (InterviewReportModel's generation
// metadata).
type Generation struct {
	Model            string    `json:"model"`
	PromptVersion    string    `json:"promptVersion"`
	PromptTokens     int       `json:"promptTokens"`
	CompletionTokens int       `json:"completionTokens"`
	TotalTokens      int       `json:"totalTokens"`
	GeneratedAt      time.Time `json:"generatedAt"`
}

// Report is an interview report.
type Report struct {
	InterviewID        string
	OrganizationID     string
	Status             string
	AttemptCount       int
	Content            ReportContent
	LastError          string
	RetentionExpiresAt *time.Time
	ClaimedAt          *time.Time
	CompletedAt        *time.Time
}

// Store is the spec's persistence: the settlement transaction, the report
// state machine, and the seeding and reads that the embedded mode and the
// tests need. Postgres and Memory implement it with the same semantics,
// checked by one test suite.
type Store interface {
	// SettleCompleted claims the interview (settledAt IS NULL), consumes
	// min(s.Consumed, reserved) credits from the lots holding its
	// reservation, releases the rest, writes the ledger, sets settledAt,
	// creditsConsumed and retentionExpiresAt (s.Anchor + RetentionPeriod), all
	// at once. When it settles, followUp (if not nil) runs in the same
	// transaction and its error rolls the settlement back. An already
	// settled interview returns Settled false, changes nothing and does not
	// run followUp.
	SettleCompleted(ctx context.Context, s Settlement, followUp FollowUp) (SettleResult, error)
	// SettleFailed is SettleCompleted with nothing consumed: the whole
	// reservation is released, no follow-up.
	SettleFailed(ctx context.Context, s Settlement) (SettleResult, error)

	// LoadInterview returns the interview of the organisation, unless it
	// is soft-deleted (ErrUnknownInterview) or another's
	// (ErrOrganizationMismatch).
	LoadInterview(ctx context.Context, organizationID, interviewID string) (Interview, error)
	// LoadReport returns the interview's report; ok is false when none
	// exists yet.
	LoadReport(ctx context.Context, interviewID string) (r Report, ok bool, err error)
	// ClaimReport atomically moves the report (created if missing, upsert
	// on the interview id) from NOT_STARTED or FAILED — or PROCESSING
	// claimed longer than staleAfter ago, a worker that died — to
	// PROCESSING with attemptCount + 1. A report held by another worker,
	// or COMPLETED, is not claimed.
	ClaimReport(ctx context.Context, organizationID, interviewID string, staleAfter time.Duration) (Claim, error)
	// CompleteReport stores content and sets COMPLETED, if the report is
	// still PROCESSING at attemptCount (the caller's claim); ok is false
	// when the claim was lost.
	CompleteReport(ctx context.Context, interviewID string, attemptCount int, content ReportContent) (ok bool, err error)
	// FailReport sets FAILED with reason: at the attempt cap (any status
	// but COMPLETED) when attemptCount is 0, or after a failed generation
	// when the report is still PROCESSING at attemptCount.
	FailReport(ctx context.Context, interviewID string, attemptCount int, reason string) error
	// ResetFailedReport is the operator's retry: a FAILED report goes back
	// to NOT_STARTED with its attempts and error cleared, so that the next
	// report.generate starts a fresh budget. It returns the report as it
	// was; any other status (or no report) is ErrReportNotFailed.
	ResetFailedReport(ctx context.Context, interviewID string) (Report, error)

	// CreateOrganization adds an organisation with no credits.
	CreateOrganization(ctx context.Context, o Organization) error
	// AddCreditLot adds a lot; its credits become available.
	AddCreditLot(ctx context.Context, lot CreditLot) error
	// CreateInterview adds an interview and reserves its credits.
	CreateInterview(ctx context.Context, in NewInterview) error
	// Organization reads an organisation's balances.
	Organization(ctx context.Context, id string) (Organization, error)
	// CreditLots lists an organisation's lots, oldest first.
	CreditLots(ctx context.Context, organizationID string) ([]CreditLot, error)
	// Interview reads an interview, soft-deleted or not, of any
	// organisation.
	Interview(ctx context.Context, id string) (Interview, error)
	// LedgerEntries lists an organisation's ledger, oldest first.
	LedgerEntries(ctx context.Context, organizationID string) ([]LedgerEntry, error)
	// DeleteInterview soft-deletes an interview.
	DeleteInterview(ctx context.Context, id string) error
}

// billed caps consumed to the reservation (spec: "cap consumed to reserved
// credits").
func billed(consumed, reserved int64) int64 {
	return max(0, min(consumed, reserved))
}
