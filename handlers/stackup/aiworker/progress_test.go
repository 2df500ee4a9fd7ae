package aiworker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/envelope"
)

// recorded is one notification a job published.
type recorded struct {
	MessageType, EventType string
	Data                   map[string]any
}

type recorder struct {
	mu   sync.Mutex
	list []recorded
}

func (r *recorder) notify(_ context.Context, mt, ev string, data any) {
	b, _ := json.Marshal(data)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, recorded{mt, ev, m})
}

func (r *recorder) all() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.list...)
}

// of returns the events of one type, each rendered by render.
func (r *recorder) of(eventType string, render func(map[string]any) string) []string {
	var out []string
	for _, e := range r.all() {
		if e.EventType == eventType {
			out = append(out, render(e.Data))
		}
	}
	return out
}

func newJob(r *recorder) aiworker.Job {
	user, session := int64(1), int64(99)
	return aiworker.NewJob(envelope.Envelope{MessageID: "m1", Context: envelope.Context{UserID: &user, SessionID: &session}}, r.notify)
}

func TestSentences(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		deltas []string
		want   []string
		rest   string
	}{
		{"korean question marks", []string{"그 락은 ", "어느 격리 수준에서 필요했나요? ", "왜죠?"}, []string{"그 락은 어느 격리 수준에서 필요했나요?"}, "왜죠?"},
		{"a terminator split from its space", []string{"First.", " Second!", "\nThird"}, []string{"First.", "Second!"}, "Third"},
		{"decimals and names stay whole", []string{"Node", ".js scored 3", ".5 of 5. Then"}, []string{"Node.js scored 3.5 of 5."}, "Then"},
		{"line breaks end a sentence", []string{"one\ntwo\n"}, []string{"one", "two"}, ""},
		{"repeated terminators", []string{"Really?! Yes... ok"}, []string{"Really?!", "Yes..."}, "ok"},
		{"full-width", []string{"本当？ はい。 "}, []string{"本当？", "はい。"}, ""},
	}
	for _, c := range cases {
		var s aiworker.Sentences
		var got []string
		for _, d := range c.deltas {
			got = append(got, s.Feed(d)...)
		}
		assert.Equal(t, c.want, got, c.name)
		assert.Equal(t, c.rest, s.Flush(), c.name)
		assert.Empty(t, s.Flush(), c.name)
	}
}

func TestFollowupStreamPublishesDeltasAndOneAudioPerSentenceInOrder(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	job := newJob(rec)
	placeholder := int64(503)
	var (
		mu         sync.Mutex
		calls      []string
		inProgress int
	)
	release := make(chan struct{})
	synth := func(_ context.Context, sessionID, messageID int64, seq int, sentence string) (aiworker.Segment, error) {
		<-release // text deltas never wait for speech
		mu.Lock()
		inProgress++
		assert.Equal(t, 1, inProgress, "one sentence at a time: segments in order")
		calls = append(calls, fmt.Sprintf("%d/%d/%d %s", sessionID, messageID, seq, sentence))
		mu.Unlock()
		defer func() { mu.Lock(); inProgress--; mu.Unlock() }()
		if sentence == "Broken." {
			return aiworker.Segment{}, errors.New("TTS down")
		}
		d := 1.5
		return aiworker.Segment{Ext: "mp3", DurationSec: &d}, nil
	}
	s := job.StreamFollowup(context.Background(), &catalog.GenerateFollowupV1{SessionID: 99, FollowupMessageID: &placeholder}, synth)
	deltas := []string{"Why ", "that? ", "Broken. ", "And ", "then"}
	for _, d := range deltas {
		s.Delta(d)
	}
	assert.Len(t, rec.of(catalog.EventMessageDelta, func(m map[string]any) string { return "" }), len(deltas),
		"every delta is published before any sentence is synthesised")
	close(release)
	s.Finish()

	assert.Equal(t, []string{"0 Why ", "1 that? ", "2 Broken. ", "3 And ", "4 then"},
		rec.of(catalog.EventMessageDelta, func(m map[string]any) string {
			assert.EqualValues(t, 503, m["messageId"])
			return fmt.Sprintf("%v %v", m["seq"], m["text"])
		}))
	assert.Equal(t, []string{"99/503/0 Why that?", "99/503/1 Broken.", "99/503/1 And then"}, calls,
		"the failed sentence's seq is reused: the segments the client hears have no gap")
	assert.Equal(t, []string{"503 0 mp3 1.5", "503 1 mp3 1.5"}, rec.of(catalog.EventMessageAudio, func(m map[string]any) string {
		return fmt.Sprintf("%v %v %v %v", m["messageId"], m["seq"], m["ext"], m["durationSec"])
	}))
	for _, e := range rec.all() {
		assert.Equal(t, catalog.RealtimeSessionNotify, e.MessageType)
	}
}

