package realproc

import (
	"context"
	"fmt"
	"mime"
	"path"
	"strings"
	"unicode"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/llm"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
)

// TTSKey is generate.tts's audio key (§5.9b: interview/tts/{sessionId}/{messageId}.mp3).
func TTSKey(sessionID, messageID int64) string {
	return fmt.Sprintf("interview/tts/%d/%d.mp3", sessionID, messageID)
}

// SegmentKey is a follow-up's sentence segment (§5.12-2, shared by AI and
// Core): interview/tts/{sessionId}/{messageId}/seg-{seq}.{ext}.
func SegmentKey(sessionID, messageID int64, seq int, ext string) string {
	return fmt.Sprintf("interview/tts/%d/%d/seg-%d.%s", sessionID, messageID, seq, ext)
}

// SegmentExt is the format of a follow-up's sentence segments.
const SegmentExt = "mp3"

// synthesizeSegment is the follow-up stream's aiworker.SegmentSynthesizer:
// one sentence through audio/speech, stored at SegmentKey. durationSec is
// null: the API does not report it.
func (p *Processors) synthesizeSegment(ctx context.Context, sessionID, messageID int64, seq int, sentence string) (aiworker.Segment, error) {
	audio, ct, err := p.cfg.Model.Speech(ctx, llm.SpeechRequest{Model: p.cfg.TTSModel, Voice: p.cfg.TTSVoice, Input: sentence, Format: SegmentExt})
	if err != nil {
		return aiworker.Segment{}, fmt.Errorf("synthesise segment %d of message %d: %w", seq, messageID, err)
	}
	key := SegmentKey(sessionID, messageID, seq, SegmentExt)
	if err := p.cfg.Objects.Put(ctx, key, audio, ct); err != nil {
		return aiworker.Segment{}, fmt.Errorf("store %s: %w", key, err)
	}
	return aiworker.Segment{Ext: SegmentExt}, nil
}

// SynthesizeSpeech implements aiworker.SpeechSynthesizer: audio/speech (mp3)
// stored at TTSKey. durationSec is null: the API does not report it (§5.9b).
func (p *Processors) SynthesizeSpeech(ctx context.Context, _ aiworker.Job, r *catalog.GenerateTTSV1) (aiworker.Speech, error) {
	audio, ct, err := p.cfg.Model.Speech(ctx, llm.SpeechRequest{Model: p.cfg.TTSModel, Voice: p.cfg.TTSVoice, Input: r.Text, Format: "mp3"})
	if err != nil {
		return aiworker.Speech{}, p.directFailure(ctx, "TTSError", CodeTTSAPIError, fmt.Errorf("synthesise message %d: %w", r.MessageID, err))
	}
	key := TTSKey(r.SessionID, r.MessageID)
	if err := p.cfg.Objects.Put(ctx, key, audio, ct); err != nil {
		return aiworker.Speech{}, p.directFailure(ctx, "TTSStorageError", CodeTTSStorageFailed, fmt.Errorf("store %s: %w", key, err))
	}
	return aiworker.Speech{AudioKey: key}, nil
}

// audioTypes are the answer formats the transcription API takes, by MIME
// type, with the file extension that tells the server the format.
var audioTypes = map[string]string{
	"audio/webm": "webm", "video/webm": "webm", "audio/ogg": "ogg", "audio/mpeg": "mp3", "audio/mp3": "mp3",
	"audio/mp4": "m4a", "audio/m4a": "m4a", "audio/x-m4a": "m4a", "audio/wav": "wav", "audio/x-wav": "wav",
	"audio/wave": "wav", "audio/flac": "flac",
}

// Fillers are the filler words counted in fillerWordCounts (Korean
// 간투어 and English hesitations), matched as whole words after trailing
// punctuation and elongation ("음…", "어어") are trimmed.
var Fillers = []string{"음", "어", "아", "그", "저기", "뭐", "um", "uh", "er", "hmm"}

// PauseSec is the shortest gap between words counted as silence.
const PauseSec = 0.3

