package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventpipe/eventpipe/app/broker/postgres"
	eventpipesqs "github.com/eventpipe/eventpipe/app/broker/sqs"
	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/handlers/stackup"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/envelope"
)

// The StackUp flow's queues: the two request types whose processors call
// the model (stackup.ProcessorsLLM serves only generate.*), both answered
// on core.callback.questions.
const (
	questionsQueue = "ai.generate.questions"
	followupQueue  = "ai.generate.followup"
	callbackQueue  = "core.callback.questions"
	// poisonDLQ is where the malformed requests (all sent to the
	// questions queue) are expected.
	poisonDLQ = "dlq." + questionsQueue
	// refuseMarker in a request's text makes the model refuse it: the
	// worker must answer with a FAILED callback (GENERATION_SCHEMA_INVALID).
	refuseMarker = "chaos-refuse"
)

// stackupFlow is the StackUp request → AI worker → callback flow. A foreign
// producer (raw amqp091-go to the stackup.core-to-ai exchange, the AWS SDK
// to the queue, the Postgres broker's publisher to the queue) sends
// generate.questions and generate.followup requests; two serve processes
// run the AI worker with the llm processors against the harness's
// OpenAI-compatible model server (relay: AI worker and outbox relay;
// consumer: AI worker only), and the harness consumes core.callback.questions
// with the same raw client, counting callbacks by correlation id.
//
// The effect of a request is its callback being published. A second
// delivery of the same callback message (same messageId: the relay
// published its outbox row again, the broker redelivered) is at-least-once
// transport and no duplicated effect; a second callback message (another
// messageId) for one correlation id means the request was answered twice.
type stackupFlow struct {
	runID string
	model *testenv.ChatServer

	// slowUntil (unix ns) ends the current slow-handler window.
	slowUntil atomic.Int64
	slowCalls atomic.Int64
	rngMu     sync.Mutex
	rng       *rand.Rand

	// calls counts the model calls per request (by sessionId, unique per
	// request).
	callsMu sync.Mutex
	calls   map[int64]int

	mu sync.Mutex
	// sent are the confirmed requests by messageId, confirmed their ids in
	// order (for the duplicates fault).
	sent      map[string]stackupRequest
	confirmed []string
	poison    []string
	dupPub    foreignPublisher

	pgBroker *postgres.PubSub

	publishErrors atomic.Int64
	lastErr       error

	stopCallbacks context.CancelFunc
	callbacksDone chan struct{}
	cbErrors      atomic.Int64
	cbLastErr     error
}

// stackupRequest is one request the producer sends.
type stackupRequest struct {
	id      string
	session int64
	refuse  bool
	to      foreignDest
	msg     foreignMsg
}

func (s *stackupFlow) title() string { return "stackup AI callbacks" }

