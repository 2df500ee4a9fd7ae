package interviews_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/config"
	"github.com/eventpipe/eventpipe/handlers/interviews"
)

const (
	ivID  = "65f1c2a9e4b0a1b2c3d4e5f6"
	orgID = "65f1c2a9e4b0a1b2c3d4e5f7"
)

func TestDecodeInterviewEvent(t *testing.T) {
	t.Parallel()
	completed := fmt.Sprintf(`{"interviewId":%q,"organizationId":%q,"completedAt":"2026-11-30T10:00:00.000Z","durationSeconds":125.5}`, ivID, orgID)
	failed := fmt.Sprintf(`{"type":"interview.failed","interviewId":%q,"organizationId":%q,"failureReason":"bot crashed","failedAt":"2026-11-30T10:00:00Z"}`, ivID, orgID)
	cases := map[string]struct {
		body    string
		failed  bool
		wantErr string
	}{
		"completed":                   {body: completed},
		"completed, unknown fields":   {body: strings.Replace(completed, "{", `{"secret":"x","extra":{"a":1},`, 1)},
		"completed, upper-case hex":   {body: strings.Replace(completed, ivID, strings.ToUpper(ivID), 1)},
		"completed, zero duration":    {body: strings.Replace(completed, "125.5", "0", 1)},
		"failed":                      {body: failed, failed: true},
		"failed, unknown fields":      {body: strings.Replace(failed, "{", `{"extra":true,`, 1), failed: true},
		"null":                        {body: `null`, wantErr: "not a JSON object"},
		"array":                       {body: `[{}]`, wantErr: "not a JSON object"},
		"string":                      {body: `"hi"`, wantErr: "not a JSON object"},
		"number":                      {body: `42`, wantErr: "not a JSON object"},
		"empty":                       {body: ``, wantErr: "not a JSON object"},
		"broken json":                 {body: `{"interviewId":`, wantErr: "not a JSON object"},
		"trailing data":               {body: completed + ` {}`, wantErr: "not a JSON object"},
		"missing duration":            {body: strings.Replace(completed, `,"durationSeconds":125.5`, "", 1), wantErr: "field durationSeconds: required"},
		"null duration":               {body: strings.Replace(completed, "125.5", "null", 1), wantErr: "field durationSeconds: want number, got null"},
		"negative duration":           {body: strings.Replace(completed, "125.5", "-1", 1), wantErr: "field durationSeconds: must be >= 0"},
		"huge duration":               {body: strings.Replace(completed, "125.5", "1e400", 1), wantErr: "field durationSeconds: does not fit a float64"},
		"id not hex":                  {body: strings.Replace(completed, ivID, "zzzzzzzzzzzzzzzzzzzzzzzz", 1), wantErr: "field interviewId: must match"},
		"id too short":                {body: strings.Replace(completed, ivID, ivID[:23], 1), wantErr: "field interviewId: must match"},
		"id a number":                 {body: strings.Replace(completed, `"`+ivID+`"`, "7", 1), wantErr: "field interviewId: want string, got number"},
		"org missing":                 {body: fmt.Sprintf(`{"interviewId":%q,"completedAt":"2026-11-30T10:00:00Z","durationSeconds":1}`, ivID), wantErr: "field organizationId: required"},
		"completedAt not a date":      {body: strings.Replace(completed, "2026-11-30T10:00:00.000Z", "yesterday", 1), wantErr: "field completedAt: not a valid date-time"},
		"type present but wrong":      {body: strings.Replace(failed, "interview.failed", "interview.completed", 1), wantErr: "field type: must be interview.failed"},
		"type null takes failed path": {body: strings.Replace(failed, `"interview.failed"`, "null", 1), wantErr: "field type: must be interview.failed"},
		"type on a completion body":   {body: strings.Replace(completed, "{", `{"type":"interview.failed",`, 1), wantErr: "field failureReason: required"},
		"failed without reason":       {body: strings.Replace(failed, `"failureReason":"bot crashed",`, "", 1), wantErr: "field failureReason: required"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ev, err := interviews.DecodeInterviewEvent([]byte(c.body))
			if c.wantErr != "" {
				require.Error(t, err)
				assert.ErrorIs(t, err, interviews.ErrInvalidBody)
				assert.Contains(t, err.Error(), c.wantErr)
				return
			}
			require.NoError(t, err)
			if c.failed {
				require.NotNil(t, ev.Failed)
				assert.Nil(t, ev.Completed)
				assert.Equal(t, ivID, ev.Failed.InterviewID)
				assert.Equal(t, "bot crashed", ev.Failed.FailureReason)
				return
			}
			require.NotNil(t, ev.Completed)
			assert.Nil(t, ev.Failed)
			assert.Equal(t, ivID, ev.Completed.InterviewID, "ids are lower-cased")
			assert.Equal(t, orgID, ev.Completed.OrganizationID)
		})
	}
}

