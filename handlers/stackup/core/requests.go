package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"

	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/envelope"
)

// request runs prepare (the business write) and stages the request envelope
// in one transaction, then flushes: the request leaves only after commit
// (§5.14). It returns the request's messageId.
func (s *Service) request(ctx context.Context, o catalog.Outgoing, prepare func(ctx context.Context) error) (string, error) {
	o.Publisher, o.TraceID, o.Now = envelope.PublisherCore, traceOf(ctx), s.cfg.Now()
	var id string
	err := outbox.Unit(ctx, func(ctx context.Context) error {
		return s.cfg.Store.Atomically(ctx, func(ctx context.Context) error {
			if prepare != nil {
				if err := prepare(ctx); err != nil {
					return err
				}
			}
			msg, topic, err := s.cfg.Catalog.Encode(ctx, o)
			if err != nil {
				return err
			}
			id = msg.UUID
			return s.cfg.Outbox.Write(ctx, topic, msg)
		})
	})
	if np := (*outbox.NotPublishedError)(nil); errors.As(err, &np) {
		return id, fmt.Errorf("stackup request %s: %w", o.Type, err)
	}
	if err != nil {
		return "", fmt.Errorf("stackup request %s: %w", o.Type, err)
	}
	s.cfg.Logger.InfoContext(ctx, "stackup request committed", slog.String("message_id", id),
		slog.String("trace_id", o.TraceID), slog.String("message_type", o.Type))
	return id, nil
}

func userCtx(userID int64, sessionID *int64) envelope.Context {
	c := envelope.Context{SessionID: sessionID}
	if userID != 0 {
		c.UserID = &userID
	}
	return c
}

// RequestAnalysis creates the PROCESSING analysed document and publishes
// the request after commit (§5.1: the document exists before the request).
// req is one of *catalog.AnalyzeResumeV1, *AnalyzeRepositoryV1,
// *AnalyzeWebV1, *AnalyzeCoverLetterV1.
func (s *Service) RequestAnalysis(ctx context.Context, userID int64, req catalog.Payload) (string, error) {
	var (
		typ, target string
		targetID    int64
		docID       int64
	)
	switch r := req.(type) {
	case *catalog.AnalyzeResumeV1:
		typ, target, targetID, docID = catalog.AnalyzeResume, catalog.TargetResume, r.ResumeID, r.AnalyzedDocumentID
	case *catalog.AnalyzeRepositoryV1:
		typ, target, targetID, docID = catalog.AnalyzeRepository, catalog.TargetRepository, r.RepositoryID, r.AnalyzedDocumentID
	case *catalog.AnalyzeWebV1:
		typ, target, targetID, docID = catalog.AnalyzeWeb, catalog.TargetWeb, r.ResumeID, r.AnalyzedDocumentID
	case *catalog.AnalyzeCoverLetterV1:
		typ, target, targetID, docID = catalog.AnalyzeCoverLetter, catalog.TargetCoverLetter, r.CoverLetterID, r.AnalyzedDocumentID
	default:
		return "", fmt.Errorf("stackup request analysis: %T is not an analysis request", req)
	}
	return s.request(ctx, catalog.Outgoing{Type: typ, Payload: req, Context: userCtx(userID, nil)}, func(ctx context.Context) error {
		return s.cfg.Store.CreateDocument(ctx, Document{ID: docID, UserID: userID, TargetType: target, TargetID: targetID, Status: DocProcessing})
	})
}

// RequestQuestions publishes generate.questions for an existing session.
func (s *Service) RequestQuestions(ctx context.Context, userID int64, req *catalog.GenerateQuestionsV1) (string, error) {
	return s.request(ctx, catalog.Outgoing{Type: catalog.GenerateQuestions, Payload: req, Context: userCtx(userID, &req.SessionID)},
		func(ctx context.Context) error {
			_, err := s.cfg.Store.Session(ctx, req.SessionID)
			return err
		})
}

// RequestFollowup inserts the INTERVIEWER placeholder ("(생성 중)", id
// req.FollowupMessageID) and publishes generate.followup (§5.8).
func (s *Service) RequestFollowup(ctx context.Context, userID int64, req *catalog.GenerateFollowupV1) (string, error) {
	if req.FollowupMessageID == nil {
		return "", fmt.Errorf("stackup request followup: followupMessageId (the placeholder's id) is required")
	}
	return s.request(ctx, catalog.Outgoing{Type: catalog.GenerateFollowup, Payload: req, Context: userCtx(userID, &req.SessionID)},
		func(ctx context.Context) error {
			return s.cfg.Store.CreateMessage(ctx, Message{ID: *req.FollowupMessageID, SessionID: req.SessionID,
				Role: RoleInterviewer, Content: PlaceholderText, Status: MsgPending})
		})
}

// RequestFeedback starts a new feedback attempt (a fresh attemptId recorded
// on the session, failure marker cleared, §5.10) and publishes
// generate.feedback carrying it.
func (s *Service) RequestFeedback(ctx context.Context, userID int64, req *catalog.GenerateFeedbackV1) (string, error) {
	r := *req
	attempt := uuid.NewString()
	r.AttemptID = &attempt
	return s.request(ctx, catalog.Outgoing{Type: catalog.GenerateFeedback, Payload: &r, Context: userCtx(userID, &r.SessionID)},
		func(ctx context.Context) error { return s.cfg.Store.StartFeedbackAttempt(ctx, r.SessionID, attempt) })
}

// RequestTTS publishes generate.tts for a persisted question message.
func (s *Service) RequestTTS(ctx context.Context, userID int64, req *catalog.GenerateTTSV1) (string, error) {
	return s.request(ctx, catalog.Outgoing{Type: catalog.GenerateTTS, Payload: req, Context: userCtx(userID, &req.SessionID)},
		func(ctx context.Context) error {
			_, err := s.cfg.Store.Message(ctx, req.MessageID)
			return err
		})
}

// RequestVoice marks the uploaded answer PENDING and publishes
// analyze.voice (§5.9c: after the upload's commit).
func (s *Service) RequestVoice(ctx context.Context, userID int64, req *catalog.AnalyzeVoiceV1) (string, error) {
	return s.request(ctx, catalog.Outgoing{Type: catalog.AnalyzeVoice, Payload: req, Context: userCtx(userID, &req.SessionID)},
		func(ctx context.Context) error {
			m, err := s.cfg.Store.Message(ctx, req.MessageID)
			if err != nil {
				return err
			}
			m.Status = MsgPending
			return s.cfg.Store.UpdateMessage(ctx, m)
		})
}