func (s *stackupFlow) start(ctx context.Context, r *flowRun) error {
	s.runID = strings.ToLower(watermill.NewShortUUID())
	s.sent = map[string]stackupRequest{}
	s.calls = map[int64]int{}
	s.rng = rand.New(rand.NewPCG(uint64(r.randIntN(1<<30)), uint64(r.randIntN(1<<30))))
	s.model = testenv.NewChatServer(s.delay, s.answer)
	if _, err := r.sc.pool.Exec(ctx, `CREATE TABLE `+r.sc.table("chaos_requests")+` (
			id      text    PRIMARY KEY,
			session bigint  NOT NULL,
			refuse  boolean NOT NULL)`); err != nil {
		return err
	}
	if _, err := r.sc.pool.Exec(ctx, `CREATE TABLE `+r.sc.table("chaos_callbacks")+` (
			correlation_id text        NOT NULL,
			message_id     text        NOT NULL,
			status         text        NOT NULL,
			error_code     text        NOT NULL,
			first_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
			deliveries     integer     NOT NULL DEFAULT 1,
			PRIMARY KEY (correlation_id, message_id))`); err != nil {
		return err
	}
	env := []string{
		"EVENTPIPE_STACKUP_ENABLED=true",
		"EVENTPIPE_STACKUP_ROLES=" + stackup.RoleAIWorker,
		"EVENTPIPE_STACKUP_AI_QUEUES=" + questionsQueue + "," + followupQueue,
		"EVENTPIPE_STACKUP_PROCESSORS=" + stackup.ProcessorsLLM,
		"EVENTPIPE_LLM_BASE_URL=" + s.model.URL,
		"EVENTPIPE_LLM_MODEL=chaos-model",
		"EVENTPIPE_LLM_API_KEY_ENV=EVENTPIPE_CHAOS_LLM_KEY",
		"EVENTPIPE_CHAOS_LLM_KEY=not-a-real-key",
		"EVENTPIPE_LLM_TIMEOUT=" + llmTimeout.String(),
	}
	r.relay = r.addProcess("relay", r.serveEnv(slices.Concat(env, []string{"EVENTPIPE_OUTBOX_RELAY=true"})...))
	r.consumer = r.addProcess("consumer", r.serveEnv(slices.Concat(env, []string{"EVENTPIPE_OUTBOX_RELAY=false"})...))
	if r.kind == "postgres" {
		var err error
		s.pgBroker, err = postgres.New(ctx, postgres.Config{DSN: r.sc.pgDirect, Schema: r.sc.schema, AutoInitializeSchema: true, MaxPublishConns: r.m.producers}, watermill.NopLogger{})
		if err != nil {
			return err
		}
	}
	// The processes declare the queues on RabbitMQ, so they start first.
	if err := r.startAll(ctx); err != nil {
		return err
	}
	cbCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stopCallbacks, s.callbacksDone = stop, make(chan struct{})
	go func() {
		defer close(s.callbacksDone)
		s.consumeCallbacks(cbCtx, r)
	}()
	return nil
}

func (s *stackupFlow) close() {
	if s.stopCallbacks != nil {
		s.stopCallbacks()
		<-s.callbacksDone
	}
	if s.dupPub != nil {
		s.dupPub.close()
	}
	if s.pgBroker != nil {
		_ = s.pgBroker.Close()
	}
	if s.model != nil {
		s.model.Close()
	}
}

func (s *stackupFlow) faultKinds(r *flowRun) []string {
	k := []string{FaultKillConsumer, FaultKillRelay, FaultSIGTERM, FaultCut, FaultStall, FaultSlowHandler, FaultSIGTERMMidCall}
	if r.kind != "postgres" {
		k = append(k, FaultDBCut)
	}
	return k
}

// --- the model server -----------------------------------------------------

func (s *stackupFlow) randDelay(d [2]time.Duration) time.Duration {
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return d[0] + time.Duration(s.rng.Int64N(int64(d[1]-d[0])))
}

// delay is the model's answer time: modelDelay, slowDelay in a
// slow-handler window. It also counts the call against its request.
func (s *stackupFlow) delay(req testenv.ChatRequest) time.Duration {
	var in struct {
		SessionID int64 `json:"sessionId"`
	}
	if json.Unmarshal([]byte(req.User()), &in) == nil {
		s.callsMu.Lock()
		s.calls[in.SessionID]++
		s.callsMu.Unlock()
	}
	if time.Now().UnixNano() < s.slowUntil.Load() {
		s.slowCalls.Add(1)
		return s.randDelay(slowDelay)
	}
	return s.randDelay(modelDelay)
}

// answer is structured output that fits the schema the request names, or a
// refusal for a request carrying refuseMarker.
func (s *stackupFlow) answer(req testenv.ChatRequest) testenv.ChatAnswer {
	if strings.Contains(req.User(), refuseMarker) {
		return testenv.ChatAnswer{Refusal: "I can't help with that (chaos harness)"}
	}
	switch req.ResponseFormat.JSONSchema.Name {
	case "question_pool":
		return testenv.ChatAnswer{Content: `{"questions":[{"category":"TECH_STACK","question":"How does your service stay consistent when a worker dies?","jobCategory":null,"targetEvidence":"","expectedSignal":"at-least-once plus idempotency"}]}`}
	case "followup":
		return testenv.ChatAnswer{Content: `{"answerIntent":"NORMAL","followupQuestion":"What happens to the message in flight?","answerEvaluation":{"specificity":3,"logic":4,"structure":"STAR","correctness":null}}`}
	}
	return testenv.ChatAnswer{Status: 400}
}