// AnalyzeVoice implements aiworker.VoiceAnalyzer: the answer's audio from
// the store (at most MaxAudioBytes, a format the API takes), transcribed by
// audio/transcriptions with word timestamps, then the §5.9d metrics:
// speakingRateWpm (words per minute of the audio), silenceDurationSec (gaps
// of at least PauseSec between words, before the first and after the last),
// fillerWordCounts. Each is null when the API gives too little to compute
// it; pronunciationAccuracy is always null (the API has no such measure).
func (p *Processors) AnalyzeVoice(ctx context.Context, _ aiworker.Job, r *catalog.AnalyzeVoiceV1) (aiworker.VoiceAnalysis, error) {
	const typ = "VoiceAnalyzeError"
	mt, _, _ := mime.ParseMediaType(r.ContentType)
	ext, ok := audioTypes[mt]
	if !ok {
		if e := strings.TrimPrefix(path.Ext(r.AudioS3Key), "."); r.ContentType == "" && e != "" {
			ext, ok = e, strings.Contains(" webm ogg mp3 m4a wav flac mp4 mpeg mpga ", " "+e+" ")
		}
	}
	if !ok {
		return aiworker.VoiceAnalysis{}, domain(typ, CodeUnsupportedContentType, fmt.Errorf("audio %s: content type %q is not a supported audio format", r.AudioS3Key, r.ContentType))
	}
	audio, err := p.cfg.Objects.Get(ctx, r.AudioS3Key)
	switch {
	case err != nil && tooLarge(err):
		return aiworker.VoiceAnalysis{}, domain(typ, CodeAudioTooLarge, err)
	case err != nil && failure.Of(err) == failure.Permanent:
		return aiworker.VoiceAnalysis{}, domain(typ, CodeDocumentNotFound, err)
	case err != nil:
		return aiworker.VoiceAnalysis{}, p.directFailure(ctx, typ, CodeSTTAPIError, err)
	}
	if int64(len(audio)) > p.cfg.MaxAudioBytes {
		return aiworker.VoiceAnalysis{}, domain(typ, CodeAudioTooLarge, fmt.Errorf("audio %s: %d bytes (limit %d)", r.AudioS3Key, len(audio), p.cfg.MaxAudioBytes))
	}
	tr, err := p.cfg.Model.Transcribe(ctx, llm.TranscriptionRequest{Model: p.cfg.STTModel, Audio: audio, Filename: "answer." + ext, Words: true})
	if err != nil {
		return aiworker.VoiceAnalysis{}, p.directFailure(ctx, typ, CodeSTTAPIError, fmt.Errorf("transcribe %s: %w", r.AudioS3Key, err))
	}
	return VoiceMetrics(tr), nil
}

// VoiceMetrics computes §5.9d's metrics from a transcript.
func VoiceMetrics(tr llm.Transcription) aiworker.VoiceAnalysis {
	text := strings.TrimSpace(tr.Text)
	v := aiworker.VoiceAnalysis{Transcript: &text}
	words := strings.Fields(text)
	if len(tr.Words) > 0 {
		words = words[:0]
		for _, w := range tr.Words {
			words = append(words, w.Word)
		}
	}
	duration := tr.Duration
	if duration <= 0 && len(tr.Words) > 0 {
		duration = tr.Words[len(tr.Words)-1].End
	}
	if duration > 0 && len(words) > 0 {
		wpm := round1(float64(len(words)) / (duration / 60))
		v.SpeakingRateWpm = &wpm
	}
	if len(tr.Words) > 0 && duration > 0 {
		silence, prev := 0.0, 0.0
		for _, w := range tr.Words {
			if gap := w.Start - prev; gap >= PauseSec {
				silence += gap
			}
			prev = max(prev, w.End)
		}
		if gap := duration - prev; gap >= PauseSec {
			silence += gap
		}
		silence = round1(silence)
		v.SilenceDurationSec = &silence
	}
	if text != "" {
		counts := map[string]int{}
		for _, w := range words {
			if f := filler(w); f != "" {
				counts[f]++
			}
		}
		v.FillerWordCounts = counts
	}
	return v
}

func filler(word string) string {
	w := strings.ToLower(strings.TrimFunc(word, func(r rune) bool { return unicode.IsPunct(r) || unicode.IsSpace(r) || r == '…' }))
	for _, f := range Fillers {
		if w == f {
			return f
		}
		// Elongated: 음음, 어어어, ummm.
		if strings.HasPrefix(w, f) && strings.Trim(w, f+string([]rune(f)[len([]rune(f))-1:])) == "" {
			return f
		}
	}
	return ""
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }
