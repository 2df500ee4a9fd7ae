package stackup_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/handlers/stackup"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/envelope"
)

const (
	crashScopeEnv  = "EVENTPIPE_TEST_STACKUP_CRASH_SCOPE"
	crashSchemaEnv = "EVENTPIPE_TEST_STACKUP_CRASH_SCHEMA"
	crashLease     = 2 * time.Second
)

// A worker killed (SIGKILL) in the middle of its model call loses nothing:
// the redelivered request is not acknowledged as a duplicate (the processed
// marker is written only with the callback), the next worker waits out the
// dead one's lease, does the work and answers once. On RabbitMQ, with the
// inbox and the callback outbox in PostgreSQL, as in production.
func TestAIWorkerKilledMidCallAnswersOnce(t *testing.T) {
	t.Parallel()
	scope := testbrokers.Scope(t, "rabbitmq")
	pool, schema := dbtest.Schema(t)
	ps, pub := testbrokers.NewRouted(t, "rabbitmq", scope, stackupTopology)
	callbacks, err := ps.Subscribe(context.Background(), "core.callback.analysis")
	require.NoError(t, err)

	web := newID()
	req, topic := encode(t, catalog.Outgoing{Type: catalog.AnalyzeWeb, Payload: &catalog.AnalyzeWebV1{ResumeID: web, URL: "https://example.com/me", AnalyzedDocumentID: newID()}})
	require.NoError(t, pub.Publish(topic, req))

	id := testenv.KillChildAt(t, "TestAIWorkerCrashChild", "WORKING ", crashScopeEnv+"="+scope, crashSchemaEnv+"="+schema)
	require.Equal(t, req.UUID, id, "killed in the middle of this request's model call")

	// The next worker: same inbox, same broker, a model that answers.
	proc := newFakeProc()
	startAIWorker(t, ps, pub, pool, schema, aiworker.Processors{Web: proc})

	got := map[string]int{}
	count := func(m *message.Message) {
		m.Ack()
		got[m.Metadata.Get(envelope.CorrelationIDKey)]++
	}
	deadline := time.After(60 * time.Second)
	for len(got) == 0 {
		select {
		case m := <-callbacks:
			count(m)
		case <-deadline:
			t.Fatal("no callback within 60 s after the kill: the request was lost")
		}
	}
	settle := time.After(3 * time.Second) // a second answer must not follow
	for waiting := true; waiting; {
		select {
		case m := <-callbacks:
			count(m)
		case <-settle:
			waiting = false
		}
	}
	assert.Equal(t, map[string]int{req.UUID: 1}, got, "answered exactly once")
	assert.Equal(t, 1, proc.called(web), "the second worker did the work")
}

// TestAIWorkerCrashChild is the worker TestAIWorkerKilledMidCallAnswersOnce
// kills: its model call never returns. Run any other way it skips.
func TestAIWorkerCrashChild(t *testing.T) {
	scope := os.Getenv(crashScopeEnv)
	if scope == "" {
		t.Skipf("not a test on its own: the child process TestAIWorkerKilledMidCallAnswersOnce starts (with %s set) and kills", crashScopeEnv)
	}
	ps, pub := testbrokers.NewRouted(t, "rabbitmq", scope, stackupTopology)
	pool, err := pgxpool.New(context.Background(), testenv.PostgresDSN(t))
	require.NoError(t, err)
	startAIWorker(t, ps, pub, pool, os.Getenv(crashSchemaEnv), aiworker.Processors{Web: hangingWeb{}})
	time.Sleep(10 * time.Minute) // until SIGKILL
}

// hangingWeb's model call never returns (the worker is killed during it).
type hangingWeb struct{}

func (hangingWeb) AnalyzeWeb(ctx context.Context, j aiworker.Job, _ *catalog.AnalyzeWebV1) (aiworker.Analysis, error) {
	fmt.Println("WORKING " + j.Envelope.MessageID)
	<-ctx.Done()
	time.Sleep(10 * time.Minute)
	return aiworker.Analysis{}, ctx.Err()
}

// startAIWorker runs the AI worker role on the web queue with the inbox and
// the callback outbox in schema, and a relay publishing the callbacks.
func startAIWorker(t *testing.T, ps broker.PubSub, pub message.Publisher, pool *pgxpool.Pool, schema string, procs aiworker.Processors) {
	t.Helper()
	ib, err := inbox.NewPostgres(pool, schema)
	require.NoError(t, err)
	h, err := stackup.New(stackup.Roles{AIWorker: true}, stackup.Deps{
		Topology: stackupTopology, Publisher: pub, Inbox: ib, Outbox: outbox.TxWriter{Table: outbox.Table{Schema: schema}},
		Processors: procs, AIQueues: []string{"ai.analyze.web"}, Retry: catalog.Retry{MaxAttempts: 5, Backoff: testRetry.Backoff},
		LeaseTTL: crashLease, Logger: testLogger,
	})
	require.NoError(t, err)
	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{Schema: schema, PollInterval: 100 * time.Millisecond}, testLogger)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = relay.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	startRoutes(t, ps, h)
}
