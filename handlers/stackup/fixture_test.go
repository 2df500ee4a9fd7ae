package stackup_test

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/msgctx"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/handlers/stackup"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/core"
	"github.com/eventpipe/eventpipe/handlers/stackup/envelope"
	"github.com/eventpipe/eventpipe/handlers/stackup/realtime"
)

var stackupTopology = func() topology.Topology {
	t, err := stackup.LoadTopology("../../" + stackup.TopologyFile)
	if err != nil {
		panic(err)
	}
	return t
}()

// testRetry is §6's policy with short waits.
var testRetry = catalog.Retry{MaxAttempts: 3, Backoff: route.Backoff{Initial: 20 * time.Millisecond, Multiplier: 2, Max: 100 * time.Millisecond}}

// behaviour decides what a fake processor does for a key (a resume,
// session or message id) at a 1-based call number: nil runs the sample.
type behaviour func(call int) error

// fakeProc is every processor: aiworker.Sample unless a behaviour is set
// for the request's key. It counts calls per key.
type fakeProc struct {
	aiworker.Sample
	mu        sync.Mutex
	behaviour map[int64]behaviour
	calls     map[int64]int
}

func newFakeProc() *fakeProc {
	return &fakeProc{behaviour: map[int64]behaviour{}, calls: map[int64]int{}}
}

func (p *fakeProc) on(key int64, b behaviour) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.behaviour[key] = b
}

func (p *fakeProc) called(key int64) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[key]
}

func (p *fakeProc) call(key int64) error {
	p.mu.Lock()
	p.calls[key]++
	n, b := p.calls[key], p.behaviour[key]
	p.mu.Unlock()
	if b == nil {
		return nil
	}
	return b(n)
}

// errBadOutput makes a processor succeed with a result our strict encoder
// refuses (a callback that cannot be assembled).
var errBadOutput = errors.New("bad output")

func (p *fakeProc) AnalyzeResume(ctx context.Context, j aiworker.Job, r *catalog.AnalyzeResumeV1) (aiworker.Analysis, error) {
	if err := p.call(r.ResumeID); errors.Is(err, errBadOutput) {
		return aiworker.Analysis{Summary: "s", DocumentPath: "/bucket/../escape.md"}, nil
	} else if err != nil {
		return aiworker.Analysis{}, err
	}
	return p.Sample.AnalyzeResume(ctx, j, r)
}

func (p *fakeProc) AnalyzeWeb(ctx context.Context, j aiworker.Job, r *catalog.AnalyzeWebV1) (aiworker.Analysis, error) {
	if err := p.call(r.ResumeID); err != nil {
		return aiworker.Analysis{}, err
	}
	return p.Sample.AnalyzeWeb(ctx, j, r)
}

func (p *fakeProc) AnalyzeRepository(ctx context.Context, j aiworker.Job, r *catalog.AnalyzeRepositoryV1) (aiworker.Analysis, error) {
	if err := p.call(r.RepositoryID); err != nil {
		return aiworker.Analysis{}, err
	}
	return p.Sample.AnalyzeRepository(ctx, j, r)
}

func (p *fakeProc) AnalyzeCoverLetter(ctx context.Context, j aiworker.Job, r *catalog.AnalyzeCoverLetterV1) (aiworker.Analysis, error) {
	if err := p.call(r.CoverLetterID); err != nil {
		return aiworker.Analysis{}, err
	}
	return p.Sample.AnalyzeCoverLetter(ctx, j, r)
}

func (p *fakeProc) GenerateQuestions(ctx context.Context, j aiworker.Job, r *catalog.GenerateQuestionsV1) ([]catalog.Question, error) {
	if err := p.call(r.SessionID); err != nil {
		return nil, err
	}
	return p.Sample.GenerateQuestions(ctx, j, r)
}

func (p *fakeProc) GenerateFollowup(ctx context.Context, j aiworker.Job, r *catalog.GenerateFollowupV1) (aiworker.Followup, error) {
	if err := p.call(r.AnswerMessageID); err != nil {
		return aiworker.Followup{}, err
	}
	return p.Sample.GenerateFollowup(ctx, j, r)
}

func (p *fakeProc) GenerateFeedback(ctx context.Context, j aiworker.Job, r *catalog.GenerateFeedbackV1) (catalog.FeedbackCallbackV1, error) {
	if err := p.call(r.SessionID); err != nil {
		return catalog.FeedbackCallbackV1{}, err
	}
	return p.Sample.GenerateFeedback(ctx, j, r)
}

func (p *fakeProc) SynthesizeSpeech(ctx context.Context, j aiworker.Job, r *catalog.GenerateTTSV1) (aiworker.Speech, error) {
	if err := p.call(r.MessageID); errors.Is(err, errBadOutput) {
		return aiworker.Speech{AudioKey: ""}, nil // SUCCEEDED needs an audioKey
	} else if err != nil {
		return aiworker.Speech{}, err
	}
	return p.Sample.SynthesizeSpeech(ctx, j, r)
}

