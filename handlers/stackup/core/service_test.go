package core_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/app/schemas"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/handlers/stackup"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/core"
	"github.com/eventpipe/eventpipe/handlers/stackup/envelope"
)

type recorder struct {
	mu     sync.Mutex
	topics []string
	msgs   []*message.Message
}

func (r *recorder) Publish(topic string, msgs ...*message.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		r.topics, r.msgs = append(r.topics, topic), append(r.msgs, m)
	}
	return nil
}

func (r *recorder) Close() error { return nil }

func loadTopology(t *testing.T) topology.Topology {
	t.Helper()
	top, err := stackup.LoadTopology("../../../" + stackup.TopologyFile)
	require.NoError(t, err)
	return top
}

// §5.14: a request leaves only after its transaction commits — on the memory
// store after the in-memory commit, never when the business write fails.
func TestMemoryRequestPublishedAfterCommit(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	store := core.NewMemory()
	svc, err := core.New(core.Config{Catalog: catalog.Default(), Topology: loadTopology(t), Store: store,
		Outbox: outbox.AfterCommit{Publisher: rec}, Inbox: inbox.NewMemory(), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	ctx := context.Background()

	id, err := svc.RequestAnalysis(ctx, 7, &catalog.AnalyzeResumeV1{ResumeID: 42, FilePath: "resumes/raw/7/a.pdf", AnalyzedDocumentID: 101})
	require.NoError(t, err)
	require.Len(t, rec.msgs, 1)
	assert.Equal(t, "stackup.core-to-ai/analyze.resume", rec.topics[0])
	assert.Equal(t, id, rec.msgs[0].UUID)
	env, err := envelope.DecodeStrict(rec.msgs[0].Payload)
	require.NoError(t, err)
	assert.Equal(t, envelope.PublisherCore, env.Publisher)
	assert.Equal(t, int64(7), *env.Context.UserID)

	_, err = svc.RequestAnalysis(ctx, 7, &catalog.AnalyzeResumeV1{ResumeID: 43, FilePath: "resumes/raw/7/b.pdf", AnalyzedDocumentID: 101})
	require.Error(t, err, "the document id exists: the transaction fails")
	_, err = svc.RequestFeedback(ctx, 7, &catalog.GenerateFeedbackV1{SessionID: 404, Mode: "TECHNICAL"})
	require.ErrorIs(t, err, core.ErrNotFound)
	assert.Len(t, rec.msgs, 1, "nothing published for a rolled-back transaction")
}

// On Postgres the request is an outbox row of the business transaction.
func TestPostgresRequestWrittenToTheOutbox(t *testing.T) {
	t.Parallel()
	pool, schema := dbtest.Schema(t)
	store, err := core.NewPostgres(pool, schema)
	require.NoError(t, err)
	ib, err := inbox.NewPostgres(pool, schema)
	require.NoError(t, err)
	svc, err := core.New(core.Config{Catalog: catalog.Default(), Topology: loadTopology(t), Store: store,
		Outbox: outbox.TxWriter{Table: outbox.Table{Schema: schema}}, Inbox: ib, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, store.CreateSession(ctx, core.Session{ID: 9, UserID: 7}))

	id, err := svc.RequestFeedback(ctx, 7, &catalog.GenerateFeedbackV1{SessionID: 9, Mode: "TECHNICAL"})
	require.NoError(t, err)
	_, err = svc.RequestFeedback(ctx, 7, &catalog.GenerateFeedbackV1{SessionID: 404, Mode: "TECHNICAL"})
	require.Error(t, err)

	rows, err := pool.Query(ctx, `SELECT event_id, topic, payload FROM `+pgx.Identifier{schema, "outbox"}.Sanitize())
	require.NoError(t, err)
	type row struct {
		id, topic string
		payload   []byte
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.id, &x.topic, &x.payload)
	})
	require.NoError(t, err)
	require.Len(t, got, 1, "the failed request left no row")
	assert.Equal(t, id, got[0].id)
	assert.Equal(t, "stackup.core-to-ai/generate.feedback", got[0].topic)
	env, err := envelope.DecodeStrict(got[0].payload)
	require.NoError(t, err)
	p, err := catalog.Default().DecodePayload(env)
	require.NoError(t, err)
	sess, err := store.Session(ctx, 9)
	require.NoError(t, err)
	assert.Equal(t, sess.FeedbackAttemptID, p.(*catalog.GenerateFeedbackV1).AttemptID, "the attempt id is on the session and in the request")
}

func TestNewNeedsItsDependencies(t *testing.T) {
	t.Parallel()
	_, err := core.New(core.Config{})
	require.ErrorIs(t, err, catalog.ErrNotConfigured)
	assert.ErrorContains(t, err, "store")
	assert.ErrorContains(t, err, "outbox")
	assert.ErrorContains(t, err, "inbox")
}

// The contract's arrays are arrays (§5.6, §5.8, §5.10): a request whose lists
// the caller left nil goes out with [], which the strict schema of our
// publishers accepts, never with null, which it refuses.
func TestRequestsSendNilListsAsArrays(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	store := core.NewMemory()
	svc, err := core.New(core.Config{Catalog: catalog.Default(), Topology: loadTopology(t), Store: store,
		Outbox: outbox.AfterCommit{Publisher: rec}, Inbox: inbox.NewMemory(), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, store.CreateSession(ctx, core.Session{ID: 9, UserID: 7}))

	_, err = svc.RequestQuestions(ctx, 7, &catalog.GenerateQuestionsV1{SessionID: 9, Mode: "TECHNICAL", InitialQuestionCount: 2, MaxQuestions: 10})
	require.NoError(t, err)
	placeholder := int64(503)
	_, err = svc.RequestFollowup(ctx, 7, &catalog.GenerateFollowupV1{SessionID: 9, ParentMessageID: 501, AnswerMessageID: 502,
		PreviousQuestion: "가장 어려웠던 점은?", AnswerText: "동시성 문제였습니다.", Mode: "TECHNICAL", FollowupMessageID: &placeholder})
	require.NoError(t, err)
	_, err = svc.RequestFeedback(ctx, 7, &catalog.GenerateFeedbackV1{SessionID: 9, Mode: "TECHNICAL"})
	require.NoError(t, err)

	cat, err := schemas.Load()
	require.NoError(t, err)
	require.Len(t, rec.msgs, 3)
	for i, m := range rec.msgs {
		queue := "ai." + rec.topics[i][strings.LastIndex(rec.topics[i], "/")+1:]
		assert.NotContains(t, string(m.Payload), "null]", rec.topics[i])
		assert.NoError(t, cat.ValidateQueue(queue, m.Payload, schemas.Strict), "%s: %s", queue, m.Payload)
	}
}