// inject runs the slow-handler fault: for m.slowWindow every model call
// that starts answers after slowDelay; and sigterm-mid-call.
func (s *stackupFlow) inject(ctx context.Context, r *flowRun, kind string) (string, bool) {
	if kind == FaultSIGTERMMidCall {
		return s.sigtermMidCall(ctx, r), true
	}
	if kind != FaultSlowHandler {
		return "", false
	}
	before := s.slowCalls.Load()
	s.slowUntil.Store(time.Now().Add(r.m.slowWindow).UnixNano())
	sleep(ctx, r.m.slowWindow)
	return fmt.Sprintf("model answers after %s–%s for %s (%d calls slowed; llm.timeout %s, lease and visibility 30 s)",
		slowDelay[0], slowDelay[1], r.m.slowWindow, s.slowCalls.Load()-before, llmTimeout), true
}

// sigtermMidCall SIGTERMs both AI workers (consumer and relay) while a model
// call of slowDelay — longer than serve.shutdown_timeout, 30 s — is under
// way: the shutdown must cancel the call at the timeout, give its message
// back and exit 0 within termWait (RELIABILITY finding 18); the request is
// then answered once by a worker started again.
func (s *stackupFlow) sigtermMidCall(ctx context.Context, r *flowRun) string {
	before := s.slowCalls.Load()
	s.slowUntil.Store(time.Now().Add(5 * time.Second).UnixNano())
	for wait := time.Now().Add(10 * time.Second); s.slowCalls.Load() == before && time.Now().Before(wait); {
		sleep(ctx, 50*time.Millisecond)
	}
	if s.slowCalls.Load() == before {
		return "no model call started within 10 s: nothing was interrupted"
	}
	sleep(ctx, time.Second) // the call is under way in one of the workers
	r.procMu.Lock()
	defer r.procMu.Unlock()
	procs := []*process{r.consumer, r.relay}
	took := make([]time.Duration, len(procs))
	inTime := make([]bool, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Go(func() { took[i], inTime[i] = p.signal(syscall.SIGTERM, "sigterm", termWait) })
	}
	wg.Wait()
	var parts []string
	for i, p := range procs {
		e, _ := p.lastExit()
		parts = append(parts, fmt.Sprintf("%s exited after %s (%s)", p.name, took[i].Round(time.Millisecond), e))
		switch {
		case !inTime[i]:
			r.note("SIGTERM mid model call did not end %s within %s: killed (%s)", p.name, termWait, e.log)
		case e.code != 0:
			r.note("SIGTERM mid model call: %s exited with code %d after %s (%s)", p.name, e.code, took[i].Round(time.Millisecond), e.log)
		}
		if err := p.start(ctx, readyTimeout); err != nil {
			r.note("sigterm-mid-call: restart %s: %v", p.name, err)
		}
	}
	return fmt.Sprintf("%d model calls slowed to %s–%s; %s", s.slowCalls.Load()-before, slowDelay[0], slowDelay[1], strings.Join(parts, "; "))
}

// --- the producer -----------------------------------------------------------

// request is request k: generate.questions for even k, generate.followup
// for odd k, its sessionId unique in the run.
func (s *stackupFlow) request(r *flowRun, k int, refuse bool) stackupRequest {
	id := fmt.Sprintf("chaos-%s-%06d", s.runID, k)
	session := int64(1_000_000 + k)
	text := "I built an event pipeline."
	if refuse {
		text = refuseMarker
	}
	typ, queue := catalog.GenerateQuestions, questionsQueue
	var payload any = map[string]any{
		"sessionId": session, "mode": "TECHNICAL", "jobCategories": []string{"BACKEND"}, "documents": []any{},
		"initialQuestionCount": 3, "maxQuestions": 5, "recentQuestions": []string{}, "selfIntroAnswer": text,
		"targetCompanyName": nil, "targetJobDescription": nil, "focusAreas": []string{},
	}
	if k%2 == 1 {
		typ, queue = catalog.GenerateFollowup, followupQueue
		payload = map[string]any{
			"sessionId": session, "parentMessageId": 10, "answerMessageId": 11, "previousQuestion": "Why Watermill?",
			"answerText": text, "mode": "TECHNICAL", "jobCategory": nil, "contextDocumentIds": []int64{},
			"parentCategory": nil, "parentExpectedSignal": nil, "followupMessageId": 12, "history": []any{},
		}
	}
	trace := fmt.Sprintf("%032x", uint64(session)*0x9e3779b97f4a7c15)
	body, _ := json.Marshal(map[string]any{
		"messageId": id, "messageType": typ, "version": "v1", "traceId": trace,
		"publishedAt": envelope.Now(time.Now()), "publisher": envelope.PublisherCore,
		"payload": payload, "context": map[string]any{"userId": 7, "sessionId": session},
	})
	return stackupRequest{
		id: id, session: session, refuse: refuse,
		to:  stackupDest(r, queue, typ),
		msg: foreignMsg{ID: id, Body: body, Headers: map[string]string{metadata.TraceIDKey: trace}},
	}
}