// TestDecodeReportGenerate: report.generate's bad bodies are refused with
// the field named; an unknown field is ignored and not kept.
func TestDecodeReportGenerate(t *testing.T) {
	t.Parallel()
	ok := fmt.Sprintf(`{"interviewId":%q,"organizationId":%q}`, ivID, orgID)
	for body, want := range map[string]string{
		fmt.Sprintf(`{"interviewId":%q}`, ivID):                               "field organizationId: required",
		fmt.Sprintf(`{"interviewId":%q,"organizationId":7}`, ivID):            "field organizationId: want string, got number",
		fmt.Sprintf(`{"interviewId":"x%s","organizationId":%q}`, ivID, orgID): "field interviewId: must match",
		`[]`: "not a JSON object",
	} {
		_, err := interviews.DecodeReportGenerate([]byte(body))
		require.ErrorIs(t, err, interviews.ErrInvalidBody, body)
		assert.Contains(t, err.Error(), want, body)
	}
	r, err := interviews.DecodeReportGenerate([]byte(strings.Replace(ok, "{", `{"apiKey":"forward-me",`, 1)))
	require.NoError(t, err)
	assert.Equal(t, interviews.ReportGenerate{InterviewID: ivID, OrganizationID: orgID}, r, "nothing else is kept")
}

func TestValidateIsStrict(t *testing.T) {
	t.Parallel()
	ok := fmt.Sprintf(`{"interviewId":%q,"organizationId":%q,"completedAt":"2026-11-30T10:00:00Z","durationSeconds":60}`, ivID, orgID)
	require.NoError(t, interviews.ValidateInterviewEvent([]byte(ok)))
	assert.ErrorContains(t, interviews.ValidateInterviewEvent([]byte(strings.Replace(ok, "{", `{"token":"s3cret",`, 1))), "field token: unknown field")
	assert.Error(t, interviews.ValidateInterviewEvent([]byte(`null`)))
	rg := fmt.Sprintf(`{"interviewId":%q,"organizationId":%q}`, ivID, orgID)
	require.NoError(t, interviews.ValidateReportGenerate([]byte(rg)))
	assert.Error(t, interviews.ValidateReportGenerate([]byte(strings.Replace(rg, "{", `{"x":1,`, 1))))
	assert.Error(t, interviews.ValidateReportGenerate([]byte(`{"interviewId":"1","organizationId":"2"}`)))
}

func TestBilledCredits(t *testing.T) {
	for d, want := range map[float64]int64{0: 0, 59.9: 0, 60: 1, 630: 10, 1e12: 16666666666, 1e308: math.MaxInt64, math.MaxFloat64: math.MaxInt64} {
		assert.Equal(t, want, interviews.BilledCredits(d), "%g s", d)
	}
}

