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

// SampleTraffic is the embedded mode's demonstration (`make run`): every
// interval Core commits a request — alternately a resume analysis and a
// question pool for a new session — which the AI worker answers (with the
// sample processors) and Core's callback consumer applies; each step logs a
// line with the same trace_id. It runs until ctx ends and needs the Core
// role.
func SampleTraffic(ctx context.Context, h *Handlers, interval time.Duration, logger *slog.Logger) error {
	if h == nil || h.Core == nil {
		return errors.New("stackup sample traffic: the core role is not running")
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	// Ids above any a test or a real Core would use, unique per run.
	base := time.Now().Unix() * 1000
	const userID = 1
	for i := int64(1); ; i++ {
		id := base + i
		tctx := msgctx.WithTraceID(ctx, msgctx.NewTraceID())
		var (
			msgID, what string
			err         error
		)
		if i%2 == 1 {
			what = catalog.AnalyzeResume
			msgID, err = h.Core.RequestAnalysis(tctx, userID, &catalog.AnalyzeResumeV1{
				ResumeID: id, FilePath: "resumes/raw/1/sample.pdf", AnalyzedDocumentID: id})
		} else {
			what = catalog.GenerateQuestions
			if err = h.Core.Store().CreateSession(tctx, core.Session{ID: id, UserID: userID}); err == nil {
				msgID, err = h.Core.RequestQuestions(tctx, userID, &catalog.GenerateQuestionsV1{
					SessionID: id, Mode: "TECHNICAL", JobCategories: []string{"BACKEND"}, InitialQuestionCount: 2, MaxQuestions: 10,
					// The contract's arrays are arrays, empty or not: the
					// outbox holds our requests to the strict schema.
					Documents: []catalog.SourceDocument{}, RecentQuestions: []string{}, FocusAreas: []string{},
					SelfIntroAnswer: "안녕하세요, 백엔드 개발자입니다."})
			}
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