// stackupDest is where Core sends a request: the stackup.core-to-ai
// exchange with the type as routing key on RabbitMQ, the queue itself
// elsewhere (eventpipe's routing table has no exchange there).
func stackupDest(r *flowRun, queue, messageType string) foreignDest {
	if r.kind == "rabbitmq" {
		return foreignDest{Exchange: catalog.ExchangeCoreToAI, RoutingKey: messageType}
	}
	return foreignDest{Queue: queue}
}

// produce sends the malformed requests, then m.stackup requests spread
// until until in bursts, from m.producers goroutines. Requests at evenly
// spaced positions carry refuseMarker.
func (s *stackupFlow) produce(ctx context.Context, r *flowRun, until time.Time) {
	s.sendPoison(ctx, r)
	n := r.m.stackup
	start := time.Now()
	interval := time.Until(until) / time.Duration(max(n, 1))
	refuse := map[int]bool{}
	for i := range r.m.refusals {
		refuse[(2*i+1)*n/(2*r.m.refusals)] = true
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range r.m.producers {
		wg.Go(func() {
			pub, err := newForeignPublisher(r, s.pgBroker)
			if err != nil {
				s.fail(err)
				r.note("producer: %v", err)
				return
			}
			defer pub.close()
			for {
				k := int(next.Add(1) - 1)
				if k >= n || !sleep(ctx, time.Until(r.m.due(start, k, interval))) {
					return
				}
				req := s.request(r, k, refuse[k])
				if _, ok := sendConfirmed(ctx, pub, req.to, req.msg, s.fail); !ok {
					continue
				}
				if _, err := r.sc.pool.Exec(ctx, `INSERT INTO `+r.sc.table("chaos_requests")+` (id, session, refuse) VALUES ($1, $2, $3)`,
					req.id, req.session, req.refuse); err != nil {
					s.fail(err)
				}
				s.mu.Lock()
				s.sent[req.id] = req
				s.confirmed = append(s.confirmed, req.id)
				s.mu.Unlock()
			}
		})
	}
	wg.Wait()
	if k := next.Load(); int(k) < n {
		r.short(int(k), n, "requests")
	}
}

// sendPoison sends the malformed requests to the questions queue: a
// payload that fails validation (sessionId 0, no mode) and a body that is
// not JSON, alternately. The spec's parse failure is dead-lettered at once
// (no callback: nothing trustworthy to answer), so they hold no queue.
func (s *stackupFlow) sendPoison(ctx context.Context, r *flowRun) {
	if r.m.stackupPoison == 0 {
		return
	}
	pub, err := newForeignPublisher(r, s.pgBroker)
	if err != nil {
		s.fail(err)
		return
	}
	defer pub.close()
	for i := range r.m.stackupPoison {
		id := fmt.Sprintf("chaos-poison-%s-%d", s.runID, i)
		body := []byte(`{"messageId":"` + id + `", this is not JSON`)
		if i%2 == 0 {
			body, _ = json.Marshal(map[string]any{
				"messageId": id, "messageType": catalog.GenerateQuestions, "version": "v1", "traceId": "chaos-poison",
				"publishedAt": envelope.Now(time.Now()), "publisher": envelope.PublisherCore,
				"payload": map[string]any{"sessionId": 0}, "context": map[string]any{"userId": 7},
			})
		}
		brokerID, ok := sendConfirmed(ctx, pub, stackupDest(r, questionsQueue, catalog.GenerateQuestions), foreignMsg{ID: id, Body: body}, s.fail)
		if !ok {
			continue
		}
		s.mu.Lock()
		s.poison = append(s.poison, id)
		if brokerID != "" && brokerID != id {
			s.poison = append(s.poison, brokerID)
		}
		s.mu.Unlock()
	}
}

// resend is the duplicates fault: n confirmed requests, picked at random,
// are sent again as they were (same messageId, so the same correlation
// id), some while the first copy is still being worked on.
func (s *stackupFlow) resend(ctx context.Context, r *flowRun, n int) (int, error) {
	if s.dupPub == nil {
		pub, err := newForeignPublisher(r, s.pgBroker)
		if err != nil {
			return 0, err
		}
		s.dupPub = pub
	}
	s.mu.Lock()
	picks := make([]stackupRequest, 0, n)
	for range n {
		if len(s.confirmed) == 0 {
			break
		}
		picks = append(picks, s.sent[s.confirmed[r.randIntN(len(s.confirmed))]])
	}
	s.mu.Unlock()
	sent := 0
	var last error
	for _, req := range picks {
		if _, ok := sendConfirmed(ctx, s.dupPub, req.to, req.msg, func(err error) { last = err }); ok {
			sent++
		}
	}
	return sent, last
}

func (s *stackupFlow) fail(err error) {
	s.publishErrors.Add(1)
	s.mu.Lock()
	s.lastErr = err
	s.mu.Unlock()
}

func (s *stackupFlow) poisonSent() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, id := range s.poison {
		if strings.HasPrefix(id, "chaos-poison-") {
			n++
		}
	}
	return n
}