func FuzzDecodeInterviewEvent(f *testing.F) {
	f.Add([]byte(fmt.Sprintf(`{"interviewId":%q,"organizationId":%q,"completedAt":"2026-11-30T10:00:00Z","durationSeconds":60}`, ivID, orgID)))
	f.Add([]byte(fmt.Sprintf(`{"type":"interview.failed","interviewId":%q,"organizationId":%q,"failureReason":"","failedAt":"2026-11-30T10:00:00Z"}`, ivID, orgID)))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"durationSeconds":1e308}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := interviews.DecodeInterviewEvent(body)
		if err != nil {
			require.ErrorIs(t, err, interviews.ErrInvalidBody, "error without ErrInvalidBody")
			return
		}
		require.True(t, (ev.Completed == nil) != (ev.Failed == nil), "exactly one branch must be set: %+v", ev)
		if c := ev.Completed; c != nil {
			require.False(t, c.DurationSeconds < 0 || math.IsNaN(c.DurationSeconds) || math.IsInf(c.DurationSeconds, 0), "duration out of range passed: %v", c.DurationSeconds)
			require.GreaterOrEqual(t, interviews.BilledCredits(c.DurationSeconds), int64(0))
		}
		_, _ = interviews.DecodeReportGenerate(body)
	})
}

type recordingPublisher struct {
	mu   sync.Mutex
	msgs map[string][]*message.Message
	err  error
}

func (p *recordingPublisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	if p.msgs == nil {
		p.msgs = map[string][]*message.Message{}
	}
	p.msgs[topic] = append(p.msgs[topic], msgs...)
	return nil
}

func (p *recordingPublisher) Close() error { return nil }

func (p *recordingPublisher) on(topic string) []*message.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.msgs[topic]
}

func TestProducer(t *testing.T) {
	t.Parallel()
	pub := &recordingPublisher{}
	now := time.Date(2026, 11, 30, 10, 0, 0, 123e6, time.UTC)
	p := interviews.Producer{Publisher: pub, InterviewCompletedQueue: "ic", ReportGenerateQueue: "rg", Now: func() time.Time { return now }}
	ctx := interviews.WithRequestID(context.Background(), "req-42")

	id, err := p.PublishInterviewCompleted(ctx, interviews.InterviewCompleted{InterviewID: ivID, OrganizationID: orgID})
	require.NoError(t, err)
	_, err = p.PublishInterviewFailed(context.Background(), interviews.InterviewFailed{InterviewID: ivID, OrganizationID: orgID, FailureReason: "bot"})
	require.NoError(t, err)
	msgs := pub.on("ic")
	require.Len(t, msgs, 2)
	assert.Equal(t, id, msgs[0].UUID)
	assert.JSONEq(t, fmt.Sprintf(`{"interviewId":%q,"organizationId":%q,"completedAt":"2026-11-30T10:00:00.123Z","durationSeconds":0}`, ivID, orgID), string(msgs[0].Payload))
	assert.Equal(t, "req-42", msgs[0].Metadata.Get(interviews.RequestIDKey))
	assert.Equal(t, interviews.EventInterviewCompleted, msgs[0].Metadata.Get(interviews.EventTypeKey))
	assert.Equal(t, "req-42", msgs[0].Metadata.Get(metadata.TraceIDKey), "the request id seeds the trace")
	assert.JSONEq(t, fmt.Sprintf(`{"type":"interview.failed","interviewId":%q,"organizationId":%q,"failureReason":"bot","failedAt":"2026-11-30T10:00:00.123Z"}`, ivID, orgID), string(msgs[1].Payload))
	assert.Equal(t, "unknown", msgs[1].Metadata.Get(interviews.RequestIDKey))
	assert.Equal(t, interviews.EventInterviewFailed, msgs[1].Metadata.Get(interviews.EventTypeKey))
	assert.Len(t, msgs[1].Metadata.Get(metadata.TraceIDKey), 32, "no request id: a fresh trace id")
	for _, m := range msgs {
		require.NoError(t, interviews.ValidateInterviewEvent(m.Payload), "our producer passes our strict validation")
	}

	rid, err := p.PublishReportGenerate(ctx, interviews.ReportGenerate{InterviewID: ivID, OrganizationID: orgID})
	require.NoError(t, err)
	rg := pub.on("rg")
	require.Len(t, rg, 1)
	assert.Equal(t, rid, rg[0].UUID)
	assert.Equal(t, "settlement-"+ivID, rg[0].Metadata.Get(interviews.RequestIDKey))
	assert.Equal(t, interviews.EventReportGenerate, rg[0].Metadata.Get(interviews.EventTypeKey))
	again, err := interviews.NewReportGenerateMessage(ctx, interviews.ReportGenerate{InterviewID: ivID, OrganizationID: orgID})
	require.NoError(t, err)
	assert.Equal(t, rid, again.UUID, "one interview, one report message id")

	_, err = p.PublishInterviewCompleted(ctx, interviews.InterviewCompleted{InterviewID: "nope", OrganizationID: orgID})
	assert.ErrorIs(t, err, interviews.ErrInvalidBody)
	_, err = p.PublishInterviewCompleted(ctx, interviews.InterviewCompleted{InterviewID: ivID, OrganizationID: orgID, DurationSeconds: -5})
	assert.ErrorIs(t, err, interviews.ErrInvalidBody)
	assert.Len(t, pub.on("ic"), 2, "nothing sent for refused events")

	skip := interviews.Producer{Publisher: pub, Logger: slog.New(slog.DiscardHandler)}
	id, err = skip.PublishInterviewCompleted(ctx, interviews.InterviewCompleted{InterviewID: ivID, OrganizationID: orgID})
	require.NoError(t, err, "an unconfigured queue skips with a warning")
	assert.Empty(t, id)

	pub.err = errors.New("broker down")
	_, err = p.PublishInterviewCompleted(ctx, interviews.InterviewCompleted{InterviewID: ivID, OrganizationID: orgID})
	assert.ErrorContains(t, err, "broker down")
}

