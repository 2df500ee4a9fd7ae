package stackup_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/core"
	"github.com/eventpipe/eventpipe/handlers/stackup/envelope"
)

// peerHeader is one AMQP header as a peer decoded it, in its language's
// terms (int, str, bool, table, …).
type peerHeader struct {
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value"`
}

func (h peerHeader) str() string {
	var s string
	_ = json.Unmarshal(h.Value, &s)
	return s
}

// peerMessage is what a peer reports of a message it consumed.
type peerMessage struct {
	Body            json.RawMessage       `json:"body"`
	Exchange        string                `json:"exchange"`
	RoutingKey      string                `json:"routingKey"`
	MessageID       string                `json:"messageId"`
	CorrelationID   string                `json:"correlationId"`
	ContentType     string                `json:"contentType"`
	ContentEncoding string                `json:"contentEncoding"`
	DeliveryMode    int                   `json:"deliveryMode"`
	Headers         map[string]peerHeader `json:"headers"`
}

type peerResult struct {
	Collected map[string][]peerMessage `json:"collected"`
	Served    []struct {
		Answered string      `json:"answered"`
		Rejected string      `json:"rejected"`
		Report   peerMessage `json:"report"`
	} `json:"served"`
	Error string `json:"error"`
}

// amqpPeer is a foreign client of the contract: the AI server's own
// aio-pika (Debian's python3-aio-pika), or Node's amqplib. Both are
// installed by .ci/amqp-peers, which make test runs first: a missing one
// fails the test, here as under CI — it is never skipped.
type amqpPeer struct {
	name string
	// attempt is how the peer spells x-attempt: {"int": 2} or {"str": "2"}.
	attempt map[string]any
	command func(t *testing.T) *exec.Cmd
}

var amqpPeers = []amqpPeer{
	{name: "aio-pika", attempt: map[string]any{"int": 2}, command: func(t *testing.T) *exec.Cmd {
		python := os.Getenv("EVENTPIPE_PYTHON")
		if python == "" {
			python = "/usr/bin/python3"
		}
		if out, err := exec.Command(python, "-c", "import aio_pika").CombinedOutput(); err != nil {
			require.FailNow(t, "aio-pika is not installed", "run .ci/amqp-peers (make test does): %s: %v: %s", python, err, out)
		}
		return exec.Command(python, filepath.Join("testdata", "python", "peer.py"))
	}},
	{name: "amqplib", attempt: map[string]any{"str": "2"}, command: func(t *testing.T) *exec.Cmd {
		dir := filepath.Join("testdata", "node")
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "amqplib", "package.json")); err != nil {
			require.FailNow(t, "the npm amqplib is not installed", "run .ci/amqp-peers (make test does): %v", err)
		}
		node, err := exec.LookPath("node")
		require.NoError(t, err, "node is needed for the amqplib interop tests")
		cmd := exec.Command(node, "peer.js")
		cmd.Dir = dir
		return cmd
	}},
}

// runPeer starts the peer with plan, waits for it to say "ready", runs
// whileRunning, and returns its report.
func runPeer(t *testing.T, p amqpPeer, plan map[string]any, whileRunning func()) peerResult {
	t.Helper()
	line, err := json.Marshal(plan)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := p.command(t)
	cmd = exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	if p.name == "amqplib" {
		cmd.Dir = filepath.Join("testdata", "node")
	}
	cmd.Stdin = bytes.NewReader(append(line, '\n'))
	var stderr lockedBuffer // written by exec's copier while the peer runs
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := bufio.NewScanner(stdout)
	lines.Buffer(make([]byte, 1<<20), 16<<20)
	require.True(t, lines.Scan(), "%s: no output; stderr: %s", p.name, stderr.String())
	require.Equal(t, "ready", lines.Text(), "%s; stderr: %s", p.name, stderr.String())
	whileRunning()
	var last string
	for lines.Scan() {
		last = lines.Text()
	}
	require.NoError(t, cmd.Wait(), "%s: %s; stderr: %s", p.name, last, stderr.String())
	var res peerResult
	require.NoError(t, json.Unmarshal([]byte(last), &res), "%s printed %q", p.name, last)
	require.Empty(t, res.Error, "%s; stderr: %s", p.name, stderr.String())
	return res
}

