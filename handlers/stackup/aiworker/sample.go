package aiworker

import (
	"context"
	"fmt"

	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
)

// Sample is a deterministic stand-in for every processor: no storage, no
// model, answers derived from the request. The embedded mode (`make run`)
// and tests use it; it is never a production processor.
type Sample struct{}

// SampleProcessors returns Sample for every request type.
func SampleProcessors() Processors {
	s := Sample{}
	return Processors{Resume: s, CoverLetter: s, Repository: s, Web: s, Questions: s, Followup: s, Feedback: s, TTS: s, Voice: s}
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
func (Sample) AnalyzeResume(_ context.Context, _ Job, r *catalog.AnalyzeResumeV1) (Analysis, error) {
	return sampleAnalysis("resume", r.ResumeID), nil
}

// AnalyzeCoverLetter implements CoverLetterAnalyzer.
func (Sample) AnalyzeCoverLetter(_ context.Context, _ Job, r *catalog.AnalyzeCoverLetterV1) (Analysis, error) {
	return sampleAnalysis("cover_letter", r.CoverLetterID), nil
}

// AnalyzeRepository implements RepositoryAnalyzer.
func (Sample) AnalyzeRepository(_ context.Context, _ Job, r *catalog.AnalyzeRepositoryV1) (Analysis, error) {
	return sampleAnalysis("repository", r.RepositoryID), nil
}

// AnalyzeWeb implements WebAnalyzer.
func (Sample) AnalyzeWeb(_ context.Context, _ Job, r *catalog.AnalyzeWebV1) (Analysis, error) {
	return sampleAnalysis("web", r.ResumeID), nil
}

// GenerateQuestions implements QuestionGenerator.
func (Sample) GenerateQuestions(_ context.Context, _ Job, r *catalog.GenerateQuestionsV1) ([]catalog.Question, error) {
	n := max(r.InitialQuestionCount, 1)
	out := make([]catalog.Question, n)
	for i := range out {
		out[i] = catalog.Question{Category: "PROJECT_DEEP_DIVE", Question: fmt.Sprintf("Sample question %d of session %d?", i+1, r.SessionID),
			TargetEvidence: "self introduction", ExpectedSignal: "concrete trade-offs"}
	}
	return out, nil
}

// GenerateFollowup implements FollowupGenerator.
func (Sample) GenerateFollowup(_ context.Context, _ Job, r *catalog.GenerateFollowupV1) (Followup, error) {
	s, l := 3.5, 4.0
	return Followup{AnswerIntent: catalog.IntentNormal, FollowupQuestion: fmt.Sprintf("Why that choice (answer %d)?", r.AnswerMessageID),
		AnswerEvaluation: &catalog.AnswerEvaluation{Specificity: &s, Logic: &l}}, nil
}

// GenerateFeedback implements FeedbackGenerator.
func (Sample) GenerateFeedback(_ context.Context, _ Job, r *catalog.GenerateFeedbackV1) (catalog.FeedbackCallbackV1, error) {
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