func TestRoutes(t *testing.T) {
	t.Parallel()
	set := interviews.Handlers{}.Routes()
	require.Len(t, set, 2)
	for _, r := range set {
		require.NoError(t, r.Policy.Validate(), r.Name)
		assert.Equal(t, 3, r.Policy.MaxAttempts)
		assert.Equal(t, "broker", string(r.Policy.Redelivery))
		assert.Equal(t, "drop", string(r.Policy.OnPermanent))
		assert.Equal(t, r.Queue+"-dlq", r.Policy.DeadLetterQueue)
		m := message.NewMessage("1", nil)
		m.Metadata.Set(interviews.RequestIDKey, "req-9")
		assert.Equal(t, "req-9", r.TraceID(m))
		m.Metadata.Set(interviews.RequestIDKey, "unknown")
		assert.Empty(t, r.TraceID(m), "the placeholder is no trace id")
	}
	assert.Equal(t, []string{"interview-completed", "report-generate"}, set.Queues())
}

// handlerFixture runs the routes' handlers directly on a memory store.
type handlerFixture struct {
	store *interviews.Memory
	pub   *recordingPublisher
	gen   *fakeGenerator
	h     interviews.Handlers
	org   string
}

func newHandlerFixture(t *testing.T) *handlerFixture {
	t.Helper()
	f := &handlerFixture{store: interviews.NewMemory(), pub: &recordingPublisher{}, gen: &fakeGenerator{}}
	f.h = interviews.Handlers{Store: f.store, Outbox: outbox.AfterCommit{Publisher: f.pub}, Generator: f.gen}
	f.org = seed(t, f.store, 100)
	return f
}

func (f *handlerFixture) run(t *testing.T, queue, body string) error {
	t.Helper()
	r, err := f.h.Routes().ByQueue(queue)
	require.NoError(t, err)
	return r.Handle(message.NewMessage("m-"+interviews.NewObjectID(), []byte(body)))
}

