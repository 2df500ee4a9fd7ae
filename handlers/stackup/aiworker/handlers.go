package aiworker

import (
	"context"
	"encoding/json"

	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
)

func jsonRaw(v any) (json.RawMessage, error) {
	if raw, ok := v.(json.RawMessage); ok {
		return raw, nil
	}
	return json.Marshal(v)
}

// v1Handlers are the §5 request types at v1, each on its processor (a nil
// processor leaves Process nil: not configured).
func v1Handlers(p Processors) map[string]map[string]VersionHandler {
	h := map[string]map[string]VersionHandler{}
	add := func(typ string, vh VersionHandler) {
		vh.Schema, _ = schemaOf(typ)
		h[typ] = map[string]VersionHandler{catalog.V1: vh}
	}
	analysisFailed := func(targetType string, targetID func(catalog.Payload) int64) func(catalog.Payload, FailureSignal) catalog.Payload {
		return func(req catalog.Payload, sig FailureSignal) catalog.Payload {
			return &catalog.AnalysisCallbackV1{TargetType: targetType, TargetID: targetID(req), Status: catalog.StatusFailed,
				ErrorCode: sig.Code, ErrorMessage: sig.Message, Retriable: &sig.Retriable}
		}
	}
	analysisOK := func(targetType string, id int64, a Analysis) catalog.Payload {
		return &catalog.AnalysisCallbackV1{TargetType: targetType, TargetID: id, Status: catalog.StatusAnalyzed,
			Summary: a.Summary, TechStack: a.TechStack, DocumentPath: a.DocumentPath, EmbeddingChunkCount: a.EmbeddingChunkCount}
	}

	var vh VersionHandler
	vh = VersionHandler{Failed: analysisFailed(catalog.TargetResume, func(r catalog.Payload) int64 { return r.(*catalog.AnalyzeResumeV1).ResumeID })}
	if p.Resume != nil {
		vh.Process = func(ctx context.Context, job Job, req catalog.Payload) (catalog.Payload, error) {
			r := req.(*catalog.AnalyzeResumeV1)
			a, err := p.Resume.AnalyzeResume(ctx, job, r)
			return analysisOK(catalog.TargetResume, r.ResumeID, a), err
		}
	}
	add(catalog.AnalyzeResume, vh)

	vh = VersionHandler{Failed: analysisFailed(catalog.TargetCoverLetter, func(r catalog.Payload) int64 { return r.(*catalog.AnalyzeCoverLetterV1).CoverLetterID })}
	if p.CoverLetter != nil {
		vh.Process = func(ctx context.Context, job Job, req catalog.Payload) (catalog.Payload, error) {
			r := req.(*catalog.AnalyzeCoverLetterV1)
			a, err := p.CoverLetter.AnalyzeCoverLetter(ctx, job, r)
			return analysisOK(catalog.TargetCoverLetter, r.CoverLetterID, a), err
		}
	}
	add(catalog.AnalyzeCoverLetter, vh)

	vh = VersionHandler{Failed: analysisFailed(catalog.TargetRepository, func(r catalog.Payload) int64 { return r.(*catalog.AnalyzeRepositoryV1).RepositoryID })}
	if p.Repository != nil {
		vh.Process = func(ctx context.Context, job Job, req catalog.Payload) (catalog.Payload, error) {
			r := req.(*catalog.AnalyzeRepositoryV1)
			a, err := p.Repository.AnalyzeRepository(ctx, job, r)
			return analysisOK(catalog.TargetRepository, r.RepositoryID, a), err
		}
	}
	add(catalog.AnalyzeRepository, vh)

	// §5.3: web resumes reuse the resume domain; targetId is the resume id.
	vh = VersionHandler{Failed: analysisFailed(catalog.TargetWeb, func(r catalog.Payload) int64 { return r.(*catalog.AnalyzeWebV1).ResumeID })}
	if p.Web != nil {
		vh.Process = func(ctx context.Context, job Job, req catalog.Payload) (catalog.Payload, error) {
			r := req.(*catalog.AnalyzeWebV1)
			a, err := p.Web.AnalyzeWeb(ctx, job, r)
			return analysisOK(catalog.TargetWeb, r.ResumeID, a), err
		}
	}
	add(catalog.AnalyzeWeb, vh)

	vh = VersionHandler{Failed: func(req catalog.Payload, sig FailureSignal) catalog.Payload {
		r := req.(*catalog.GenerateQuestionsV1)
		return &catalog.QuestionsCallbackV1{SessionID: r.SessionID, Kind: catalog.KindPool, Questions: []catalog.Question{},
			Status: catalog.StatusFailed, ErrorCode: sig.Code, ErrorMessage: sig.Message, Retriable: &sig.Retriable}
	}}
	if p.Questions != nil {
		vh.Process = func(ctx context.Context, job Job, req catalog.Payload) (catalog.Payload, error) {
			r := req.(*catalog.GenerateQuestionsV1)
			qs, err := p.Questions.GenerateQuestions(ctx, job, r)
			return &catalog.QuestionsCallbackV1{SessionID: r.SessionID, Kind: catalog.KindPool, Questions: qs, Status: catalog.StatusOK}, err
		}
	}
	add(catalog.GenerateQuestions, vh)

	// §5.9: the callback's parentMessageId is the answer the follow-up
	// follows (the request's answerMessageId).
	vh = VersionHandler{Failed: func(req catalog.Payload, sig FailureSignal) catalog.Payload {
		r := req.(*catalog.GenerateFollowupV1)
		empty := ""
		return &catalog.QuestionsCallbackV1{SessionID: r.SessionID, Kind: catalog.KindFollowup,
			ParentMessageID: &r.AnswerMessageID, AnswerMessageID: &r.AnswerMessageID, FollowupMessageID: r.FollowupMessageID,
			FollowupQuestion: &empty, Status: catalog.StatusFailed, ErrorCode: sig.Code, ErrorMessage: sig.Message, Retriable: &sig.Retriable}
	}}
	if p.Followup != nil {
		vh.Process = func(ctx context.Context, job Job, req catalog.Payload) (catalog.Payload, error) {
			r := req.(*catalog.GenerateFollowupV1)
			f, err := p.Followup.GenerateFollowup(ctx, job, r)
			q := f.FollowupQuestion
			return &catalog.QuestionsCallbackV1{SessionID: r.SessionID, Kind: catalog.KindFollowup,
				ParentMessageID: &r.AnswerMessageID, FollowupMessageID: r.FollowupMessageID, AnswerIntent: f.AnswerIntent,
				FollowupQuestion: &q, AnswerEvaluation: f.AnswerEvaluation, Status: catalog.StatusOK}, err
		}
	}
	add(catalog.GenerateFollowup, vh)

	vh = VersionHandler{Failed: func(req catalog.Payload, sig FailureSignal) catalog.Payload {
		r := req.(*catalog.GenerateFeedbackV1)
		return &catalog.FeedbackCallbackV1{SessionID: r.SessionID, Status: catalog.StatusFailed, ErrorCode: sig.Code,
			ErrorMessage: sig.Message, Retriable: &sig.Retriable, AttemptID: r.AttemptID}
	}}
	if p.Feedback != nil {
		vh.Process = func(ctx context.Context, job Job, req catalog.Payload) (catalog.Payload, error) {
			r := req.(*catalog.GenerateFeedbackV1)
			fb, err := p.Feedback.GenerateFeedback(ctx, job, r)
			fb.SessionID, fb.AttemptID, fb.Status = r.SessionID, r.AttemptID, catalog.StatusOK
			fb.ErrorCode, fb.ErrorMessage, fb.Retriable = "", "", nil
			return &fb, err
		}
	}
	add(catalog.GenerateFeedback, vh)

	vh = VersionHandler{Direct: true, Failed: func(req catalog.Payload, sig FailureSignal) catalog.Payload {
		r := req.(*catalog.GenerateTTSV1)
		return &catalog.TTSCallbackV1{SessionID: r.SessionID, MessageID: r.MessageID, Status: catalog.StatusFailed, ErrorCode: &sig.Code}
	}}
	if p.TTS != nil {
		vh.Process = func(ctx context.Context, job Job, req catalog.Payload) (catalog.Payload, error) {
			r := req.(*catalog.GenerateTTSV1)
			s, err := p.TTS.SynthesizeSpeech(ctx, job, r)
			return &catalog.TTSCallbackV1{SessionID: r.SessionID, MessageID: r.MessageID, Status: catalog.StatusSucceeded,
				AudioKey: &s.AudioKey, DurationSec: s.DurationSec}, err
		}
	}
	add(catalog.GenerateTTS, vh)

	vh = VersionHandler{Direct: true, Failed: func(req catalog.Payload, sig FailureSignal) catalog.Payload {
		r := req.(*catalog.AnalyzeVoiceV1)
		return &catalog.VoiceCallbackV1{SessionID: r.SessionID, InterviewMessageID: r.MessageID, ErrorCode: &sig.Code}
	}}
	if p.Voice != nil {
		vh.Process = func(ctx context.Context, job Job, req catalog.Payload) (catalog.Payload, error) {
			r := req.(*catalog.AnalyzeVoiceV1)
			v, err := p.Voice.AnalyzeVoice(ctx, job, r)
			return &catalog.VoiceCallbackV1{SessionID: r.SessionID, InterviewMessageID: r.MessageID, Transcript: v.Transcript,
				SpeakingRateWpm: v.SpeakingRateWpm, SilenceDurationSec: v.SilenceDurationSec, FillerWordCounts: v.FillerWordCounts,
				PronunciationAccuracy: v.PronunciationAccuracy}, err
		}
	}
	add(catalog.AnalyzeVoice, vh)
	return h
}

func schemaOf(typ string) (catalog.Schema, bool) {
	t, ok := catalog.Default().Type(typ)
	if !ok {
		return catalog.Schema{}, false
	}
	s, ok := t.Versions[catalog.V1]
	return s, ok
}
