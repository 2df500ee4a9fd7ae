package aiworker

import (
	"context"
	"sync"

	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
)

// Phases of the volatile progress events (§5.12-3). QUESTION_POOL_PROGRESS
// goes CONTEXT_BUILDING → GENERATING → FINALIZING; FEEDBACK_PROGRESS goes
// PREPARING → SCORING (a completed/total counter over the parallel
// evaluators, starting at 0) → FINALIZING. Like every notification of a
// job, a failed publish is logged and the job goes on (§5.12: "발행 실패는
// 경고만").
const (
	PhaseContextBuilding = "CONTEXT_BUILDING"
	PhaseGenerating      = "GENERATING"
	PhasePreparing       = "PREPARING"
	PhaseScoring         = "SCORING"
	PhaseFinalizing      = "FINALIZING"
)

// PoolProgress publishes QUESTION_POOL_PROGRESS {sessionId, phase, message}
// to the session.
func (j Job) PoolProgress(ctx context.Context, sessionID int64, phase, message string) {
	j.NotifySession(ctx, catalog.EventPoolProgress, map[string]any{"sessionId": sessionID, "phase": phase, "message": message})
}

// FeedbackProgress publishes FEEDBACK_PROGRESS {sessionId, phase, message}
// to the session (PREPARING, FINALIZING); SCORING goes through
// StartScoring.
func (j Job) FeedbackProgress(ctx context.Context, sessionID int64, phase, message string) {
	j.NotifySession(ctx, catalog.EventFeedbackProgress, map[string]any{"sessionId": sessionID, "phase": phase, "message": message})
}

// Scoring counts the feedback's parallel evaluators as they finish. The
// count is published under the counter's lock, so the session sees 0, 1, …,
// total in order whatever order the evaluators finish in.
type Scoring struct {
	job       Job
	ctx       context.Context //nolint:containedctx // the job's, for the evaluators' Done calls
	sessionID int64
	message   string

	mu               sync.Mutex
	completed, total int
}

// StartScoring publishes FEEDBACK_PROGRESS SCORING {completed: 0, total}
// and returns the counter the evaluators report to.
func (j Job) StartScoring(ctx context.Context, sessionID int64, total int, message string) *Scoring {
	s := &Scoring{job: j, ctx: ctx, sessionID: sessionID, message: message, total: total}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.publishLocked()
	return s
}

// Done counts one finished evaluator (failed or not: the counter is about
// progress; the results decide the callback) and publishes the new count.
func (s *Scoring) Done() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.completed < s.total {
		s.completed++
		s.publishLocked()
	}
}

func (s *Scoring) publishLocked() {
	s.job.NotifySession(s.ctx, catalog.EventFeedbackProgress, map[string]any{"sessionId": s.sessionID, "phase": PhaseScoring,
		"message": s.message, "completed": s.completed, "total": s.total})
}