// --- the callback consumer ------------------------------------------------

// consumeCallbacks reads core.callback.questions with the broker's raw
// client until ctx ends, recording each callback before acknowledging it.
func (s *stackupFlow) consumeCallbacks(ctx context.Context, r *flowRun) {
	for ctx.Err() == nil {
		var err error
		switch r.kind {
		case "rabbitmq":
			err = s.consumeAMQP(ctx, r)
		case "sqs":
			err = s.consumeSQS(ctx, r)
		case "postgres":
			err = s.consumePostgres(ctx, r)
		}
		if err != nil && ctx.Err() == nil {
			s.cbErrors.Add(1)
			s.mu.Lock()
			s.cbLastErr = err
			s.mu.Unlock()
			sleep(ctx, time.Second)
		}
	}
}

func (s *stackupFlow) consumeAMQP(ctx context.Context, r *flowRun) error {
	conn, err := amqp.DialConfig(r.sc.amqpDirect, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Qos(200, 0, false); err != nil {
		return err
	}
	// No declare: whatever type serve declared the queue with.
	deliveries, err := ch.ConsumeWithContext(ctx, callbackQueue, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-deliveries:
			if !ok {
				return errors.New("callback consumer: channel closed")
			}
			if err := s.record(ctx, r, d.CorrelationId, d.Body); err != nil {
				_ = d.Nack(false, true)
				return err
			}
			if err := d.Ack(false); err != nil {
				return err
			}
		}
	}
}

func (s *stackupFlow) consumeSQS(ctx context.Context, r *flowRun) error {
	c := sqsClient(r.sc.sqsEndpoint)
	u, err := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(eventpipesqs.QueueName("", callbackQueue))})
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		out, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
			QueueUrl: u.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"},
		})
		if err != nil {
			return err
		}
		for _, m := range out.Messages {
			if err := s.record(ctx, r, sqsCorrelationID(m), []byte(aws.ToString(m.Body))); err != nil {
				return err
			}
			if _, err := c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: u.QueueUrl, ReceiptHandle: m.ReceiptHandle}); err != nil {
				return err
			}
		}
	}
	return nil
}

