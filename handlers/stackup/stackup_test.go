package stackup_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/llm"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/app/spec"
	"github.com/eventpipe/eventpipe/config"
	"github.com/eventpipe/eventpipe/handlers/stackup"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/core"
)

const smoke = `{"messageId":"smoke-1","messageType":"analyze.resume","version":"v1","traceId":"local-test","publishedAt":"2026-04-27T15:00:00Z","publisher":"manual","payload":{"resumeId":1,"filePath":"resumes/raw/1/test.pdf","analyzedDocumentId":1},"context":{"userId":1}}`

// `eventpipe publish` validates with CatalogRoutes: the §9 body passes for
// its queue, and what a publisher of ours must not send is refused.
func TestCatalogRoutes(t *testing.T) {
	t.Parallel()
	set := stackup.CatalogRoutes()
	assert.Len(t, set, 15)
	r, err := set.ByQueue("ai.analyze.resume")
	require.NoError(t, err)
	require.NoError(t, r.Validate([]byte(smoke)))
	assert.Equal(t, "dlq.ai.analyze.resume", r.Policy.DeadLetterQueue)

	refused := map[string]string{
		"unknown field": strings.Replace(smoke, `"resumeId":1,`, `"resumeId":1,"extra":true,`, 1),
		"secret":        strings.Replace(smoke, `"resumeId":1,`, `"resumeId":1,"accessToken":"x",`, 1),
		"other type":    strings.Replace(smoke, `"analyze.resume"`, `"analyze.web"`, 1),
	}
	for name, body := range refused {
		assert.Error(t, r.Validate([]byte(body)), name)
	}
	rt, err := set.ByQueue("q.realtime.session.notify")
	require.NoError(t, err)
	require.NoError(t, rt.Validate([]byte(`{"messageId":"n1","messageType":"realtime.user.notify","version":"v1","traceId":"t","publishedAt":"2026-04-27T15:00:00Z","publisher":"ai-server","payload":{"eventType":"ANALYSIS_PROGRESS","data":{"phase":"EXTRACTING"}},"context":{"userId":1}}`)))
}

func TestNewNeedsARole(t *testing.T) {
	t.Parallel()
	_, err := stackup.New(stackup.Roles{}, stackup.Deps{})
	require.ErrorContains(t, err, "no role enabled")
	_, err = stackup.New(stackup.Roles{AIWorker: true}, stackup.Deps{Topology: stackupTopology, Publisher: nil, Inbox: inbox.NewMemory()})
	require.ErrorContains(t, err, "processor is not configured")
}