func (f *handlerFixture) reportFor(t *testing.T, id string, duration int, transcript []interviews.QA) interviews.Report {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, f.store.CreateInterview(ctx, interviews.NewInterview{ID: id, OrganizationID: f.org, DurationSeconds: duration, Transcript: transcript, CreditsReserved: 1}))
	require.NoError(t, f.run(t, interviews.ReportGenerateQueue, fmt.Sprintf(`{"interviewId":%q,"organizationId":%q}`, id, f.org)))
	r, ok, err := f.store.LoadReport(ctx, id)
	require.NoError(t, err)
	require.True(t, ok)
	return r
}

func TestInsufficientEvidence(t *testing.T) {
	t.Parallel()
	f := newHandlerFixture(t)
	short := f.reportFor(t, interviews.NewObjectID(), 59, substantive)
	assert.Equal(t, interviews.ReportCompleted, short.Status)
	assert.True(t, short.Content.InsufficientEvidence)
	assert.Equal(t, interviews.RecommendInsufficientEvidence, short.Content.Recommendation)
	assert.Contains(t, short.Content.Summary, "59 s")

	thin := f.reportFor(t, interviews.NewObjectID(), 600, []interviews.QA{{Question: "q1", Answer: "yes"}, substantive[0], {Question: "q3", Answer: "I don't know"}})
	assert.True(t, thin.Content.InsufficientEvidence)
	assert.Contains(t, thin.Content.Summary, "1 substantive answers")
	assert.Zero(t, f.gen.calls.Load(), "no model call")

	enough := f.reportFor(t, interviews.NewObjectID(), 60, substantive)
	assert.False(t, enough.Content.InsufficientEvidence)
	assert.Equal(t, int64(1), f.gen.calls.Load())
}

func TestReportHeldByAnotherWorker(t *testing.T) {
	t.Parallel()
	f := newHandlerFixture(t)
	ctx := context.Background()
	id := interviews.NewObjectID()
	require.NoError(t, f.store.CreateInterview(ctx, interviews.NewInterview{ID: id, OrganizationID: f.org, DurationSeconds: 600, Transcript: substantive, CreditsReserved: 1}))
	_, err := f.store.ClaimReport(ctx, f.org, id, time.Hour)
	require.NoError(t, err)
	err = f.run(t, interviews.ReportGenerateQueue, fmt.Sprintf(`{"interviewId":%q,"organizationId":%q}`, id, f.org))
	require.Error(t, err, "never acknowledged while another worker's claim is live: it may have died")
	assert.Equal(t, failure.Transient, failure.Of(err))
	assert.Equal(t, interviews.DefaultStaleClaim, failure.RetryAfter(err), "retried once the claim could be stale")
	assert.Zero(t, f.gen.calls.Load(), "no second generation meanwhile")
	r, _, err := f.store.LoadReport(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, interviews.ReportProcessing, r.Status)
	assert.Equal(t, 1, r.AttemptCount)
}

type permanentGenerator struct{}

func (permanentGenerator) Generate(context.Context, interviews.Interview) (interviews.ReportContent, error) {
	return interviews.ReportContent{}, failure.AsPermanent(errors.New("HTTP 401 invalid_api_key"))
}

type rateLimitedGenerator struct{}

func (rateLimitedGenerator) Generate(context.Context, interviews.Interview) (interviews.ReportContent, error) {
	return interviews.ReportContent{}, failure.AsTransient(errors.New("HTTP 429"), 42*time.Second)
}

func TestGeneratorErrorsGoToTheBroker(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		gen        interviews.ReportGenerator
		retryAfter time.Duration
	}{
		"permanent (a bad key) is still retried, then dead-lettered": {permanentGenerator{}, 0},
		"a rate limit keeps its Retry-After":                         {rateLimitedGenerator{}, 42 * time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newHandlerFixture(t)
			f.h.Generator = c.gen
			id := interviews.NewObjectID()
			require.NoError(t, f.store.CreateInterview(context.Background(), interviews.NewInterview{ID: id, OrganizationID: f.org, DurationSeconds: 600, Transcript: substantive, CreditsReserved: 1}))
			err := f.run(t, interviews.ReportGenerateQueue, fmt.Sprintf(`{"interviewId":%q,"organizationId":%q}`, id, f.org))
			require.Error(t, err)
			assert.Equal(t, failure.Transient, failure.Of(err))
			assert.Equal(t, c.retryAfter, failure.RetryAfter(err))
			r, _, lerr := f.store.LoadReport(context.Background(), id)
			require.NoError(t, lerr)
			assert.Equal(t, interviews.ReportFailed, r.Status, "FAILED, so the next delivery may claim it")
		})
	}
}