// sqsCorrelationID reads the correlation_id attribute, or its copy in
// eventpipe's overflow attribute (metadata beyond SQS's ten attributes).
func sqsCorrelationID(m types.Message) string {
	if v, ok := m.MessageAttributes[envelope.CorrelationIDKey]; ok {
		return aws.ToString(v.StringValue)
	}
	if v, ok := m.MessageAttributes[eventpipesqs.OverflowAttribute]; ok {
		var packed map[string]string
		if json.Unmarshal([]byte(aws.ToString(v.StringValue)), &packed) == nil {
			return packed[envelope.CorrelationIDKey]
		}
	}
	return ""
}

func (s *stackupFlow) consumePostgres(ctx context.Context, r *flowRun) error {
	msgs, err := s.pgBroker.Subscribe(ctx, callbackQueue)
	if err != nil {
		return err
	}
	for m := range msgs {
		if err := s.record(ctx, r, m.Metadata.Get(envelope.CorrelationIDKey), m.Payload); err != nil {
			m.Nack()
			return err
		}
		m.Ack()
	}
	return nil
}

// record stores one delivered callback: a new (correlation id, messageId)
// pair is one published callback (one chaos_effects row, the effect's
// time), a known pair one more delivery of it.
func (s *stackupFlow) record(ctx context.Context, r *flowRun, correlationID string, body []byte) error {
	var cb struct {
		MessageID string `json:"messageId"`
		Payload   struct {
			Status    string `json:"status"`
			ErrorCode string `json:"errorCode"`
		} `json:"payload"`
	}
	if err := json.Unmarshal(body, &cb); err != nil || cb.MessageID == "" {
		cb.MessageID = "(undecodable) " + truncate(string(body), 80)
	}
	if correlationID == "" {
		correlationID = "(none)"
	}
	_, err := r.sc.pool.Exec(ctx, `
		WITH cb AS (
			INSERT INTO `+r.sc.table("chaos_callbacks")+` AS c (correlation_id, message_id, status, error_code) VALUES ($1, $2, $3, $4)
			ON CONFLICT (correlation_id, message_id) DO UPDATE SET deliveries = c.deliveries + 1
			RETURNING (xmax = 0) AS fresh)
		INSERT INTO `+r.sc.table("chaos_effects")+` (event_id, tbl) SELECT $1, 'callback' FROM cb WHERE fresh`,
		correlationID, cb.MessageID, cb.Payload.Status, cb.Payload.ErrorCode)
	return err
}

// --- settle and count -------------------------------------------------------

// deadReasons sums up the valid requests in the DLQs: by reason, and how
// many of them never reached the model (no call for their session).
func (s *stackupFlow) deadReasons(ctx context.Context, r *flowRun, dls []deadLetter, poison []string) string {
	reasons := map[string]int{}
	var ids []string
	for _, d := range dls {
		if slices.Contains(poison, d.ID) {
			continue
		}
		ids = append(ids, d.ID)
		reason := "no history"
		if d.History != nil {
			reason = d.History.Reason
			if i := strings.Index(reason, ": inbox:"); i > 0 {
				reason = reason[:i]
			}
			reason = truncate(reason, 120)
		}
		reasons[reason]++
	}
	never := 0
	rows, err := r.sc.pool.Query(ctx, `SELECT session FROM `+r.sc.table("chaos_requests")+` WHERE id = ANY($1)`, ids)
	if err == nil {
		s.callsMu.Lock()
		for rows.Next() {
			var session int64
			if rows.Scan(&session) == nil && s.calls[session] == 0 {
				never++
			}
		}
		s.callsMu.Unlock()
		rows.Close()
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(reasons)) {
		parts = append(parts, fmt.Sprintf("%q ×%d", k, reasons[k]))
	}
	return fmt.Sprintf("valid requests dead-lettered: %d distinct, %d of them never reached the model (no call); by reason: %s", len(ids), never, strings.Join(parts, ", "))
}

func (s *stackupFlow) answered(ctx context.Context, r *flowRun) (sent, answered int, err error) {
	err = r.sc.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+r.sc.table("chaos_requests")+`),
		(SELECT count(*) FROM `+r.sc.table("chaos_requests")+` q WHERE EXISTS (SELECT 1 FROM `+r.sc.table("chaos_callbacks")+` c WHERE c.correlation_id = q.id))`).Scan(&sent, &answered)
	return sent, answered, err
}