func (p *fakeProc) AnalyzeVoice(ctx context.Context, j aiworker.Job, r *catalog.AnalyzeVoiceV1) (aiworker.VoiceAnalysis, error) {
	if err := p.call(r.MessageID); err != nil {
		return aiworker.VoiceAnalysis{}, err
	}
	return p.Sample.AnalyzeVoice(ctx, j, r)
}

// eventSink records realtime events.
type eventSink struct {
	mu     sync.Mutex
	events []realtime.Event
}

func (s *eventSink) Deliver(_ context.Context, e realtime.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, e)
	return nil
}

func (s *eventSink) types() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, e := range s.events {
		out = append(out, e.EventType)
	}
	return out
}

func (s *eventSink) find(channel string, id int64, eventType string) (realtime.Event, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.events {
		if e.Channel == channel && e.ID == id && e.EventType == eventType {
			return e, true
		}
	}
	return realtime.Event{}, false
}

// delivery is what a route saw of one message, after the broker.
type delivery struct {
	uuid     string
	metadata message.Metadata
	payload  []byte
}

// failingCallbacks fails the publish of a callback answering one of the
// listed request ids (its correlation_id): the §6 "success callback publish
// fails" row, on a real broker.
type failingCallbacks struct {
	message.Publisher
	mu  sync.Mutex
	ids map[string]bool
	// aiNotifications refuses the AI worker's own realtime notifications
	// (the volatile progress events of §5.12).
	aiNotifications bool
}

func (p *failingCallbacks) refuseAINotifications() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.aiNotifications = true
}

func (p *failingCallbacks) fail(requestID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ids[requestID] = true
}

func (p *failingCallbacks) recover(requestID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.ids, requestID)
}

func (p *failingCallbacks) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		if p.ids[m.Metadata.Get(envelope.CorrelationIDKey)] {
			return errBrokerRefused
		}
		if p.aiNotifications && strings.HasPrefix(topic, catalog.ExchangeRealtime+"/") {
			if env, err := envelope.Decode(m.Payload); err == nil && env.Publisher == envelope.PublisherAI {
				return errBrokerRefused
			}
		}
	}
	return p.Publisher.Publish(topic, msgs...)
}

type refusedError struct{}

func (refusedError) Error() string { return "broker refused the publish" }

var errBrokerRefused = refusedError{}

type fixture struct {
	t        *testing.T
	kind     string
	ps       broker.PubSub
	pub      message.Publisher
	h        *stackup.Handlers
	store    core.Store
	inbox    inbox.Store
	proc     *fakeProc
	sink     *eventSink
	failing  *failingCallbacks
	dlq      map[string]<-chan *message.Message
	mu       sync.Mutex
	seen     map[string][]delivery // queue → deliveries
	attempts map[string][]int      // message uuid → attempts seen
	handled  map[string]int        // message uuid → handler returns without error
	amqpURL  string
}

type fixtureOptions struct {
	dlqs     []string
	versions map[string][]aiworker.VersionHandler
	// consumerVersions are Core's and RealTime's (stackup.Deps.ConsumerVersions).
	consumerVersions map[string][]catalog.Version
	// aiQueues limits our AI worker to these request queues (a foreign
	// peer serves the others); empty means all.
	aiQueues []string
}