func TestFollowupStreamWithoutPlaceholderOrAborted(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	called := 0
	synth := func(context.Context, int64, int64, int, string) (aiworker.Segment, error) {
		called++
		return aiworker.Segment{Ext: "mp3"}, nil
	}
	s := newJob(rec).StreamFollowup(context.Background(), &catalog.GenerateFollowupV1{SessionID: 99}, synth)
	s.Delta("Legacy path. ")
	s.Finish()
	assert.Empty(t, rec.all(), "no followupMessageId: nothing to tag, nothing published")
	assert.Zero(t, called)

	placeholder := int64(7)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s = newJob(rec).StreamFollowup(ctx, &catalog.GenerateFollowupV1{SessionID: 99, FollowupMessageID: &placeholder}, synth)
	s.Delta("One. Two. ")
	s.Abort()
	s.Abort()
	assert.Zero(t, called, "a stopped stream synthesises nothing more")
}

func TestScoringCountsInOrder(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	sc := newJob(rec).StartScoring(context.Background(), 99, 5, "scoring")
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			time.Sleep(time.Millisecond)
			sc.Done()
		})
	}
	wg.Wait()
	sc.Done() // past total: not counted
	assert.Equal(t, []string{"SCORING 0/5", "SCORING 1/5", "SCORING 2/5", "SCORING 3/5", "SCORING 4/5", "SCORING 5/5"},
		rec.of(catalog.EventFeedbackProgress, func(m map[string]any) string {
			return fmt.Sprintf("%v %v/%v", m["phase"], m["completed"], m["total"])
		}))
}

// TestSampleEmitsEveryProgressEvent: `make run` shows the same sequences
// the real processors publish.
func TestSampleEmitsEveryProgressEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := aiworker.Sample{}
	phase := func(m map[string]any) string {
		if m["total"] != nil {
			return fmt.Sprintf("%v %v/%v", m["phase"], m["completed"], m["total"])
		}
		return fmt.Sprint(m["phase"])
	}

	rec := &recorder{}
	_, err := s.AnalyzeResume(ctx, newJob(rec), &catalog.AnalyzeResumeV1{ResumeID: 5})
	require.NoError(t, err)
	assert.Equal(t, []string{"EXTRACTING", "SUMMARIZING", "EMBEDDING"}, rec.of(catalog.EventAnalysisProgress, phase))
	assert.Equal(t, catalog.RealtimeUserNotify, rec.all()[0].MessageType)

	rec = &recorder{}
	_, err = s.GenerateQuestions(ctx, newJob(rec), &catalog.GenerateQuestionsV1{SessionID: 99, InitialQuestionCount: 2})
	require.NoError(t, err)
	assert.Equal(t, []string{"CONTEXT_BUILDING", "GENERATING", "FINALIZING"}, rec.of(catalog.EventPoolProgress, phase))

	rec = &recorder{}
	_, err = s.GenerateFeedback(ctx, newJob(rec), &catalog.GenerateFeedbackV1{SessionID: 99})
	require.NoError(t, err)
	assert.Equal(t, []string{"PREPARING", "SCORING 0/5", "SCORING 1/5", "SCORING 2/5", "SCORING 3/5", "SCORING 4/5", "SCORING 5/5", "FINALIZING"},
		rec.of(catalog.EventFeedbackProgress, phase))

	rec = &recorder{}
	placeholder := int64(503)
	f, err := s.GenerateFollowup(ctx, newJob(rec), &catalog.GenerateFollowupV1{SessionID: 99, AnswerMessageID: 502, FollowupMessageID: &placeholder})
	require.NoError(t, err)
	var text string
	for _, d := range rec.of(catalog.EventMessageDelta, func(m map[string]any) string { return m["text"].(string) }) {
		text += d
	}
	assert.Equal(t, f.FollowupQuestion, text, "the deltas spell the question")
	assert.Equal(t, []string{"0", "1"}, rec.of(catalog.EventMessageAudio, func(m map[string]any) string { return fmt.Sprint(m["seq"]) }),
		"one audio segment per sentence")
}