// The embedded mode's sample traffic makes full round trips.
func TestSampleTraffic(t *testing.T) {
	t.Parallel()
	ps, pub, _ := newRouted(t, "memory", stackupTopology)
	store, sink := core.NewMemory(), &eventSink{}
	h, err := stackup.New(stackup.Roles{Core: true, AIWorker: true, Realtime: true}, stackup.Deps{
		Topology: stackupTopology, Publisher: pub, Inbox: inbox.NewMemory(), Store: store, Outbox: outbox.AfterCommit{Publisher: pub},
		Processors: aiworker.SampleProcessors(), Sink: sink, Retry: testRetry, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	startRoutes(t, ps, h)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- stackup.SampleTraffic(ctx, h, 20*time.Millisecond, slog.New(slog.DiscardHandler)) }()
	eventually(t, "a sample analysis, pool, follow-up and feedback applied on the README's session", func() bool {
		analysed := false
		// SampleTraffic numbers its ids from the Unix time in milliseconds.
		now := time.Now().Unix() * 1000
		for id := now - 5000; id < now+5000; id++ {
			if d, err := store.Document(context.Background(), id); err == nil && d.Status == core.DocAnalyzed {
				analysed = true
				break
			}
		}
		s, err := store.Session(context.Background(), stackup.SampleSessionID)
		if err != nil || s.UserID != stackup.SampleUserID {
			return false
		}
		_, ferr := store.Feedback(context.Background(), stackup.SampleSessionID)
		return analysed && len(s.QuestionPool) > 0 && ferr == nil
	})
	events := sink.types()
	for _, want := range []string{catalog.EventAnalysisProgress, catalog.EventPoolProgress, catalog.EventMessageDelta, catalog.EventMessageAudio,
		catalog.EventFeedbackProgress} {
		assert.Contains(t, events, want, "make run shows every progress event")
	}
	cancel()
	require.NoError(t, <-done)
	require.Error(t, stackup.SampleTraffic(ctx, &stackup.Handlers{}, time.Second, slog.New(slog.DiscardHandler)))
}

func TestSettings(t *testing.T) {
	t.Parallel()
	r, err := stackup.ParseRoles(" core, ai-worker ,core")
	require.NoError(t, err)
	assert.Equal(t, stackup.Roles{Core: true, AIWorker: true}, r)
	_, err = stackup.ParseRoles("core,worker")
	require.ErrorContains(t, err, `unknown role "worker"`)
	_, err = stackup.ParseRoles(" , ")
	require.Error(t, err)
	assert.Equal(t, []string{"ai.generate.questions", "ai.generate.followup", "ai.generate.feedback"}, stackup.ParseQueues(stackup.GenerateQueues))
	assert.Empty(t, stackup.ParseQueues(""))

	p, err := stackup.NewProcessors(stackup.ProcessorsLLM, llm.Config{AllowNoKey: true, BaseURL: "http://127.0.0.1:1/v1"})
	require.NoError(t, err)
	assert.NotNil(t, p.Questions)
	assert.Nil(t, p.Resume, "no analysis processor on the LLM: that queue refuses to start")
	_, err = stackup.New(stackup.Roles{AIWorker: true}, stackup.Deps{Topology: stackupTopology, Publisher: nopPub{}, Inbox: inbox.NewMemory(), Processors: p})
	require.ErrorContains(t, err, "queue ai.analyze.resume: the analyze.resume processor is not configured")
	_, err = stackup.New(stackup.Roles{AIWorker: true}, stackup.Deps{Topology: stackupTopology, Publisher: nopPub{}, Inbox: inbox.NewMemory(), Processors: p,
		AIQueues: stackup.ParseQueues(stackup.GenerateQueues)})
	require.NoError(t, err)
	_, err = stackup.NewProcessors("gpt", llm.Config{})
	require.Error(t, err)
}

type nopPub struct{}

func (nopPub) Publish(string, ...*message.Message) error { return nil }
func (nopPub) Close() error                              { return nil }

// stackup.processors real (the default) without its credentials refuses to
// start, naming each missing part and the offline alternative.
func TestRealProcessorsNeedTheirCredentials(t *testing.T) {
	t.Parallel()
	cfg := config.Defaults()
	cfg.StackUp.InternalAddr = ""
	_, err := stackup.NewRealProcessors(context.Background(), spec.Deps{Config: cfg, LLM: llm.Config{LookupEnv: func(string) (string, bool) { return "", false }},
		Getenv: func(string) string { return "" }}, stackup.Adapters{})
	require.Error(t, err)
	for _, want := range []string{"no API key", "EVENTPIPE_STACKUP_INTERNAL_API_KEY", "stackup.s3_bucket is empty", "stackup.processors=sample"} {
		assert.Contains(t, err.Error(), want)
	}
	assert.Equal(t, stackup.ProcessorsReal, config.Defaults().StackUp.Processors)

	cfg.StackUp.S3Bucket = "b"
	_, err = stackup.NewRealProcessors(context.Background(), spec.Deps{Config: cfg, LLM: llm.Config{AllowNoKey: true},
		Getenv: func(string) string { return "k" }}, stackup.Adapters{})
	assert.ErrorContains(t, err, "no S3 adapter")
}