var testLogger = func() *slog.Logger {
	if os.Getenv("STACKUP_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}()

func newFixture(t *testing.T, kind string, opts fixtureOptions) *fixture {
	t.Helper()
	ps, pub, amqpURL := newRouted(t, kind, stackupTopology)
	f := &fixture{t: t, kind: kind, ps: ps, pub: pub, proc: newFakeProc(), sink: &eventSink{},
		dlq: map[string]<-chan *message.Message{}, seen: map[string][]delivery{}, attempts: map[string][]int{}, handled: map[string]int{}, amqpURL: amqpURL}
	f.failing = &failingCallbacks{Publisher: pub, ids: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	var outboxImpl outbox.Writer
	if kind == "postgres" {
		// Core's real store: state, inbox marker and outbox in one
		// transaction; a relay publishes the outbox after commit.
		pool, schema := dbtest.Schema(t)
		st, err := core.NewPostgres(pool, schema)
		require.NoError(t, err)
		ib, err := inbox.NewPostgres(pool, schema)
		require.NoError(t, err)
		f.store, f.inbox, outboxImpl = st, ib, outbox.TxWriter{Table: outbox.Table{Schema: schema}}
		relay, err := outbox.NewRelay(pool, f.failing, outbox.RelayConfig{Schema: schema, PollInterval: 100 * time.Millisecond}, testLogger)
		require.NoError(t, err)
		done := make(chan struct{})
		go func() { defer close(done); _ = relay.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	} else {
		f.store, f.inbox, outboxImpl = core.NewMemory(), inbox.NewMemory(), outbox.AfterCommit{Publisher: f.failing}
	}

	procs := aiworker.Processors{Resume: f.proc, CoverLetter: f.proc, Repository: f.proc, Web: f.proc, Questions: f.proc,
		Followup: f.proc, Feedback: f.proc, TTS: f.proc, Voice: f.proc}
	h, err := stackup.New(stackup.Roles{Core: true, AIWorker: true, Realtime: true}, stackup.Deps{
		Topology: stackupTopology, Publisher: f.failing, Inbox: f.inbox, Store: f.store, Outbox: outboxImpl,
		Processors: procs, Versions: opts.versions, ConsumerVersions: opts.consumerVersions, AIQueues: opts.aiQueues, Sink: f.sink, Retry: testRetry, Logger: testLogger,
	})
	require.NoError(t, err)
	f.h = h

	for _, q := range opts.dlqs {
		if init, ok := ps.(message.SubscribeInitializer); ok {
			require.NoError(t, init.SubscribeInitialize(q))
		}
		msgs, err := ps.Subscribe(ctx, q)
		require.NoError(t, err)
		f.dlq[q] = msgs
	}

	startRoutes(t, ps, h, func(r route.Route) route.Route {
		queue, handle := r.Queue, r.Handle
		r.Handle = func(msg *message.Message) error {
			f.mu.Lock()
			f.seen[queue] = append(f.seen[queue], delivery{uuid: msg.UUID, metadata: maps.Clone(msg.Metadata), payload: msg.Payload})
			f.attempts[msg.UUID] = append(f.attempts[msg.UUID], msgctx.Attempt(msg.Context()))
			f.mu.Unlock()
			err := handle(msg)
			if err == nil {
				f.mu.Lock()
				f.handled[msg.UUID]++
				f.mu.Unlock()
			}
			return err
		}
		return r
	})
	return f
}

// startRoutes runs h's routes on ps through the real middleware chain
// (app.AddRoute), each passed through wrap first, until the test ends.
func startRoutes(t *testing.T, ps broker.PubSub, h *stackup.Handlers, wrap ...func(route.Route) route.Route) {
	t.Helper()
	var routes []route.Route
	for _, r := range h.Routes() {
		for _, w := range wrap {
			r = w(r)
		}
		routes = append(routes, r)
	}
	testbrokers.StartRoutes(t, ps, nil, testLogger, routes...)
}

var idSeq atomic.Int64

func init() { idSeq.Store(time.Now().UnixMilli() % 1_000_000_000 * 1_000_000) }

// newID returns an id unique across tests and runs (the SQS queues are
// shared between runs). Ids are 1000 apart: the ids a store assigns itself
// (core.Store.AppendMessage: one above the highest) fall in between and
// never take one a test has reserved but not created yet.
func newID() int64 { return idSeq.Add(1000) }

// eventually waits for cond, failing with what.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			require.FailNow(t, "not within 45s", what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// deliveries returns what queue's route received whose correlation id (or
// uuid) is id.
func (f *fixture) deliveries(queue, correlationID string) []delivery {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []delivery
	for _, d := range f.seen[queue] {
		if d.metadata.Get(envelope.CorrelationIDKey) == correlationID {
			out = append(out, d)
		}
	}
	return out
}

// handledCount is how many deliveries of uuid a handler finished without
// error (a duplicate returns an error, so it is not counted).
func (f *fixture) handledCount(uuid string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.handled[uuid]
}

func (f *fixture) attemptsOf(uuid string) []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.attempts[uuid]...)
}

// deadLetter waits for the dead letter of message id on dlq.
func (f *fixture) deadLetter(dlq, id string) (*message.Message, metadata.DeadLetter) {
	f.t.Helper()
	ch, ok := f.dlq[dlq]
	require.True(f.t, ok, "fixture does not watch %s", dlq)
	timeout := time.After(45 * time.Second)
	for {
		select {
		case m := <-ch:
			m.Ack()
			if m.UUID != id {
				continue // another run's leftover (SQS queues are shared)
			}
			dl, ok, err := metadata.DeadLetterOf(m)
			require.NoError(f.t, err)
			require.True(f.t, ok, "dead letter %s has no history", id)
			return m, dl
		case <-timeout:
			require.Failf(f.t, "no dead letter within 45s", "%s on %s", id, dlq)
			return nil, metadata.DeadLetter{}
		}
	}
}

// publishRaw publishes body as a message with id (the envelope's messageId
// on our side) and the given metadata, to topic via the routing publisher.
func (f *fixture) publishRaw(topic, id string, body []byte, md map[string]string) {
	f.t.Helper()
	msg := message.NewMessage(id, body)
	for k, v := range md {
		msg.Metadata.Set(k, v)
	}
	require.NoError(f.t, f.pub.Publish(topic, msg))
}
