package stackup

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/eventpipe/eventpipe/app/msgctx"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/core"
)

// SampleUserID and SampleSessionID are the user and the interview session
// of the sample traffic: the ones the README's demo page opens.
const (
	SampleUserID    = 1
	SampleSessionID = 1
)

// SampleTraffic is the embedded mode's demonstration (`make run`): every
// interval Core commits the next request of a four-step cycle — a resume
// analysis, then on session SampleSessionID a question pool, a follow-up
// (a question and its answer first) and the feedback — which the AI worker
// answers (with the sample processors, publishing every progress event)
// and Core's callback consumer applies; each step logs a line with the same
// trace_id. It runs until ctx ends and needs the Core role.
func SampleTraffic(ctx context.Context, h *Handlers, interval time.Duration, logger *slog.Logger) error {
	if h == nil || h.Core == nil {
		return errors.New("stackup sample traffic: the core role is not running")
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	// Ids above any a test or a real Core would use, unique per run.
	base := time.Now().Unix() * 1000
	const userID, sid = SampleUserID, SampleSessionID
	store := h.Core.Store()
	for i := int64(1); ; i++ {
		id := base + 10*i
		tctx := msgctx.WithTraceID(ctx, msgctx.NewTraceID())
		var (
			msgID, what string
			err         error
		)
		if i%4 != 1 {
			if _, serr := store.Session(tctx, sid); serr != nil {
				err = store.CreateSession(tctx, core.Session{ID: sid, UserID: userID})
			}
		}
		switch {
		case err != nil:
			what = "session"
		case i%4 == 1:
			what = catalog.AnalyzeResume
			msgID, err = h.Core.RequestAnalysis(tctx, userID, &catalog.AnalyzeResumeV1{
				ResumeID: id, FilePath: "resumes/raw/1/sample.pdf", AnalyzedDocumentID: id})
		case i%4 == 2:
			what = catalog.GenerateQuestions
			msgID, err = h.Core.RequestQuestions(tctx, userID, &catalog.GenerateQuestionsV1{
				SessionID: sid, Mode: "TECHNICAL", JobCategories: []string{"BACKEND"}, InitialQuestionCount: 2, MaxQuestions: 10,
				SelfIntroAnswer: "안녕하세요, 백엔드 개발자입니다."})
		case i%4 == 3:
			what = catalog.GenerateFollowup
			question, answer, placeholder := id+1, id+2, id+3
			const q, a = "가장 어려웠던 점은?", "동시성 문제였습니다."
			if err = store.CreateMessage(tctx, core.Message{ID: question, SessionID: sid, Role: core.RoleInterviewer, Content: q}); err == nil {
				err = store.CreateMessage(tctx, core.Message{ID: answer, SessionID: sid, Role: core.RoleInterviewee, Content: a})
			}
			if err == nil {
				msgID, err = h.Core.RequestFollowup(tctx, userID, &catalog.GenerateFollowupV1{SessionID: sid, ParentMessageID: question,
					AnswerMessageID: answer, PreviousQuestion: q, AnswerText: a, Mode: "TECHNICAL", FollowupMessageID: &placeholder,
					History: []catalog.Turn{{Role: "INTERVIEWER", Content: q}}})
			}
		default:
			what = catalog.GenerateFeedback
			self := "SELF_INTRODUCTION"
			msgID, err = h.Core.RequestFeedback(tctx, userID, &catalog.GenerateFeedbackV1{SessionID: sid, Mode: "TECHNICAL",
				Messages: []catalog.TranscriptMessage{{ID: id, SequenceNumber: 1, Role: "INTERVIEWER", Content: "자기소개 부탁드립니다.", Category: &self}}})
		}
		if err != nil {
			logger.WarnContext(tctx, "stackup sample request failed", slog.String("message_type", what),
				slog.String("trace_id", msgctx.TraceID(tctx)), slog.Any("error", err))
		} else {
			logger.InfoContext(tctx, "stackup sample request sent; watch its trace_id through ai-worker → callback → core",
				slog.String("message_id", msgID), slog.String("trace_id", msgctx.TraceID(tctx)), slog.String("message_type", what))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
