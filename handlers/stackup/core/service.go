// Package core is Core's side of the StackUp contract: the callback consumers
// (core.callback.*) that apply §5's rules to Core's state, and the requesters
// that publish Core's work requests (analyze.*, generate.*) only after the
// business transaction commits (§5.14), through the transactional outbox.
//
// State lives behind Store: Postgres (migrations/00004_stackup.sql), or
// Memory for the embedded mode, both held to one test suite. A callback's
// effect, its inbox marker and the realtime notifications it stages commit
// in one transaction.
package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/msgctx"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/envelope"
)

// Config configures a Service.
type Config struct {
	Catalog  catalog.Catalog
	Topology topology.Topology
	Store    Store
	// Outbox publishes after commit: outbox.TxWriter with the Postgres
	// store, outbox.AfterCommit with the memory store.
	Outbox outbox.Writer
	Inbox  inbox.Store
	Retry  catalog.Retry
	// Versions adds further versions of callback types (§7: v2 beside
	// v1), keyed by message type; each is applied as its v1 payload.
	Versions map[string][]catalog.Version
	Logger   *slog.Logger
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Service is Core: callback consumers and requesters.
type Service struct {
	cfg Config
}

// New checks cfg.
func New(cfg Config) (*Service, error) {
	var errs []error
	if cfg.Store == nil {
		errs = append(errs, fmt.Errorf("stackup core: store %w", catalog.ErrNotConfigured))
	}
	if cfg.Outbox == nil {
		errs = append(errs, fmt.Errorf("stackup core: outbox %w", catalog.ErrNotConfigured))
	}
	if cfg.Inbox == nil {
		errs = append(errs, fmt.Errorf("stackup core: inbox %w", catalog.ErrNotConfigured))
	}
	if cat, err := cfg.Catalog.WithVersions(cfg.Versions); err != nil {
		errs = append(errs, fmt.Errorf("stackup core: %w", err))
	} else {
		cfg.Catalog = cat
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{cfg: cfg}, nil
}

// Store is the service's store.
func (s *Service) Store() Store { return s.cfg.Store }

// CallbackQueues are the queues Core consumes (§1).
var CallbackQueues = []string{"core.callback.analysis", "core.callback.feedback", "core.callback.questions", "core.callback.tts", "core.callback.voice"}

// RouteName is the route (and inbox consumer) name of a callback queue.
func RouteName(queue string) string { return "stackup-core-" + queue[len("core."):] }

// Routes returns one route per callback queue, with the §6 policy.
func (s *Service) Routes() (route.Set, error) {
	apply := map[string]func(context.Context, catalog.Delivery) error{
		catalog.CallbackAnalysis:  s.applyAnalysis,
		catalog.CallbackQuestions: s.applyQuestions,
		catalog.CallbackFeedback:  s.applyFeedback,
		catalog.CallbackTTS:       s.applyTTS,
		catalog.CallbackVoice:     s.applyVoice,
	}
	var set route.Set
	for _, q := range CallbackQueues {
		policy, err := catalog.PolicyFor(s.cfg.Topology, q, s.cfg.Retry)
		if err != nil {
			return nil, err
		}
		// A callback is a few writes in one transaction.
		c := catalog.Consumer{Name: RouteName(q), Queue: q, Catalog: s.cfg.Catalog, Policy: policy, Timeout: 30 * time.Second, Logger: s.cfg.Logger,
			Handlers: map[string]map[string]catalog.Handler{}}
		for _, t := range s.cfg.Catalog.ByQueue(q) {
			c.Handlers[t.Name] = map[string]catalog.Handler{catalog.V1: s.effect(RouteName(q), apply[t.Name])}
		}
		if err := catalog.AddVersions(c.Handlers, s.cfg.Versions); err != nil {
			return nil, fmt.Errorf("stackup core: %w", err)
		}
		set = append(set, c.Route())
	}
	return set, nil
}

// effect runs apply once per messageId: inbox marker, state changes and
// staged notifications in one transaction, the notifications published
// after it commits.
func (s *Service) effect(consumer string, apply func(context.Context, catalog.Delivery) error) catalog.Handler {
	return func(ctx context.Context, d catalog.Delivery) error {
		err := outbox.Unit(ctx, func(ctx context.Context) error {
			return s.cfg.Inbox.Process(ctx, consumer, d.Envelope.MessageID, func(ctx context.Context) error {
				return s.cfg.Store.Atomically(ctx, func(ctx context.Context) error { return apply(ctx, d) })
			})
		})
		if np := (*outbox.NotPublishedError)(nil); errors.As(err, &np) {
			s.cfg.Logger.WarnContext(ctx, "stackup: notification not published after commit", append(d.Attrs(), slog.Any("error", err))...)
			return nil
		}
		if err != nil {
			return err
		}
		return nil
	}
}

// dropped logs a callback whose target does not exist and acknowledges it
// (§5.14: such a callback is dropped as "not found").
func (s *Service) dropped(ctx context.Context, d catalog.Delivery, why string, err error) error {
	if err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	s.cfg.Logger.WarnContext(ctx, "stackup callback dropped: "+why, d.Attrs()...)
	return nil
}

// notify stages a realtime notification in the current transaction.
func (s *Service) notify(ctx context.Context, traceID, messageType string, ectx envelope.Context, eventType string, data any) error {
	raw, err := json.Marshal(data)
	if err != nil {
		return err
	}
	msg, topic, err := s.cfg.Catalog.Encode(ctx, catalog.Outgoing{
		Type: messageType, Publisher: envelope.PublisherCore, Payload: &catalog.NotifyV1{EventType: eventType, Data: raw},
		Context: ectx, TraceID: traceID, Now: s.cfg.Now(),
	})
	if err != nil {
		return fmt.Errorf("notify %s: %w", eventType, err)
	}
	return s.cfg.Outbox.Write(ctx, topic, msg)
}

func (s *Service) notifySessionAndUser(ctx context.Context, d catalog.Delivery, sessionID, userID int64, eventType string, data any) error {
	if err := s.notify(ctx, d.Envelope.TraceID, catalog.RealtimeSessionNotify, envelope.Context{SessionID: &sessionID}, eventType, data); err != nil {
		return err
	}
	if userID == 0 && d.Envelope.Context.UserID != nil {
		userID = *d.Envelope.Context.UserID
	}
	if userID == 0 {
		return nil
	}
	return s.notify(ctx, d.Envelope.TraceID, catalog.RealtimeUserNotify, envelope.Context{UserID: &userID, SessionID: &sessionID}, eventType, data)
}

// applyAnalysis is callback.analysis: branch on targetType (the queue is
// shared by resume, web, repository and cover letter), then ANALYZED or
// FAILED on the target's PROCESSING documents.
func (s *Service) applyAnalysis(ctx context.Context, d catalog.Delivery) error {
	cb := d.Payload.(*catalog.AnalysisCallbackV1)
	res := Document{Status: DocAnalyzed, Summary: cb.Summary, TechStack: cb.TechStack, DocumentPath: cb.DocumentPath, EmbeddingChunkCount: cb.EmbeddingChunkCount}
	if cb.Failed() {
		res = Document{Status: DocFailed, ErrorCode: cb.ErrorCode, ErrorMessage: cb.ErrorMessage, Retriable: cb.Retriable}
	}
	docs, err := s.cfg.Store.FinishAnalysis(ctx, cb.TargetType, cb.TargetID, res)
	if err != nil {
		return err
	}
	if len(docs) == 0 {
		return s.dropped(ctx, d, fmt.Sprintf("no PROCESSING document for %s %d", cb.TargetType, cb.TargetID), nil)
	}
	event := catalog.EventDocState
	if cb.TargetType == catalog.TargetRepository {
		event = catalog.EventRepoState
	}
	for _, doc := range docs {
		data := map[string]any{"documentId": doc.ID, "targetType": doc.TargetType, "targetId": doc.TargetID, "status": doc.Status}
		if err := s.notify(ctx, d.Envelope.TraceID, catalog.RealtimeDocumentNotify, envelope.Context{DocumentID: &doc.ID}, event, data); err != nil {
			return err
		}
		if doc.UserID != 0 {
			if err := s.notify(ctx, d.Envelope.TraceID, catalog.RealtimeUserNotify, envelope.Context{UserID: &doc.UserID}, event, data); err != nil {
				return err
			}
		}
	}
	s.cfg.Logger.InfoContext(ctx, "stackup analysis applied", append(d.Attrs(),
		slog.String("target_type", cb.TargetType), slog.Int64("target_id", cb.TargetID), slog.String("status", res.Status))...)
	return nil
}

// applyQuestions is callback.questions: FAILED is handled before kind is
// looked at (§5.9 QuestionsCallbackService.apply), then POOL sets the pool
// and FOLLOWUP completes the placeholder.
func (s *Service) applyQuestions(ctx context.Context, d catalog.Delivery) error {
	cb := d.Payload.(*catalog.QuestionsCallbackV1)
	sess, err := s.cfg.Store.Session(ctx, cb.SessionID)
	if err != nil {
		return s.dropped(ctx, d, fmt.Sprintf("session %d not found", cb.SessionID), err)
	}
	if cb.Failed() {
		return s.questionsFailed(ctx, d, cb, sess)
	}
	switch cb.Kind {
	case catalog.KindPool:
		pool := cb.Questions
		if pool == nil {
			pool = []catalog.Question{}
		}
		if err := s.cfg.Store.SetQuestionPool(ctx, cb.SessionID, pool); err != nil {
			return err
		}
		s.cfg.Logger.InfoContext(ctx, "stackup question pool set", append(d.Attrs(), slog.Int("questions", len(pool)))...)
		return nil
	default: // FOLLOWUP (validated)
		if cb.FollowupMessageID == nil {
			return s.dropped(ctx, d, "FOLLOWUP without followupMessageId (legacy path not modelled)", nil)
		}
		m, err := s.cfg.Store.Message(ctx, *cb.FollowupMessageID)
		if err != nil {
			return s.dropped(ctx, d, fmt.Sprintf("placeholder %d not found", *cb.FollowupMessageID), err)
		}
		if cb.ParentMessageID != nil && cb.AnswerEvaluation != nil {
			if answer, err := s.cfg.Store.Message(ctx, *cb.ParentMessageID); err == nil {
				answer.AnswerEvaluation = cb.AnswerEvaluation
				if err := s.cfg.Store.UpdateMessage(ctx, answer); err != nil {
					return err
				}
			} else if !errors.Is(err, ErrNotFound) {
				return err
			}
		}
		data := map[string]any{"messageId": m.ID}
		if cb.AnswerIntent == catalog.IntentDontKnow {
			if _, err := s.cfg.Store.DeleteMessage(ctx, m.ID); err != nil {
				return err
			}
			data["deleted"] = true
		} else {
			m.Content, m.Status, m.AnswerIntent = *cb.FollowupQuestion, MsgNormal, cb.AnswerIntent
			if err := s.cfg.Store.UpdateMessage(ctx, m); err != nil {
				return err
			}
		}
		s.cfg.Logger.InfoContext(ctx, "stackup follow-up applied", append(d.Attrs(), slog.String("answer_intent", cb.AnswerIntent))...)
		if err := s.notifySessionAndUser(ctx, d, cb.SessionID, sess.UserID, catalog.EventSessionMessage, data); err != nil {
			return err
		}
		if cb.AnswerIntent == catalog.IntentDontKnow {
			return s.advanceToNextGeneral(ctx, d, sess)
		}
		return nil
	}
}

// advanceToNextGeneral moves the interview on after a follow-up that will not
// be asked (a DONT_KNOW answer, or a FAILED generation, §5.9): the session's
// next general question — the first of its pool that no INTERVIEWER message
// of the session asks yet — is persisted as an INTERVIEWER message, announced
// on the session and user channels (SESSION_MESSAGE) and, as every persisted
// question is, sent to speech synthesis (generate.tts, §5.14's
// QuestionPersistedEvent), all in the callback's transaction. A session
// without a pool, or whose pool is used up, is left as it is (logged).
func (s *Service) advanceToNextGeneral(ctx context.Context, d catalog.Delivery, sess Session) error {
	msgs, err := s.cfg.Store.SessionMessages(ctx, sess.ID)
	if err != nil {
		return err
	}
	asked := map[string]bool{}
	for _, m := range msgs {
		if m.Role == RoleInterviewer {
			asked[strings.TrimSpace(m.Content)] = true
		}
	}
	var next *catalog.Question
	for i, q := range sess.QuestionPool {
		if text := strings.TrimSpace(q.Question); text != "" && !asked[text] {
			next = &sess.QuestionPool[i]
			break
		}
	}
	if next == nil {
		s.cfg.Logger.InfoContext(ctx, "stackup no general question left to advance to", append(d.Attrs(),
			slog.Int64("session_id", sess.ID), slog.Int("pool", len(sess.QuestionPool)))...)
		return nil
	}
	m, err := s.cfg.Store.AppendMessage(ctx, Message{SessionID: sess.ID, Role: RoleInterviewer, Content: next.Question, Status: MsgNormal})
	if err != nil {
		return err
	}
	userID := sess.UserID
	if userID == 0 && d.Envelope.Context.UserID != nil {
		userID = *d.Envelope.Context.UserID
	}
	tts, topic, err := s.cfg.Catalog.Encode(ctx, catalog.Outgoing{
		Type: catalog.GenerateTTS, Publisher: envelope.PublisherCore, Now: s.cfg.Now(), TraceID: d.Envelope.TraceID,
		Payload: &catalog.GenerateTTSV1{SessionID: sess.ID, MessageID: m.ID, Text: m.Content, JobCategory: next.JobCategory},
		Context: userCtx(userID, &sess.ID),
	})
	if err != nil {
		return fmt.Errorf("advance to the next general question: %w", err)
	}
	if err := s.cfg.Outbox.Write(ctx, topic, tts); err != nil {
		return err
	}
	s.cfg.Logger.InfoContext(ctx, "stackup advanced to the next general question", append(d.Attrs(),
		slog.Int64("session_id", sess.ID), slog.Int64("question_message_id", m.ID))...)
	return s.notifySessionAndUser(ctx, d, sess.ID, sess.UserID, catalog.EventSessionMessage, map[string]any{"messageId": m.ID})
}

func (s *Service) questionsFailed(ctx context.Context, d catalog.Delivery, cb *catalog.QuestionsCallbackV1, sess Session) error {
	s.cfg.Logger.WarnContext(ctx, "stackup questions generation failed", append(d.Attrs(),
		slog.String("kind", cb.Kind), slog.String("error_code", cb.ErrorCode), slog.String("error_message", cb.ErrorMessage))...)
	if cb.Kind == catalog.KindFollowup && cb.FollowupMessageID != nil {
		m, err := s.cfg.Store.Message(ctx, *cb.FollowupMessageID)
		switch {
		case err == nil:
			// failFollowup: kept (not deleted) so the turn does not vanish.
			m.Content, m.Status = FollowupFailedText, MsgFailed
			if err := s.cfg.Store.UpdateMessage(ctx, m); err != nil {
				return err
			}
			if err := s.notifySessionAndUser(ctx, d, cb.SessionID, sess.UserID, catalog.EventSessionMessage, map[string]any{"messageId": m.ID}); err != nil {
				return err
			}
			// §5.9: "DONT_KNOW 와 동일하게 advanceToNextGeneral 로 다음
			// 일반질문으로 진행해 면접이 멈추지 않는다".
			return s.advanceToNextGeneral(ctx, d, sess)
		case !errors.Is(err, ErrNotFound):
			return err
		}
	}
	retriable := cb.Retriable != nil && *cb.Retriable
	return s.notifySessionAndUser(ctx, d, cb.SessionID, sess.UserID, catalog.EventError,
		map[string]any{"scope": "QUESTIONS", "kind": cb.Kind, "errorCode": cb.ErrorCode, "retriable": retriable})
}

// applyFeedback is callback.feedback: a success is stored (one per session);
// a FAILED one for another attempt than the session's current is dropped,
// else it persists the failure marker and tells the session and user.
func (s *Service) applyFeedback(ctx context.Context, d catalog.Delivery) error {
	cb := d.Payload.(*catalog.FeedbackCallbackV1)
	sess, err := s.cfg.Store.Session(ctx, cb.SessionID)
	if err != nil {
		return s.dropped(ctx, d, fmt.Sprintf("session %d not found", cb.SessionID), err)
	}
	if cb.Failed() {
		if cb.AttemptID != nil && sess.FeedbackAttemptID != nil && *cb.AttemptID != *sess.FeedbackAttemptID {
			s.cfg.Logger.InfoContext(ctx, "stackup stale FAILED feedback callback dropped", append(d.Attrs(),
				slog.String("attempt_id", *cb.AttemptID), slog.String("current_attempt_id", *sess.FeedbackAttemptID))...)
			return nil
		}
		retriable := cb.Retriable != nil && *cb.Retriable
		if err := s.cfg.Store.MarkFeedbackFailed(ctx, cb.SessionID, retriable, s.cfg.Now()); err != nil {
			return err
		}
		// errorMessage stays in the server log (§5.11: not shown to clients).
		s.cfg.Logger.WarnContext(ctx, "stackup feedback generation failed", append(d.Attrs(),
			slog.String("error_code", cb.ErrorCode), slog.String("error_message", cb.ErrorMessage))...)
		return s.notifySessionAndUser(ctx, d, cb.SessionID, sess.UserID, catalog.EventError,
			map[string]any{"scope": "FEEDBACK", "errorCode": cb.ErrorCode, "retriable": retriable})
	}
	// Only the typed fields are stored: unknown ones never reach the table.
	body, err := json.Marshal(cb)
	if err != nil {
		return err
	}
	inserted, err := s.cfg.Store.SaveFeedback(ctx, Feedback{SessionID: cb.SessionID, AttemptID: cb.AttemptID, Feedback: body, ReportFilePath: cb.ReportS3Key})
	if err != nil {
		return err
	}
	if !inserted {
		s.cfg.Logger.InfoContext(ctx, "stackup feedback already stored; callback ignored", d.Attrs()...)
		return nil
	}
	return s.notifySessionAndUser(ctx, d, cb.SessionID, sess.UserID, catalog.EventFeedbackReady, map[string]any{"sessionId": cb.SessionID})
}

// applyTTS is callback.tts: the question message gets its audio or its
// failure.
func (s *Service) applyTTS(ctx context.Context, d catalog.Delivery) error {
	cb := d.Payload.(*catalog.TTSCallbackV1)
	m, err := s.cfg.Store.Message(ctx, cb.MessageID)
	if err != nil {
		return s.dropped(ctx, d, fmt.Sprintf("message %d not found", cb.MessageID), err)
	}
	if cb.Failed() {
		m.TTSStatus, m.AudioKey, m.AudioDurationSec, m.TTSErrorCode = catalog.StatusFailed, nil, nil, *cb.ErrorCode
	} else {
		m.TTSStatus, m.AudioKey, m.AudioDurationSec, m.TTSErrorCode = catalog.StatusSucceeded, cb.AudioKey, cb.DurationSec, ""
	}
	if err := s.cfg.Store.UpdateMessage(ctx, m); err != nil {
		return err
	}
	return s.notifySessionAndUser(ctx, d, m.SessionID, 0, catalog.EventSessionMessage, map[string]any{"messageId": m.ID})
}

// applyVoice is callback.voice: the answer gets its transcript and metrics,
// or FAILED when errorCode is set.
func (s *Service) applyVoice(ctx context.Context, d catalog.Delivery) error {
	cb := d.Payload.(*catalog.VoiceCallbackV1)
	m, err := s.cfg.Store.Message(ctx, cb.InterviewMessageID)
	if err != nil {
		return s.dropped(ctx, d, fmt.Sprintf("message %d not found", cb.InterviewMessageID), err)
	}
	if cb.Failed() {
		m.Status, m.VoiceErrorCode = MsgFailed, *cb.ErrorCode
	} else {
		if cb.Transcript != nil {
			m.Content = *cb.Transcript
		}
		m.Status, m.VoiceErrorCode = MsgNormal, ""
		m.VoiceMetrics = &VoiceMetrics{SpeakingRateWpm: cb.SpeakingRateWpm, SilenceDurationSec: cb.SilenceDurationSec,
			FillerWordCounts: cb.FillerWordCounts, PronunciationAccuracy: cb.PronunciationAccuracy}
	}
	if err := s.cfg.Store.UpdateMessage(ctx, m); err != nil {
		return err
	}
	return s.notifySessionAndUser(ctx, d, m.SessionID, 0, catalog.EventSessionMessage, map[string]any{"messageId": m.ID})
}

// traceOf continues ctx's trace (a request made while handling a message),
// or starts one.
func traceOf(ctx context.Context) string {
	if id := msgctx.TraceID(ctx); id != "" {
		return id
	}
	return msgctx.NewTraceID()
}
