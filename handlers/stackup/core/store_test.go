package core_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/core"
)

// TestStores runs one suite against both stores: the memory twin must
// behave like Postgres.
func TestStores(t *testing.T) {
	t.Parallel()
	stores := map[string]func(t *testing.T) core.Store{
		"memory": func(*testing.T) core.Store { return core.NewMemory() },
		"postgres": func(t *testing.T) core.Store {
			pool, schema := dbtest.Schema(t)
			s, err := core.NewPostgres(pool, schema)
			require.NoError(t, err)
			return s
		},
	}
	for name, newStore := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, c := range suite {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.run(t, newStore(t))
				})
			}
		})
	}
}

var errRollback = errors.New("roll back")

var suite = []struct {
	name string
	run  func(t *testing.T, s core.Store)
}{
	{"documents", func(t *testing.T, s core.Store) {
		ctx := context.Background()
		require.NoError(t, s.CreateDocument(ctx, core.Document{ID: 1, UserID: 7, TargetType: catalog.TargetResume, TargetID: 42}))
		require.NoError(t, s.CreateDocument(ctx, core.Document{ID: 2, TargetType: catalog.TargetWeb, TargetID: 42}))
		require.Error(t, s.CreateDocument(ctx, core.Document{ID: 1, TargetType: catalog.TargetResume, TargetID: 1}), "duplicate id")
		d, err := s.Document(ctx, 1)
		require.NoError(t, err)
		assert.Equal(t, core.Document{ID: 1, UserID: 7, TargetType: catalog.TargetResume, TargetID: 42, Status: core.DocProcessing}, d)

		n := 18
		done, err := s.FinishAnalysis(ctx, catalog.TargetResume, 42, core.Document{Status: core.DocAnalyzed, Summary: "s", TechStack: []string{"Go"}, DocumentPath: "a/b.md", EmbeddingChunkCount: &n})
		require.NoError(t, err)
		require.Len(t, done, 1, "only the target's type")
		assert.Equal(t, core.Document{ID: 1, UserID: 7, TargetType: catalog.TargetResume, TargetID: 42, Status: core.DocAnalyzed,
			Summary: "s", TechStack: []string{"Go"}, DocumentPath: "a/b.md", EmbeddingChunkCount: &n}, done[0])
		again, err := s.FinishAnalysis(ctx, catalog.TargetResume, 42, core.Document{Status: core.DocFailed})
		require.NoError(t, err)
		assert.Empty(t, again, "only PROCESSING documents are finished")
		no := false
		failed, err := s.FinishAnalysis(ctx, catalog.TargetWeb, 42, core.Document{Status: core.DocFailed, ErrorCode: "X", ErrorMessage: "m", Retriable: &no})
		require.NoError(t, err)
		require.Len(t, failed, 1)
		assert.Equal(t, "X", failed[0].ErrorCode)
		assert.False(t, *failed[0].Retriable)
		_, err = s.Document(ctx, 99)
		assert.ErrorIs(t, err, core.ErrNotFound)
	}},
	{"sessions and feedback", func(t *testing.T, s core.Store) {
		ctx := context.Background()
		require.NoError(t, s.CreateSession(ctx, core.Session{ID: 5, UserID: 7}))
		sess, err := s.Session(ctx, 5)
		require.NoError(t, err)
		assert.Nil(t, sess.QuestionPool)
		pool := []catalog.Question{{Category: "C", Question: "Q?", JobCategory: new("BACKEND")}}
		require.NoError(t, s.SetQuestionPool(ctx, 5, pool))
		require.ErrorIs(t, s.SetQuestionPool(ctx, 6, pool), core.ErrNotFound)
		require.NoError(t, s.StartFeedbackAttempt(ctx, 5, "a"))
		at := time.Date(2026, 4, 27, 15, 0, 0, 123456000, time.UTC)
		require.NoError(t, s.MarkFeedbackFailed(ctx, 5, true, at))
		sess, err = s.Session(ctx, 5)
		require.NoError(t, err)
		assert.Equal(t, pool, sess.QuestionPool)
		assert.Equal(t, "a", *sess.FeedbackAttemptID)
		assert.Equal(t, at, *sess.FeedbackFailedAt)
		assert.True(t, *sess.FeedbackFailRetriable)

		require.NoError(t, s.StartFeedbackAttempt(ctx, 5, "b"))
		sess, _ = s.Session(ctx, 5)
		assert.Nil(t, sess.FeedbackFailedAt, "a new attempt clears the marker")
		require.NoError(t, s.MarkFeedbackFailed(ctx, 5, false, at))

		fb := core.Feedback{SessionID: 5, AttemptID: new("b"), Feedback: json.RawMessage(`{"sessionId":5}`), ReportFilePath: new("feedback/5/report.md")}
		inserted, err := s.SaveFeedback(ctx, fb)
		require.NoError(t, err)
		assert.True(t, inserted)
		sess, _ = s.Session(ctx, 5)
		assert.Nil(t, sess.FeedbackFailedAt, "a success clears the marker")
		inserted, err = s.SaveFeedback(ctx, core.Feedback{SessionID: 5, Feedback: json.RawMessage(`{}`)})
		require.NoError(t, err)
		assert.False(t, inserted, "one feedback per session")
		got, err := s.Feedback(ctx, 5)
		require.NoError(t, err)
		assert.JSONEq(t, `{"sessionId":5}`, string(got.Feedback))
		assert.Equal(t, "feedback/5/report.md", *got.ReportFilePath)
		_, err = s.SaveFeedback(ctx, core.Feedback{SessionID: 77, Feedback: json.RawMessage(`{}`)})
		assert.ErrorIs(t, err, core.ErrNotFound)
	}},
	{"concurrent read-modify-writes of one message both land", func(t *testing.T, s core.Store) {
		// Two callbacks on one answer at once: the follow-up sets its
		// evaluation, the voice analysis its transcript (seen lost on
		// Postgres: one write overwrote the other).
		ctx := context.Background()
		require.NoError(t, s.CreateSession(ctx, core.Session{ID: 5}))
		require.NoError(t, s.CreateMessage(ctx, core.Message{ID: 1, SessionID: 5, Role: core.RoleInterviewee, Status: core.MsgNormal}))
		spec := 4.0
		read := make(chan struct{}, 2)
		update := func(change func(*core.Message)) error {
			return s.Atomically(ctx, func(ctx context.Context) error {
				m, err := s.Message(ctx, 1)
				if err != nil {
					return err
				}
				read <- struct{}{}
				time.Sleep(200 * time.Millisecond) // the other one reads meanwhile
				change(&m)
				return s.UpdateMessage(ctx, m)
			})
		}
		errs := make(chan error, 2)
		go func() {
			errs <- update(func(m *core.Message) { m.AnswerEvaluation = &catalog.AnswerEvaluation{Specificity: &spec} })
		}()
		go func() { errs <- update(func(m *core.Message) { m.Content = "transcript" }) }()
		require.NoError(t, <-errs)
		require.NoError(t, <-errs)
		got, err := s.Message(ctx, 1)
		require.NoError(t, err)
		assert.Equal(t, "transcript", got.Content)
		require.NotNil(t, got.AnswerEvaluation, "the evaluation survived the transcript's write")
		assert.Equal(t, spec, *got.AnswerEvaluation.Specificity)
	}},
	{"messages", func(t *testing.T, s core.Store) {
		ctx := context.Background()
		require.NoError(t, s.CreateSession(ctx, core.Session{ID: 5}))
		require.ErrorIs(t, s.CreateMessage(ctx, core.Message{ID: 1, SessionID: 6, Role: core.RoleInterviewer}), core.ErrNotFound)
		require.NoError(t, s.CreateMessage(ctx, core.Message{ID: 1, SessionID: 5, Role: core.RoleInterviewer, Content: core.PlaceholderText, Status: core.MsgPending}))
		m, err := s.Message(ctx, 1)
		require.NoError(t, err)
		assert.Equal(t, core.Message{ID: 1, SessionID: 5, Role: core.RoleInterviewer, Content: core.PlaceholderText, Status: core.MsgPending}, m)
		spec := 3.5
		wpm := 140.0
		m.Content, m.Status, m.AnswerIntent = "Q?", core.MsgNormal, catalog.IntentNormal
		m.AnswerEvaluation = &catalog.AnswerEvaluation{Specificity: &spec, Structure: new("STAR")}
		m.TTSStatus, m.AudioKey, m.VoiceMetrics = catalog.StatusSucceeded, new("a.mp3"), &core.VoiceMetrics{SpeakingRateWpm: &wpm, FillerWordCounts: map[string]int{"음": 5}}
		require.NoError(t, s.UpdateMessage(ctx, m))
		got, err := s.Message(ctx, 1)
		require.NoError(t, err)
		assert.Equal(t, m, got)
		deleted, err := s.DeleteMessage(ctx, 1)
		require.NoError(t, err)
		assert.True(t, deleted)
		deleted, err = s.DeleteMessage(ctx, 1)
		require.NoError(t, err)
		assert.False(t, deleted)
		require.ErrorIs(t, s.UpdateMessage(ctx, m), core.ErrNotFound)
	}},
	{"appended messages get the next ids, one at a time", func(t *testing.T, s core.Store) {
		ctx := context.Background()
		require.NoError(t, s.CreateSession(ctx, core.Session{ID: 5}))
		require.NoError(t, s.CreateSession(ctx, core.Session{ID: 6}))
		require.NoError(t, s.CreateMessage(ctx, core.Message{ID: 40, SessionID: 5, Role: core.RoleInterviewee, Content: "A"}))
		m, err := s.AppendMessage(ctx, core.Message{ID: 3, SessionID: 5, Role: core.RoleInterviewer, Content: "Q2"})
		require.NoError(t, err)
		assert.Equal(t, int64(41), m.ID, "one above the highest; the given id is ignored")
		assert.Equal(t, core.MsgNormal, m.Status)
		_, err = s.AppendMessage(ctx, core.Message{SessionID: 99, Role: core.RoleInterviewer})
		require.ErrorIs(t, err, core.ErrNotFound)

		var wg sync.WaitGroup
		ids := make([]int64, 8)
		for i := range ids {
			wg.Go(func() {
				err := s.Atomically(ctx, func(ctx context.Context) error {
					m, err := s.AppendMessage(ctx, core.Message{SessionID: 6, Role: core.RoleInterviewer, Content: "Q"})
					ids[i] = m.ID
					return err
				})
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		slices.Sort(ids)
		assert.Equal(t, []int64{42, 43, 44, 45, 46, 47, 48, 49}, ids, "concurrent appenders never share an id")

		msgs, err := s.SessionMessages(ctx, 5)
		require.NoError(t, err)
		require.Len(t, msgs, 2)
		assert.Equal(t, []int64{40, 41}, []int64{msgs[0].ID, msgs[1].ID}, "in id order")
		assert.Equal(t, "Q2", msgs[1].Content)
		none, err := s.SessionMessages(ctx, 7)
		require.NoError(t, err)
		assert.Empty(t, none)
	}},
	{"atomically rolls back", func(t *testing.T, s core.Store) {
		ctx := context.Background()
		require.NoError(t, s.CreateSession(ctx, core.Session{ID: 5}))
		err := s.Atomically(ctx, func(ctx context.Context) error {
			require.NoError(t, s.CreateDocument(ctx, core.Document{ID: 1, TargetType: catalog.TargetResume, TargetID: 1}))
			require.NoError(t, s.SetQuestionPool(ctx, 5, []catalog.Question{{Question: "Q"}}))
			_, err := s.Document(ctx, 1)
			require.NoError(t, err, "reads see the transaction's writes")
			return errRollback
		})
		require.ErrorIs(t, err, errRollback)
		_, err = s.Document(ctx, 1)
		assert.ErrorIs(t, err, core.ErrNotFound)
		sess, err := s.Session(ctx, 5)
		require.NoError(t, err)
		assert.Nil(t, sess.QuestionPool)
		require.NoError(t, s.Atomically(ctx, func(ctx context.Context) error {
			return s.CreateDocument(ctx, core.Document{ID: 1, TargetType: catalog.TargetResume, TargetID: 1})
		}))
		_, err = s.Document(ctx, 1)
		assert.NoError(t, err)
	}},
}
