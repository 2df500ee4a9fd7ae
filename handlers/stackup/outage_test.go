package stackup_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/handlers/stackup"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/envelope"
)

// questionsConsumer is the inbox consumer (route) name of the questions
// queue.
var questionsConsumer = aiworker.RouteName("ai.generate.questions")

// A redelivery that meets another worker's live lease waits for it without
// spending its attempts: seen in `make chaos`, a request whose worker was
// killed mid-call met the dead worker's lease on each redelivery, ran out of
// its three attempts and was dead-lettered with nobody left to answer it.
// Here the lease outlives three attempts' worth of retries; the request must
// still be answered, once, when it is released.
func TestAIWorkerWaitsOutAnotherWorkersLease(t *testing.T) {
	t.Parallel()
	ib := inbox.NewMemory()
	w := startQuestionsWorker(t, ib)
	req, topic := encode(t, catalog.Outgoing{Type: catalog.GenerateQuestions, Payload: &catalog.GenerateQuestionsV1{SessionID: newID(), Mode: "TECHNICAL"}})

	held, err := ib.Lease(context.Background(), questionsConsumer, req.UUID, 300*time.Millisecond)
	require.NoError(t, err)
	require.NoError(t, w.pub.Publish(topic, req))
	time.Sleep(2 * time.Second) // ≫ 3 attempts × (backoff ≤ 100 ms, lease left ≤ 300 ms)
	held.Release()              // its holder ended without an answer

	w.expectAnsweredOnce(t, req.UUID)
}

// A database that does not answer for a moment — while the lease is taken
// or while the callback's row is written with the marker — is waited for:
// the request is answered once, not dead-lettered after three quick tries
// (seen in `make chaos`: a 1-second cut of the database connections sent
// valid requests to the DLQ, one of them after its model call).
func TestAIWorkerRidesOutADatabaseBlip(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"lease", "answer"} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			ib := &flakyInbox{Store: inbox.NewMemory(), step: step, failures: 6}
			w := startQuestionsWorker(t, ib)
			req, topic := encode(t, catalog.Outgoing{Type: catalog.GenerateQuestions, Payload: &catalog.GenerateQuestionsV1{SessionID: newID(), Mode: "TECHNICAL"}})
			require.NoError(t, w.pub.Publish(topic, req))
			w.expectAnsweredOnce(t, req.UUID)
			assert.Zero(t, ib.left(), "every failure was met")
		})
	}
}

type questionsWorker struct {
	pub       message.Publisher
	callbacks <-chan *message.Message
	dead      <-chan *message.Message
	proc      *fakeProc
}

// startQuestionsWorker runs the AI worker on ai.generate.questions, on the
// embedded broker, with ib as its inbox and callbacks published after the
// marker's commit.
func startQuestionsWorker(t *testing.T, ib inbox.Store) *questionsWorker {
	t.Helper()
	ps, pub, _ := newRouted(t, "memory", stackupTopology)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	callbacks, err := ps.Subscribe(ctx, "core.callback.questions")
	require.NoError(t, err)
	dead, err := ps.Subscribe(ctx, "dlq.ai.generate.questions")
	require.NoError(t, err)
	proc := newFakeProc()
	h, err := stackup.New(stackup.Roles{AIWorker: true}, stackup.Deps{
		Topology: stackupTopology, Publisher: pub, Inbox: ib, Outbox: outbox.AfterCommit{Publisher: pub},
		Processors: aiworker.Processors{Questions: proc}, AIQueues: []string{"ai.generate.questions"}, Retry: testRetry,
		LeaseTTL: 300 * time.Millisecond, Logger: testLogger,
	})
	require.NoError(t, err)
	startRoutes(t, ps, h)
	return &questionsWorker{pub: pub, callbacks: callbacks, dead: dead, proc: proc}
}

// expectAnsweredOnce waits for the callback of request id and checks that
// no second one follows and nothing was dead-lettered.
func (w *questionsWorker) expectAnsweredOnce(t *testing.T, id string) {
	t.Helper()
	got := 0
	deadline := time.After(30 * time.Second)
	settle := (<-chan time.Time)(nil)
	for {
		select {
		case m := <-w.callbacks:
			m.Ack()
			if m.Metadata.Get(envelope.CorrelationIDKey) == id {
				got++
				settle = time.After(time.Second)
			}
		case m := <-w.dead:
			m.Ack()
			t.Fatalf("request dead-lettered: %s", m.Metadata.Get("x-dead-letter"))
		case <-settle:
			assert.Equal(t, 1, got, "answered exactly once")
			return
		case <-deadline:
			t.Fatalf("no callback within 30 s (%d so far)", got)
		}
	}
}

// flakyInbox fails its first failures calls of one step (Lease, or the
// answer's Process) with a transient error, as a database that is cut off
// for a moment does.
type flakyInbox struct {
	inbox.Store
	step     string
	mu       sync.Mutex
	failures int
}

var errDatabaseCut = failure.AsTransient(errors.New("write failed: connection reset by peer"), 0)

func (f *flakyInbox) fail(step string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if step != f.step || f.failures == 0 {
		return nil
	}
	f.failures--
	return errDatabaseCut
}

func (f *flakyInbox) left() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failures
}

func (f *flakyInbox) Lease(ctx context.Context, consumer, messageID string, ttl time.Duration) (*inbox.Lease, error) {
	if err := f.fail("lease"); err != nil {
		return nil, err
	}
	return f.Store.Lease(ctx, consumer, messageID, ttl)
}

func (f *flakyInbox) Process(ctx context.Context, consumer, messageID string, effect func(context.Context) error) error {
	if err := f.fail("answer"); err != nil {
		return err
	}
	return f.Store.Process(ctx, consumer, messageID, effect)
}