func TestReportPublishAfterSettle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	body := func(id, org string) string {
		return fmt.Sprintf(`{"interviewId":%q,"organizationId":%q,"completedAt":"2026-11-30T10:00:00Z","durationSeconds":300}`, id, org)
	}

	t.Run("publish error is logged, not returned", func(t *testing.T) {
		t.Parallel()
		f := newHandlerFixture(t)
		f.pub.err = errors.New("broker down")
		id := newInterview(t, f.store, f.org, 10)
		require.NoError(t, f.run(t, interviews.InterviewCompletedQueue, body(id, f.org)))
		iv, err := f.store.Interview(ctx, id)
		require.NoError(t, err)
		require.NotNil(t, iv.SettledAt, "the settlement stays committed")
		assert.Equal(t, int64(5), *iv.CreditsConsumed)
	})
	t.Run("report queue not configured: skipped", func(t *testing.T) {
		t.Parallel()
		f := newHandlerFixture(t)
		f.h.ReportQueue = interviews.Disabled
		id := newInterview(t, f.store, f.org, 10)
		require.NoError(t, f.run(t, interviews.InterviewCompletedQueue, body(id, f.org)))
		assert.Empty(t, f.pub.on(interviews.ReportGenerateQueue))
	})
	t.Run("published once, after the settlement", func(t *testing.T) {
		t.Parallel()
		f := newHandlerFixture(t)
		id := newInterview(t, f.store, f.org, 10)
		require.NoError(t, f.run(t, interviews.InterviewCompletedQueue, body(id, f.org)))
		require.NoError(t, f.run(t, interviews.InterviewCompletedQueue, body(id, f.org)))
		msgs := f.pub.on(interviews.ReportGenerateQueue)
		require.Len(t, msgs, 1)
		assert.JSONEq(t, fmt.Sprintf(`{"interviewId":%q,"organizationId":%q}`, id, f.org), string(msgs[0].Payload))
		assert.Equal(t, "settlement-"+id, msgs[0].Metadata.Get(interviews.RequestIDKey))
	})
	t.Run("bad input is permanent", func(t *testing.T) {
		t.Parallel()
		f := newHandlerFixture(t)
		id := newInterview(t, f.store, f.org, 10)
		for _, b := range []string{`null`, body(interviews.NewObjectID(), f.org), body(id, interviews.NewObjectID())} {
			err := f.run(t, interviews.InterviewCompletedQueue, b)
			assert.Equal(t, failure.Permanent, failure.Of(err), b)
		}
	})
}

// TestRoutesFitTheTopology: the routes' queues, DLQs and attempt counts are
// the ones config/topology/interviews.yaml declares, as the composition root
// checks (route.Policy.ForQueue) when it wires them.
func TestRoutesFitTheTopology(t *testing.T) {
	t.Parallel()
	data, err := config.TopologyFile("interviews")
	require.NoError(t, err)
	top, err := topology.Parse(data)
	require.NoError(t, err)
	for _, r := range (interviews.Handlers{}).Routes() {
		q, ok := top.Queue(r.Queue)
		require.True(t, ok, "queue %s declared", r.Queue)
		p, err := r.EffectivePolicy().ForQueue(q)
		require.NoError(t, err, r.Name)
		assert.Equal(t, r.Policy, p, "%s: the topology changes nothing", r.Name)
		assert.Equal(t, q.MaxReceives, r.Policy.MaxAttempts, r.Name)
	}
}