func (s *stackupFlow) settled(ctx context.Context, r *flowRun) (bool, string) {
	sent, answered, err := s.answered(ctx, r)
	if err != nil {
		return false, err.Error()
	}
	dead, err := r.dlqDepth(ctx, poisonDLQ)
	if err != nil {
		return false, err.Error()
	}
	return answered >= sent && dead >= s.poisonSent(),
		fmt.Sprintf("%d of %d requests answered, %d in %s (%d poison sent)", answered, sent, dead, poisonDLQ, s.poisonSent())
}

func (s *stackupFlow) count(ctx context.Context, r *flowRun, row *Row) []string {
	var ev []string
	t := r.sc.table
	sent, answered, err := s.answered(ctx, r)
	if err != nil {
		return []string{"count: " + err.Error()}
	}
	row.Sent, row.Effects, row.Lost = sent, answered, sent-answered
	row.PoisonSent = s.poisonSent()
	s.mu.Lock()
	poison := slices.Clone(s.poison)
	if n := s.publishErrors.Load(); n > 0 {
		ev = append(ev, fmt.Sprintf("producer: %d failed publishes retried, last: %v", n, s.lastErr))
	}
	if n := s.cbErrors.Load(); n > 0 {
		ev = append(ev, fmt.Sprintf("callback consumer: %d errors, last: %v", n, s.cbLastErr))
	}
	s.mu.Unlock()

	// Duplicated: a second callback message for one request.
	dups, dupSample := duplicates(ctx, r)
	row.Duplicated = dups
	if dups > 0 {
		var lines []string
		rows, err := r.sc.pool.Query(ctx, `SELECT correlation_id, string_agg(message_id || ' ' || status || ' ' || to_char(first_at, 'HH24:MI:SS.MS'), ', ' ORDER BY first_at)
			FROM `+t("chaos_callbacks")+` GROUP BY correlation_id HAVING count(*) > 1 ORDER BY min(first_at) LIMIT 3`)
		if err == nil {
			for rows.Next() {
				var id, cbs string
				if rows.Scan(&id, &cbs) == nil {
					line := fmt.Sprintf("%s answered by %s", id, cbs)
					if logs := grepLogs(r.dir, id, 6); len(logs) > 0 {
						line += "; logs: " + strings.Join(logs, " | ")
					}
					lines = append(lines, line)
				}
			}
			rows.Close()
		}
		ev = append(ev, fmt.Sprintf("duplicated callbacks: %d extra callback messages; e.g. %s", dups, strings.Join(append(dupSample, lines...), "; ")))
	}

	// Lost: requests without any callback, with what the logs say of them.
	if row.Lost > 0 {
		rows, err := r.sc.pool.Query(ctx, `SELECT id, session FROM `+t("chaos_requests")+` q
			WHERE NOT EXISTS (SELECT 1 FROM `+t("chaos_callbacks")+` c WHERE c.correlation_id = q.id) ORDER BY id LIMIT 5`)
		if err == nil {
			for rows.Next() {
				var id string
				var session int64
				if rows.Scan(&id, &session) != nil {
					break
				}
				s.callsMu.Lock()
				calls := s.calls[session]
				s.callsMu.Unlock()
				line := fmt.Sprintf("lost %s (%d model calls)", id, calls)
				if logs := grepLogs(r.dir, id, 8); len(logs) > 0 {
					line += "; logs: " + strings.Join(logs, " | ")
				} else {
					line += "; no log line names it"
				}
				ev = append(ev, line)
			}
			rows.Close()
		}
	}

	// Deliveries and outcomes: how many times callbacks were delivered, the
	// FAILED ones, callbacks no request asked for.
	var distinct, deliveries, unknown, refusedFailed, refusedOK int
	failedCodes := map[string]int{}
	rows, err := r.sc.pool.Query(ctx, `SELECT c.status, c.error_code, c.deliveries, q.id IS NULL, coalesce(q.refuse, false)
		FROM `+t("chaos_callbacks")+` c LEFT JOIN `+t("chaos_requests")+` q ON q.id = c.correlation_id`)
	if err == nil {
		for rows.Next() {
			var status, code string
			var n int
			var isUnknown, refuse bool
			if rows.Scan(&status, &code, &n, &isUnknown, &refuse) != nil {
				break
			}
			distinct++
			deliveries += n
			switch {
			case isUnknown:
				unknown++
			case refuse && status == catalog.StatusFailed:
				refusedFailed++
			case refuse:
				refusedOK++
			case status == catalog.StatusFailed:
				failedCodes[code]++
			}
		}
		rows.Close()
	}
	var refusals int
	_ = r.sc.pool.QueryRow(ctx, `SELECT count(*) FROM `+t("chaos_requests")+` WHERE refuse`).Scan(&refusals)
	ev = append(ev, fmt.Sprintf("callbacks: %d published (distinct messageId), %d deliveries to the harness (a redelivery of the same callback message is transport, not a duplicated effect); FAILED as expected for %d of %d refused requests",
		distinct, deliveries, refusedFailed, refusals))
	if refusedOK > 0 {
		ev = append(ev, fmt.Sprintf("%d refused requests were answered OK: the model refused them", refusedOK))
	}
	if len(failedCodes) > 0 {
		var parts []string
		for _, c := range slices.Sorted(maps.Keys(failedCodes)) {
			parts = append(parts, fmt.Sprintf("%s ×%d", c, failedCodes[c]))
		}
		ev = append(ev, "FAILED callbacks for requests the model answered (answered, but as failures): "+strings.Join(parts, ", "))
	}
	if unknown > 0 {
		ev = append(ev, fmt.Sprintf("%d callbacks whose correlation id is no confirmed request", unknown))
	}
	calls, cancelled := s.model.Calls()
	s.callsMu.Lock()
	again := 0
	for _, n := range s.calls {
		if n > 1 {
			again++
		}
	}
	s.callsMu.Unlock()
	ev = append(ev, fmt.Sprintf("model server: %d calls for %d requests, %d abandoned by the caller (killed, timed out), %d slow; %d requests called more than once (work redone after a kill or a timeout: allowed, the callback counts once)",
		calls, sent, cancelled, s.slowCalls.Load(), again))

	// Dead letters: the poison is expected in the questions queue's DLQ;
	// anything else in either DLQ is a valid request dead-lettered.
	var dls []deadLetter
	for _, dlq := range []string{poisonDLQ, "dlq." + followupQueue} {
		depth, err := r.dlqDepth(ctx, dlq)
		if err != nil {
			ev = append(ev, dlq+" depth: "+err.Error())
		}
		row.DLQDepth += depth
		if depth == 0 {
			continue
		}
		got, err := r.peekDLQ(ctx, dlq, depth+20, "EVENTPIPE_STACKUP_ENABLED=true", "EVENTPIPE_STACKUP_ROLES="+stackup.RoleAIWorker,
			"EVENTPIPE_STACKUP_AI_QUEUES="+questionsQueue+","+followupQueue)
		if err != nil {
			ev = append(ev, dlq+" peek: "+err.Error())
		}
		if len(got) != depth {
			ev = append(ev, fmt.Sprintf("%s holds %d messages, dlq peek showed %d distinct ids: a message was dead-lettered more than once", dlq, depth, len(got)))
		}
		dls = append(dls, got...)
	}
	row.DeadExpected, row.DeadOther = classify(dls, poison)
	if row.DeadExpected < row.PoisonSent {
		ev = append(ev, missingPoison(r, dls, poison)...)
	}
	if row.DeadOther > 0 {
		ev = append(ev, "dead-lettered requests that were valid: "+strings.Join(deadSample(dls, poison, 5), "; "))
		ev = append(ev, s.deadReasons(ctx, r, dls, poison))
	}
	if n := countLogMsg(r.dir, "duplicate delivery, acknowledged without effect"); n > 0 {
		ev = append(ev, fmt.Sprintf("redeliveries and duplicates the inbox absorbed (duplicate delivery, acknowledged without effect): %d", n))
	}
	if n := len(grepLogs(r.dir, inbox.ErrLeased.Error(), 1_000_000)); n > 0 {
		ev = append(ev, fmt.Sprintf("deliveries that met another worker's live lease (and waited for it): %d log lines", n))
	}
	return ev
}
