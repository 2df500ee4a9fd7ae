package aiworker

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
)

// Sample is a deterministic stand-in for every processor: no storage, no
// model, answers derived from the request. The embedded mode (`make run`)
// and tests use it; it is never a production processor. It publishes the
// progress events the real processors do, in the same order, so that the
// demo page shows them: ANALYSIS_PROGRESS EXTRACTING → SUMMARIZING →
// EMBEDDING; QUESTION_POOL_PROGRESS CONTEXT_BUILDING → GENERATING →
// FINALIZING; FEEDBACK_PROGRESS PREPARING → SCORING 0…5 of 5 → FINALIZING;
// the follow-up word by word as SESSION_MESSAGE_DELTA and one
// SESSION_MESSAGE_AUDIO per sentence (segments announced, not stored: there
// is no bucket).
type Sample struct{}

// SampleProcessors returns Sample for every request type.
func SampleProcessors() Processors {
	s := Sample{}
	return Processors{Resume: s, CoverLetter: s, Repository: s, Web: s, Questions: s, Followup: s, Feedback: s, TTS: s, Voice: s}
}

// SampleEvaluators is how many evaluators the sample feedback counts.
const SampleEvaluators = 5

// sampleProgress publishes the analysis phases of a target (§5.13).
func sampleProgress(ctx context.Context, job Job, targetType string, id int64) {
	for _, ph := range []struct{ phase, message string }{
		{"EXTRACTING", "문서에서 텍스트를 추출하고 있습니다"},
		{"SUMMARIZING", "문서를 요약하고 있습니다"},
		{"EMBEDDING", "검색용 임베딩을 만들고 있습니다"},
	} {
		job.NotifyUser(ctx, catalog.EventAnalysisProgress, map[string]any{"targetType": targetType, "targetId": id, "phase": ph.phase, "message": ph.message})
	}
}

func sampleAnalysis(kind string, id int64) Analysis {
	n := 3
	return Analysis{
		Summary:             fmt.Sprintf("Sample analysis of %s %d.", kind, id),
		TechStack:           []string{"Go", "PostgreSQL"},
		DocumentPath:        fmt.Sprintf("analyzed/%s/%d/summary.md", kind, id),
		EmbeddingChunkCount: &n,
	}
}

// AnalyzeResume implements ResumeAnalyzer.
func (Sample) AnalyzeResume(ctx context.Context, job Job, r *catalog.AnalyzeResumeV1) (Analysis, error) {
	sampleProgress(ctx, job, catalog.TargetResume, r.ResumeID)
	return sampleAnalysis("resume", r.ResumeID), nil
}

// AnalyzeCoverLetter implements CoverLetterAnalyzer.
func (Sample) AnalyzeCoverLetter(ctx context.Context, job Job, r *catalog.AnalyzeCoverLetterV1) (Analysis, error) {
	sampleProgress(ctx, job, catalog.TargetCoverLetter, r.CoverLetterID)
	return sampleAnalysis("cover_letter", r.CoverLetterID), nil
}

// AnalyzeRepository implements RepositoryAnalyzer.
func (Sample) AnalyzeRepository(ctx context.Context, job Job, r *catalog.AnalyzeRepositoryV1) (Analysis, error) {
	sampleProgress(ctx, job, catalog.TargetRepository, r.RepositoryID)
	return sampleAnalysis("repository", r.RepositoryID), nil
}

// AnalyzeWeb implements WebAnalyzer.
func (Sample) AnalyzeWeb(ctx context.Context, job Job, r *catalog.AnalyzeWebV1) (Analysis, error) {
	sampleProgress(ctx, job, catalog.TargetWeb, r.ResumeID)
	return sampleAnalysis("web", r.ResumeID), nil
}

// GenerateQuestions implements QuestionGenerator.
func (Sample) GenerateQuestions(ctx context.Context, job Job, r *catalog.GenerateQuestionsV1) ([]catalog.Question, error) {
	job.PoolProgress(ctx, r.SessionID, PhaseContextBuilding, "면접 맥락을 준비하고 있습니다")
	job.PoolProgress(ctx, r.SessionID, PhaseGenerating, "질문을 생성하고 있습니다")
	defer job.PoolProgress(ctx, r.SessionID, PhaseFinalizing, "질문을 정리하고 있습니다")
	n := max(r.InitialQuestionCount, 1)
	out := make([]catalog.Question, n)
	for i := range out {
		out[i] = catalog.Question{Category: "PROJECT_DEEP_DIVE", Question: fmt.Sprintf("Sample question %d of session %d?", i+1, r.SessionID),
			TargetEvidence: "self introduction", ExpectedSignal: "concrete trade-offs"}
	}
	return out, nil
}

// GenerateFollowup implements FollowupGenerator.
// The follow-up is streamed word by word, two sentences: two audio
// segments.
func (Sample) GenerateFollowup(ctx context.Context, job Job, r *catalog.GenerateFollowupV1) (Followup, error) {
	s, l := 3.5, 4.0
	q := fmt.Sprintf("Why that choice (answer %d)? What would you change next time?", r.AnswerMessageID)
	stream := job.StreamFollowup(ctx, r, sampleSegment)
	words := strings.SplitAfter(q, " ")
	for _, w := range words {
		stream.Delta(w)
	}
	stream.Finish()
	return Followup{AnswerIntent: catalog.IntentNormal, FollowupQuestion: q,
		AnswerEvaluation: &catalog.AnswerEvaluation{Specificity: &s, Logic: &l}}, nil
}

// sampleSegment announces a segment without synthesising or storing it, its
// duration estimated at 15 characters a second.
func sampleSegment(_ context.Context, _, _ int64, _ int, sentence string) (Segment, error) {
	d := float64(int64(float64(utf8.RuneCountInString(sentence))/15*10+0.5)) / 10
	return Segment{Ext: "mp3", DurationSec: &d}, nil
}

// GenerateFeedback implements FeedbackGenerator.
func (Sample) GenerateFeedback(ctx context.Context, job Job, r *catalog.GenerateFeedbackV1) (catalog.FeedbackCallbackV1, error) {
	job.FeedbackProgress(ctx, r.SessionID, PhasePreparing, "면접 기록을 정리하고 있습니다")
	scoring := job.StartScoring(ctx, r.SessionID, SampleEvaluators, "평가위원이 답변을 평가하고 있습니다")
	for range SampleEvaluators {
		scoring.Done()
	}
	job.FeedbackProgress(ctx, r.SessionID, PhaseFinalizing, "리포트를 정리하고 있습니다")
	score := 75.0
	return catalog.FeedbackCallbackV1{OverallScore: &score, StrengthsSummary: "Clear structure.", WeaknessesSummary: "Little depth.",
		Highlights: []string{"Clear structure"}}, nil
}

// SynthesizeSpeech implements SpeechSynthesizer.
func (Sample) SynthesizeSpeech(_ context.Context, _ Job, r *catalog.GenerateTTSV1) (Speech, error) {
	return Speech{AudioKey: fmt.Sprintf("interview/tts/%d/%d.mp3", r.SessionID, r.MessageID)}, nil
}

// AnalyzeVoice implements VoiceAnalyzer.
func (Sample) AnalyzeVoice(_ context.Context, _ Job, r *catalog.AnalyzeVoiceV1) (VoiceAnalysis, error) {
	t, wpm := fmt.Sprintf("sample transcript of message %d", r.MessageID), 140.0
	return VoiceAnalysis{Transcript: &t, SpeakingRateWpm: &wpm}, nil
}