// lockedBuffer is a bytes.Buffer safe to read while a process writes to it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Seen from a foreign peer on the same RabbitMQ (issue 16 item 4): requests
// from the peer are processed (its x-attempt honoured), our callbacks decode
// on its side with nothing of ours it must know about, its callbacks are
// applied by our Core, its rejects land in our DLQs (RabbitMQ dead-letters
// them), and our dead letters land in its queue bound to the contract's DLX,
// with the conventional headers.
func TestInteropWithForeignPeers(t *testing.T) {
	t.Parallel()
	for _, p := range amqpPeers {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			testInterop(t, p)
		})
	}
}

func testInterop(t *testing.T, p amqpPeer) {
	// The peer is the AI server of generate.questions; we are the rest.
	ours := slices.DeleteFunc(aiworker.RequestQueues(catalog.Default()), func(q string) bool { return q == "ai.generate.questions" })
	f := newFixture(t, "rabbitmq", fixtureOptions{aiQueues: ours, dlqs: []string{"dlq.ai.generate.questions"}})
	ctx := context.Background()
	user := newID()

	resume, doc := newID(), newID()
	require.NoError(t, f.store.CreateDocument(ctx, core.Document{ID: doc, UserID: user, TargetType: catalog.TargetResume, TargetID: resume}))
	sidOK, sidRejected := newID(), newID()
	for _, sid := range []int64{sidOK, sidRejected} {
		require.NoError(t, f.store.CreateSession(ctx, core.Session{ID: sid, UserID: user}))
	}
	peerRequest := envelope.NewID()
	request := fmt.Sprintf(`{"messageId":%q,"messageType":"analyze.resume","version":"v1","traceId":"peer-trace-%s","publishedAt":"2026-04-27T15:00:00Z","publisher":"core-server","payload":{"resumeId":%d,"filePath":"resumes/raw/1/peer.pdf","analyzedDocumentId":%d},"context":{"userId":%d}}`,
		peerRequest, peerRequest, resume, doc, user)

	plan := map[string]any{
		"url": f.amqpURL,
		"bind": []map[string]string{
			{"name": "callbacks", "exchange": catalog.ExchangeAIToCore, "routingKey": catalog.CallbackAnalysis},
			{"name": "dead", "exchange": "stackup.dlx", "routingKey": "dlq.core.callback.questions"},
		},
		"publish": []map[string]any{{
			"exchange": catalog.ExchangeCoreToAI, "routingKey": catalog.AnalyzeResume, "body": request,
			"messageId": peerRequest, "contentType": "application/json",
			"headers": map[string]any{"x-attempt": p.attempt},
		}},
		"serve":     map[string]any{"queue": "ai.generate.questions", "count": 2, "rejectSessions": []int64{sidRejected}},
		"expect":    map[string]int{"callbacks": 1, "dead": 1},
		"timeoutMs": 45000,
	}
	var okRequest, rejectedRequest, badCallback string
	res := runPeer(t, p, plan, func() {
		var err error
		okRequest, err = f.h.Core.RequestQuestions(ctx, user, &catalog.GenerateQuestionsV1{SessionID: sidOK, Mode: "TECHNICAL", InitialQuestionCount: 1, MaxQuestions: 5})
		require.NoError(t, err)
		rejectedRequest, err = f.h.Core.RequestQuestions(ctx, user, &catalog.GenerateQuestionsV1{SessionID: sidRejected, Mode: "TECHNICAL", InitialQuestionCount: 1, MaxQuestions: 5})
		require.NoError(t, err)
		// Ours into theirs: a callback our Core refuses (no traceId).
		badCallback = envelope.NewID()
		f.publishRaw(catalog.ExchangeAIToCore+"/"+catalog.CallbackQuestions, badCallback,
			[]byte(fmt.Sprintf(`{"messageId":%q,"messageType":"callback.questions","version":"v1","publishedAt":"2026-04-27T15:00:00Z","publisher":"ai-server","payload":{"sessionId":%d,"kind":"POOL"}}`, badCallback, sidOK)), nil)
	})

	// The peer's request was processed, with its x-attempt honoured: two
	// earlier attempts, so this one is the third.
	eventually(t, "the peer's request answered", func() bool { return docStatus(f, doc) == core.DocAnalyzed })
	assert.Equal(t, []int{3}, f.attemptsOf(peerRequest), "x-attempt 2 from the peer (%v)", p.attempt)

	// Our callback, as the peer decoded it.
	require.Len(t, res.Collected["callbacks"], 1)
	cb := res.Collected["callbacks"][0]
	var env envelope.Envelope
	require.NoError(t, json.Unmarshal(cb.Body, &env), "the body is the JSON envelope")
	assert.Equal(t, catalog.CallbackAnalysis, env.MessageType)
	assert.Equal(t, "peer-trace-"+peerRequest, env.TraceID)
	var payload catalog.AnalysisCallbackV1
	require.NoError(t, json.Unmarshal(env.Payload, &payload))
	assert.Equal(t, catalog.StatusAnalyzed, payload.Status)
	assert.Equal(t, catalog.ExchangeAIToCore, cb.Exchange)
	assert.Equal(t, catalog.CallbackAnalysis, cb.RoutingKey)
	assert.Equal(t, env.MessageID, cb.MessageID, "message_id = messageId (§3)")
	assert.Equal(t, peerRequest, cb.CorrelationID, "correlation_id = the request's messageId (§3)")
	assert.Equal(t, "application/json", cb.ContentType)
	assert.Equal(t, "utf-8", cb.ContentEncoding)
	assert.Equal(t, 2, cb.DeliveryMode, "persistent")
	assert.Equal(t, "str", cb.Headers["x-trace-id"].Type)
	assert.Equal(t, env.TraceID, cb.Headers["x-trace-id"].str())
	assert.Equal(t, "int", cb.Headers["x-attempt"].Type, "x-attempt is a number")
	assert.JSONEq(t, "0", string(cb.Headers["x-attempt"].Value))
	var names []string
	for k := range cb.Headers {
		names = append(names, k)
	}
	assert.ElementsMatch(t, []string{"x-trace-id", "x-attempt"}, names, "no header of eventpipe's own a peer must know about")

	// Our requests reached the peer, which decoded them, answered one and
	// rejected the other.
	served := map[string]string{}
	for _, s := range res.Served {
		if s.Answered != "" {
			served[s.Answered] = "answered"
			var req envelope.Envelope
			require.NoError(t, json.Unmarshal(s.Report.Body, &req))
			assert.Equal(t, catalog.GenerateQuestions, req.MessageType)
			assert.Equal(t, catalog.ExchangeCoreToAI, s.Report.Exchange)
			assert.Equal(t, catalog.GenerateQuestions, s.Report.RoutingKey)
		} else {
			served[s.Rejected] = "rejected"
		}
	}
	assert.Equal(t, map[string]string{okRequest: "answered", rejectedRequest: "rejected"}, served)

	// The peer's callback (no headers of ours) applied by our Core.
	eventually(t, "the peer's question pool set", func() bool { return sessionOf(f, sidOK).QuestionPool != nil })
	assert.Equal(t, fmt.Sprintf("peer question for %d", sidOK), sessionOf(f, sidOK).QuestionPool[0].Question)

	// The peer's reject, dead-lettered by RabbitMQ into our DLQ.
	dead := nextDeadLetter(t, f, "dlq.ai.generate.questions", rejectedRequest)
	_, ours2, err := metadata.DeadLetterOf(dead)
	require.NoError(t, err)
	assert.False(t, ours2, "dead-lettered by the broker, not by eventpipe")
	assert.Contains(t, dead.Metadata.Get("x-death"), `"reason":"rejected"`)
	assert.Contains(t, dead.Metadata.Get("x-death"), `"queue":"ai.generate.questions"`)

	// Our dead letter, in the peer's queue bound to the contract's DLX.
	require.Len(t, res.Collected["dead"], 1)
	dl := res.Collected["dead"][0]
	assert.Equal(t, badCallback, dl.MessageID)
	assert.Equal(t, "stackup.dlx", dl.Exchange, "through the declared dead-letter exchange")
	assert.Equal(t, "dlq.core.callback.questions", dl.RoutingKey, "with the declared routing key")
	assert.Equal(t, "str", dl.Headers["x-exception-message"].Type)
	assert.Contains(t, dl.Headers["x-exception-message"].str(), "field traceId: required")
	assert.Equal(t, catalog.ExchangeAIToCore, dl.Headers["x-original-exchange"].str())
	assert.Equal(t, catalog.CallbackQuestions, dl.Headers["x-original-routingKey"].str())
	assert.Contains(t, dl.Headers[metadata.DeadLetterKey].str(), `"source_queue":"core.callback.questions"`)
	assert.True(t, strings.HasPrefix(string(dl.Body), "{"), "the body as it came")
}

// nextDeadLetter takes messages from the fixture's watch of dlq until the one
// with id.
func nextDeadLetter(t *testing.T, f *fixture, dlq, id string) *message.Message {
	t.Helper()
	timeout := time.After(45 * time.Second)
	for {
		select {
		case m := <-f.dlq[dlq]:
			m.Ack()
			if m.UUID == id {
				return m
			}
		case <-timeout:
			require.FailNow(t, "no dead letter within 45s", "%s on %s", id, dlq)
			return nil
		}
	}
}
