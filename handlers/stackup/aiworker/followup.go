package aiworker

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
)

// Segment is one synthesised sentence of a streamed follow-up (§5.12-2),
// stored at interview/tts/{sessionId}/{messageId}/seg-{seq}.{ext}.
type Segment struct {
	// Ext is the stored segment's extension (wav, mp3, ogg or m4a: the ones
	// Core's segment proxy takes).
	Ext string
	// DurationSec is nil when the TTS API does not report it.
	DurationSec *float64
}

// SegmentSynthesizer synthesises sentence and stores it as segment seq of
// the follow-up messageID of session sessionID.
type SegmentSynthesizer func(ctx context.Context, sessionID, messageID int64, seq int, sentence string) (Segment, error)

// FollowupStream publishes a follow-up question to its session while the
// model streams it (§5.12-1, §5.12-2): every piece as SESSION_MESSAGE_DELTA
// {messageId, seq, text}, and every completed sentence, synthesised in the
// background (text deltas never wait for speech) one at a time, as
// SESSION_MESSAGE_AUDIO {messageId, seq, ext, durationSec} once its segment
// is stored. The two seqs are independent and start at 0; an audio seq
// counts stored segments only, so a sentence whose synthesis failed (logged,
// never failing the job: the text is what counts) leaves no gap. Without a
// followupMessageId (the legacy path) nothing is published.
type FollowupStream struct {
	job       Job
	ctx       context.Context //nolint:containedctx // the job's, for the background synthesis
	sessionID int64
	messageID *int64
	deltaSeq  int
	split     Sentences

	sentences chan string
	done      chan struct{}
	aborted   atomic.Bool
	once      sync.Once
}

// StreamFollowup starts the stream of r's follow-up; synth nil publishes
// text deltas only. Finish (or Abort) must be called before the callback.
func (j Job) StreamFollowup(ctx context.Context, r *catalog.GenerateFollowupV1, synth SegmentSynthesizer) *FollowupStream {
	s := &FollowupStream{job: j, ctx: ctx, sessionID: r.SessionID, messageID: r.FollowupMessageID}
	if s.messageID != nil && synth != nil {
		s.sentences, s.done = make(chan string, 64), make(chan struct{})
		go s.synthesize(synth)
	}
	return s
}

// Delta publishes one streamed piece and queues the sentences it completes.
func (s *FollowupStream) Delta(text string) {
	if s.messageID == nil || text == "" {
		return
	}
	s.job.NotifySession(s.ctx, catalog.EventMessageDelta, map[string]any{"messageId": *s.messageID, "seq": s.deltaSeq, "text": text})
	s.deltaSeq++
	if s.sentences != nil {
		for _, sentence := range s.split.Feed(text) {
			s.sentences <- sentence
		}
	}
}

// Finish queues the last, unterminated sentence and waits until every
// queued sentence is synthesised (the spec's gather before the callback).
func (s *FollowupStream) Finish() {
	if s.sentences != nil {
		if last := s.split.Flush(); last != "" {
			s.sentences <- last
		}
	}
	s.close()
}

// Abort drops the sentences not yet synthesised and waits for the one in
// progress: the follow-up failed, its audio is moot.
func (s *FollowupStream) Abort() {
	s.aborted.Store(true)
	s.close()
}

func (s *FollowupStream) close() {
	s.once.Do(func() {
		if s.sentences != nil {
			close(s.sentences)
			<-s.done
		}
	})
}

func (s *FollowupStream) synthesize(synth SegmentSynthesizer) {
	defer close(s.done)
	seq := 0
	for sentence := range s.sentences {
		if s.aborted.Load() || s.ctx.Err() != nil {
			continue // drain: Delta never blocks on a stopped stream
		}
		seg, err := synth(s.ctx, s.sessionID, *s.messageID, seq, sentence)
		if err != nil {
			s.job.Logger().WarnContext(s.ctx, "stackup follow-up sentence not synthesised; its audio segment is skipped (the text stands)",
				slog.Int64("session_id", s.sessionID), slog.Int64("message_id", *s.messageID), slog.Int("seq", seq), slog.Any("error", err))
			continue
		}
		s.job.NotifySession(s.ctx, catalog.EventMessageAudio, map[string]any{"messageId": *s.messageID, "seq": seq, "ext": seg.Ext,
			"durationSec": seg.DurationSec})
		seq++
	}
}

// Sentences splits streamed text into sentences. A sentence ends at a
// terminator (. ? ! … 。 ？ ！) followed by white space, or at a line break;
// the text after the last one waits for more (Feed) or the end of the stream
// (Flush). Requiring the white space keeps "3.5" and "Node.js" whole even
// when a delta ends inside them.
type Sentences struct{ pending string }

// Feed adds text and returns the sentences it completed, trimmed.
func (s *Sentences) Feed(text string) []string {
	s.pending += text
	var out []string
	start := 0
	for i, r := range s.pending {
		end := -1
		switch {
		case r == '\n':
			end = i
		case strings.ContainsRune(".?!…。？！", r):
			next := i + utf8.RuneLen(r)
			if nr, _ := utf8.DecodeRuneInString(s.pending[next:]); next < len(s.pending) && unicode.IsSpace(nr) {
				end = next
			}
		}
		if end < 0 || end < start {
			continue
		}
		if sentence := strings.TrimSpace(s.pending[start:end]); sentence != "" {
			out = append(out, sentence)
		}
		start = end
	}
	s.pending = s.pending[start:]
	return out
}

// Flush returns the unterminated rest, trimmed, and empties the splitter.
func (s *Sentences) Flush() string {
	rest := strings.TrimSpace(s.pending)
	s.pending = ""
	return rest
}
