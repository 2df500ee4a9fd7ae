package interviews_test

// The spec end to end, through the router and the one middleware chain, on
// every broker: memory runs the memory store (the embedded mode: the report
// request is published after the in-memory commit); the durable brokers run
// the Postgres store with the transactional outbox and a relay.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/handlers/interviews"
)

func TestSpecOnEveryBroker(t *testing.T) {
	t.Parallel()
	testbrokers.RunEach(t, []testbrokers.Case{
		{Name: "completed, settled, report completed", Run: testCompletedToReport},
		{Name: "same completion twice", Run: testCompletionTwice},
		{Name: "failed interview releases the reservation", Run: testFailedReleases},
		{Name: "invalid and bad input dropped", Run: testBadInputDropped},
		{Name: "a duration beyond the reservation settles at the reservation", Run: testHugeDurationCapped},
		{Name: "generator keeps failing", Run: testGeneratorKeepsFailing},
		{Name: "database down when the batch starts", Run: testDatabaseDown},
		{Name: "bot callbacks over HTTP", Run: testBotCallbacks},
	})
}

// fakeGenerator records calls and fails while fail is set.
type fakeGenerator struct {
	calls atomic.Int64
	fail  atomic.Bool
}

var errModelOverloaded = errors.New("model overloaded (HTTP 503)")

func (g *fakeGenerator) Generate(_ context.Context, iv interviews.Interview) (interviews.ReportContent, error) {
	g.calls.Add(1)
	if g.fail.Load() {
		return interviews.ReportContent{}, errModelOverloaded
	}
	return interviews.ReportContent{
		OverallScore: 81, Recommendation: interviews.RecommendHire, Summary: "solid " + iv.ID,
		SkillAssessments: []interviews.SkillAssessment{{Skill: "design", Score: 4, Evidence: "ledger"}},
		QuestionAnalysis: []interviews.QuestionReview{{Question: "q", Score: 4, Strengths: "s", Concerns: "c"}},
		Generation:       interviews.Generation{Model: "fake", PromptVersion: interviews.PromptVersion, TotalTokens: 42},
	}, nil
}

// switchStore sends settlements to down until up is called: a database that
// is unreachable when a batch starts, then comes back.
type switchStore struct {
	interviews.Store // the working one
	down             interviews.Store
	isDown           atomic.Bool
	mu               sync.Mutex
	failed           map[string]bool // interview ids whose settlement failed
}

func (s *switchStore) SettleCompleted(ctx context.Context, st interviews.Settlement, f interviews.FollowUp) (interviews.SettleResult, error) {
	if s.isDown.Load() {
		res, err := s.down.SettleCompleted(ctx, st, f)
		s.mu.Lock()
		s.failed[st.InterviewID] = true
		s.mu.Unlock()
		return res, err
	}
	return s.Store.SettleCompleted(ctx, st, f)
}

func (s *switchStore) failedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.failed)
}

// handled counts deliveries per message id, per route, and keeps each
// message's metadata as it arrived.
type handled struct {
	mu    sync.Mutex
	byID  map[string]int
	meta  map[string]message.Metadata
	total int
}

func (h *handled) wrap(next message.NoPublishHandlerFunc) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		h.mu.Lock()
		h.byID[msg.UUID]++
		h.total++
		if h.meta == nil {
			h.meta = map[string]message.Metadata{}
		}
		h.meta[msg.UUID] = maps.Clone(msg.Metadata)
		h.mu.Unlock()
		return next(msg)
	}
}

// metadata is the metadata the message id arrived with, nil before it did.
func (h *handled) metadata(id string) message.Metadata {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.meta[id]
}

func (h *handled) count() (total int, byID map[string]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := make(map[string]int, len(h.byID))
	for k, v := range h.byID {
		c[k] = v
	}
	return h.total, c
}

type flow struct {
	b          testbrokers.Kind
	ps         broker.PubSub
	store      interviews.Store
	gen        *fakeGenerator
	producer   interviews.Producer
	completedQ string
	reportQ    string
	completed  *handled
	reports    *handled
	completedD <-chan *message.Message
	reportD    <-chan *message.Message
	org        interviews.Organization
}

type flowOptions struct {
	// wrapStore replaces the handlers' store (the database-down case).
	wrapStore func(interviews.Store) interviews.Store
	backoff   time.Duration
}

func testBackoff(d time.Duration) route.Backoff {
	return route.Backoff{Initial: d, Multiplier: 1.5, Max: 2 * d, Jitter: 0.1}
}

func newFlow(t *testing.T, b testbrokers.Kind, opts flowOptions) *flow {
	t.Helper()
	ctx := context.Background()
	ps := newBroker(t, b.Name)
	prefix := "ept-" + strings.ToLower(watermill.NewShortUUID()) + "-"
	f := &flow{
		b: b, ps: ps, gen: &fakeGenerator{},
		completedQ: prefix + interviews.InterviewCompletedQueue,
		reportQ:    prefix + interviews.ReportGenerateQueue,
		completed:  &handled{byID: map[string]int{}},
		reports:    &handled{byID: map[string]int{}},
	}
	logger := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		logger = testbrokers.Logger(t)
	}
	var writer outbox.Writer = outbox.AfterCommit{Publisher: ps}
	if b.Durable {
		pool, schema := dbtest.Schema(t)
		writer = outbox.TxWriter{Table: outbox.Table{Schema: schema}}
		store, err := interviews.NewPostgres(pool, schema)
		require.NoError(t, err)
		f.store = store
		relay, err := outbox.NewRelay(pool, ps, outbox.RelayConfig{Schema: schema, PollInterval: 200 * time.Millisecond, MinBackoff: 100 * time.Millisecond}, logger)
		require.NoError(t, err)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = relay.Run(rctx) }()
		t.Cleanup(func() { cancel(); <-done })
	} else {
		f.store = interviews.NewMemory()
	}
	handlerStore := f.store
	if opts.wrapStore != nil {
		handlerStore = opts.wrapStore(f.store)
	}
	backoff := opts.backoff
	if backoff == 0 {
		backoff = 300 * time.Millisecond
	}
	h := interviews.Handlers{
		Store: handlerStore, Outbox: writer, Generator: f.gen, Logger: logger,
		ReportQueue:      f.reportQ,
		CompletedBackoff: testBackoff(backoff),
		ReportBackoff:    testBackoff(backoff),
	}
	f.producer = interviews.Producer{Publisher: ps, InterviewCompletedQueue: f.completedQ, ReportGenerateQueue: f.reportQ, Logger: logger}

	routes := h.Routes()
	completed, report := routes[0], routes[1]
	completed.Queue, completed.Policy.DeadLetterQueue = f.completedQ, f.completedQ+"-dlq"
	report.Queue, report.Policy.DeadLetterQueue = f.reportQ, f.reportQ+"-dlq"
	completed.Handle = f.completed.wrap(completed.Handle)
	report.Handle = f.reports.wrap(report.Handle)
	f.completedD = subscribe(t, ps, completed.Policy.DeadLetterQueue)
	f.reportD = subscribe(t, ps, report.Policy.DeadLetterQueue)
	for _, q := range []string{f.completedQ, f.reportQ} {
		if init, ok := ps.(message.SubscribeInitializer); ok {
			require.NoError(t, init.SubscribeInitialize(q))
		}
	}
	startRoutes(t, ps, logger, completed, report)

	f.org = interviews.Organization{ID: interviews.NewObjectID(), Name: "Acme"}
	require.NoError(t, f.store.CreateOrganization(ctx, f.org))
	require.NoError(t, f.store.AddCreditLot(ctx, interviews.CreditLot{ID: interviews.NewObjectID(), OrganizationID: f.org.ID, Remaining: 100}))
	return f
}

func startRoutes(t *testing.T, ps broker.PubSub, logger *slog.Logger, routes ...route.Route) {
	t.Helper()
	testbrokers.StartRoutes(t, ps, nil, logger, routes...)
}

func subscribe(t *testing.T, ps broker.PubSub, queue string) <-chan *message.Message {
	t.Helper()
	return testbrokers.Subscribe(t, ps, queue)
}

var substantive = []interviews.QA{
	{Question: "Design a ledger", Answer: "Append-only entries, balances derived, one transaction per settlement."},
	{Question: "Retries?", Answer: "Backoff with jitter, capped attempts, then a dead-letter queue."},
}

func (f *flow) interview(t *testing.T, reserved int64, duration int) string {
	t.Helper()
	id := interviews.NewObjectID()
	require.NoError(t, f.store.CreateInterview(context.Background(), interviews.NewInterview{
		ID: id, OrganizationID: f.org.ID, DurationSeconds: duration, Transcript: substantive, CreditsReserved: reserved,
	}))
	return id
}

func (f *flow) waitReport(t *testing.T, id, status string, attempts int) interviews.Report {
	t.Helper()
	var r interviews.Report
	testbrokers.Eventually(t, 3*f.b.Redelivery, "report "+status, func() bool {
		var ok bool
		var err error
		r, ok, err = f.store.LoadReport(context.Background(), id)
		require.NoError(t, err)
		return ok && r.Status == status && (attempts == 0 || r.AttemptCount == attempts)
	})
	return r
}

func testCompletedToReport(t *testing.T, b testbrokers.Kind) {
	f := newFlow(t, b, flowOptions{})
	ctx := context.Background()
	id := f.interview(t, 15, 630)
	completedAt := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	_, err := f.producer.PublishInterviewCompleted(interviews.WithRequestID(ctx, "req-1"), interviews.InterviewCompleted{
		InterviewID: id, OrganizationID: f.org.ID, CompletedAt: completedAt, DurationSeconds: 630,
	})
	require.NoError(t, err)

	r := f.waitReport(t, id, interviews.ReportCompleted, 1)
	assert.Equal(t, interviews.RecommendHire, r.Content.Recommendation)
	assert.Equal(t, "fake", r.Content.Generation.Model)
	assert.Equal(t, 42, r.Content.Generation.TotalTokens)
	require.NotNil(t, r.RetentionExpiresAt)
	assert.True(t, completedAt.Add(60*24*time.Hour).Equal(*r.RetentionExpiresAt))

	iv, err := f.store.Interview(ctx, id)
	require.NoError(t, err)
	require.NotNil(t, iv.SettledAt)
	assert.Equal(t, int64(10), *iv.CreditsConsumed, "floor(630 / 60)")
	assert.True(t, completedAt.Add(60*24*time.Hour).Equal(*iv.RetentionExpiresAt))
	org, err := f.store.Organization(ctx, f.org.ID)
	require.NoError(t, err)
	assert.Equal(t, interviews.Organization{ID: f.org.ID, Name: "Acme", AvailableCredits: 90, ReservedCredits: 0}, org)
	entries, err := f.store.LedgerEntries(ctx, f.org.ID)
	require.NoError(t, err)
	require.Len(t, entries, 2)
	assert.Equal(t, []string{interviews.LedgerSettle, interviews.LedgerRelease}, []string{entries[0].Kind, entries[1].Kind})
	assert.Equal(t, []int64{10, 5}, []int64{entries[0].Credits, entries[1].Credits})
	assert.Equal(t, interviews.ReferenceInterview, entries[0].ReferenceKind)
	assert.Equal(t, int64(1), f.gen.calls.Load())
}

// The spec caps consumption at the reserved credits and sets no bound on
// the duration: a completion of 1e308 s (raw, as a producer could send it)
// settles with every reserved credit consumed, none left reserved.
func testHugeDurationCapped(t *testing.T, b testbrokers.Kind) {
	f := newFlow(t, b, flowOptions{})
	ctx := context.Background()
	id := f.interview(t, 15, 630)
	body := fmt.Sprintf(`{"interviewId":%q,"organizationId":%q,"completedAt":"2026-11-30T10:00:00.000Z","durationSeconds":1e308}`, id, f.org.ID)
	require.NoError(t, f.ps.Publish(f.completedQ, message.NewMessage(watermill.NewUUID(), []byte(body))))

	f.waitReport(t, id, interviews.ReportCompleted, 1)
	iv, err := f.store.Interview(ctx, id)
	require.NoError(t, err)
	require.NotNil(t, iv.SettledAt)
	assert.Equal(t, int64(15), *iv.CreditsConsumed, "capped to the reservation")
	org, err := f.store.Organization(ctx, f.org.ID)
	require.NoError(t, err)
	assert.Equal(t, interviews.Organization{ID: f.org.ID, Name: "Acme", AvailableCredits: 85, ReservedCredits: 0}, org)
}

func testCompletionTwice(t *testing.T, b testbrokers.Kind) {
	f := newFlow(t, b, flowOptions{})
	ctx := context.Background()
	id := f.interview(t, 15, 630)
	ev := interviews.InterviewCompleted{InterviewID: id, OrganizationID: f.org.ID, DurationSeconds: 630}
	first, err := f.producer.PublishInterviewCompleted(ctx, ev)
	require.NoError(t, err)
	second, err := f.producer.PublishInterviewCompleted(ctx, ev)
	require.NoError(t, err)

	f.waitReport(t, id, interviews.ReportCompleted, 1)
	testbrokers.Eventually(t, 2*b.Redelivery, "both deliveries handled", func() bool {
		_, by := f.completed.count()
		return by[first] == 1 && by[second] == 1
	})
	time.Sleep(time.Second) // room for a second report request, were there one
	total, _ := f.reports.count()
	assert.Equal(t, 1, total, "one report message")
	assert.Equal(t, int64(1), f.gen.calls.Load())
	entries, err := f.store.LedgerEntries(ctx, f.org.ID)
	require.NoError(t, err)
	assert.Len(t, entries, 2, "settled once")
	org, err := f.store.Organization(ctx, f.org.ID)
	require.NoError(t, err)
	assert.Equal(t, int64(90), org.AvailableCredits)
	testbrokers.NoMessage(t, f.completedD, 100*time.Millisecond, "nothing dead-lettered")
}

func testFailedReleases(t *testing.T, b testbrokers.Kind) {
	f := newFlow(t, b, flowOptions{})
	ctx := context.Background()
	id := f.interview(t, 15, 0)
	failedAt := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	_, err := f.producer.PublishInterviewFailed(ctx, interviews.InterviewFailed{InterviewID: id, OrganizationID: f.org.ID, FailureReason: "bot crashed", FailedAt: failedAt})
	require.NoError(t, err)

	testbrokers.Eventually(t, 2*b.Redelivery, "settled", func() bool {
		iv, err := f.store.Interview(ctx, id)
		require.NoError(t, err)
		return iv.SettledAt != nil
	})
	iv, err := f.store.Interview(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, int64(0), *iv.CreditsConsumed)
	assert.True(t, failedAt.Add(60*24*time.Hour).Equal(*iv.RetentionExpiresAt))
	org, err := f.store.Organization(ctx, f.org.ID)
	require.NoError(t, err)
	assert.Equal(t, int64(100), org.AvailableCredits)
	assert.Equal(t, int64(0), org.ReservedCredits)
	entries, err := f.store.LedgerEntries(ctx, f.org.ID)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Equal(t, interviews.LedgerRelease, entries[0].Kind)
	assert.Equal(t, int64(15), entries[0].Credits)
	time.Sleep(500 * time.Millisecond)
	total, _ := f.reports.count()
	assert.Zero(t, total, "no report for a failed interview")
}

func testBadInputDropped(t *testing.T, b testbrokers.Kind) {
	f := newFlow(t, b, flowOptions{})
	ctx := context.Background()
	id := f.interview(t, 15, 630)
	other := interviews.Organization{ID: interviews.NewObjectID(), Name: "Other"}
	require.NoError(t, f.store.CreateOrganization(ctx, other))
	now := time.Now().UTC().Format(time.RFC3339)
	body := func(interviewID, orgID, duration string) string {
		return fmt.Sprintf(`{"interviewId":%q,"organizationId":%q,"completedAt":%q,"durationSeconds":%s}`, interviewID, orgID, now, duration)
	}
	bodies := map[string]string{
		"null":                    `null`,
		"array":                   `[]`,
		"not json":                `interview done`,
		"empty object":            `{}`,
		"negative duration":       body(id, f.org.ID, "-60"),
		"duration as a string":    body(id, f.org.ID, `"600"`),
		"id not an ObjectId":      body("interview-1", f.org.ID, "600"),
		"org not an ObjectId":     body(id, "acme", "600"),
		"unknown interview":       body(interviews.NewObjectID(), f.org.ID, "600"),
		"unknown organization":    body(id, interviews.NewObjectID(), "600"),
		"another org's":           body(id, other.ID, "600"),
		"failed with wrong type":  fmt.Sprintf(`{"type":"interview.completed","interviewId":%q,"organizationId":%q,"failureReason":"x","failedAt":%q}`, id, f.org.ID, now),
		"failed without failedAt": fmt.Sprintf(`{"type":"interview.failed","interviewId":%q,"organizationId":%q,"failureReason":"x"}`, id, f.org.ID),
	}
	var msgs []*message.Message
	for name, b := range bodies {
		m := message.NewMessage(watermill.NewUUID(), []byte(b))
		m.Metadata.Set(metadata.TraceIDKey, name)
		msgs = append(msgs, m)
	}
	require.NoError(t, f.ps.Publish(f.completedQ, msgs...))
	// An unknown interview on the report queue is dropped too.
	bad := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf(`{"interviewId":%q,"organizationId":%q}`, interviews.NewObjectID(), f.org.ID)))
	require.NoError(t, f.ps.Publish(f.reportQ, bad, message.NewMessage(watermill.NewUUID(), []byte(`null`))))

	testbrokers.Eventually(t, 2*b.Redelivery, "every message handled", func() bool {
		total, _ := f.completed.count()
		reports, _ := f.reports.count()
		return total >= len(msgs) && reports >= 2
	})
	time.Sleep(1500 * time.Millisecond) // room for a redelivery, were there one
	_, by := f.completed.count()
	for _, m := range msgs {
		assert.Equal(t, 1, by[m.UUID], "%s: handled once, dropped, not retried", m.Metadata.Get(metadata.TraceIDKey))
	}
	testbrokers.NoMessage(t, f.completedD, 100*time.Millisecond, "dropped, not dead-lettered")
	testbrokers.NoMessage(t, f.reportD, 100*time.Millisecond, "dropped, not dead-lettered")
	entries, err := f.store.LedgerEntries(ctx, f.org.ID)
	require.NoError(t, err)
	assert.Empty(t, entries, "no ledger change")
	org, err := f.store.Organization(ctx, f.org.ID)
	require.NoError(t, err)
	assert.Equal(t, int64(85), org.AvailableCredits)
	assert.Equal(t, int64(15), org.ReservedCredits)
	iv, err := f.store.Interview(ctx, id)
	require.NoError(t, err)
	assert.Nil(t, iv.SettledAt)
	assert.Zero(t, f.gen.calls.Load())
}

func testGeneratorKeepsFailing(t *testing.T, b testbrokers.Kind) {
	f := newFlow(t, b, flowOptions{})
	f.gen.fail.Store(true)
	id := f.interview(t, 15, 630)
	_, err := f.producer.PublishInterviewCompleted(context.Background(), interviews.InterviewCompleted{InterviewID: id, OrganizationID: f.org.ID, DurationSeconds: 630})
	require.NoError(t, err)

	var dl *message.Message
	select {
	case dl = <-f.reportD:
	case <-time.After(4 * b.Redelivery):
		require.FailNow(t, "no dead letter")
	}
	dl.Ack()
	info, ok, err := metadata.DeadLetterOf(dl)
	require.NoError(t, err)
	require.True(t, ok, "dead letter with its history: %v", dl.Metadata)
	assert.Equal(t, 3, info.Attempts)
	assert.Equal(t, "transient", info.Class)
	assert.Contains(t, info.Reason, errModelOverloaded.Error())
	assert.Equal(t, f.reportQ, info.SourceQueue)
	assert.Equal(t, "settlement-"+id, dl.Metadata.Get(interviews.RequestIDKey))
	assert.Equal(t, interviews.EventReportGenerate, dl.Metadata.Get(interviews.EventTypeKey))

	r := f.waitReport(t, id, interviews.ReportFailed, 3)
	assert.Contains(t, r.LastError, errModelOverloaded.Error())
	assert.Equal(t, int64(3), f.gen.calls.Load())

	// A redrive after the cap: FAILED stays, acknowledged, no model call.
	require.NoError(t, f.ps.Publish(f.reportQ, message.NewMessage(watermill.NewUUID(), dl.Payload)))
	testbrokers.Eventually(t, 2*b.Redelivery, "redrive handled", func() bool { total, _ := f.reports.count(); return total >= 4 })
	time.Sleep(500 * time.Millisecond)
	assert.Equal(t, int64(3), f.gen.calls.Load(), "the cap holds")
	testbrokers.NoMessage(t, f.reportD, 500*time.Millisecond, "the redrive is acknowledged at the cap")
}

// closedPool is a pool on a port nothing listens on: every query fails to
// connect, as when the database is down.
func closedPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@"+addr+"/test?sslmode=disable&connect_timeout=2")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func testDatabaseDown(t *testing.T, b testbrokers.Kind) {
	down, err := interviews.NewPostgres(closedPool(t), "")
	require.NoError(t, err)
	var sw *switchStore
	f := newFlow(t, b, flowOptions{
		backoff: time.Second,
		wrapStore: func(s interviews.Store) interviews.Store {
			sw = &switchStore{Store: s, down: down, failed: map[string]bool{}}
			sw.isDown.Store(true)
			return sw
		},
	})
	ctx := context.Background()
	const n = 5
	var ids []string
	var batch []*message.Message
	for range n {
		id := f.interview(t, 3, 120)
		ids = append(ids, id)
		m := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf(
			`{"interviewId":%q,"organizationId":%q,"completedAt":"2026-11-30T10:00:00.000Z","durationSeconds":120}`, id, f.org.ID)))
		batch = append(batch, m)
	}
	require.NoError(t, f.ps.Publish(f.completedQ, batch...))

	testbrokers.Eventually(t, 2*b.Redelivery, "every message of the batch tried against the dead database", func() bool { return sw.failedCount() == n })
	sw.isDown.Store(false)

	testbrokers.Eventually(t, 3*b.Redelivery, "every interview settled once the database is back", func() bool {
		for _, id := range ids {
			iv, err := f.store.Interview(ctx, id)
			require.NoError(t, err)
			if iv.SettledAt == nil {
				return false
			}
		}
		return true
	})
	for _, id := range ids {
		f.waitReport(t, id, interviews.ReportCompleted, 1)
	}
	testbrokers.NoMessage(t, f.completedD, 500*time.Millisecond, "none lost to the DLQ")
	org, err := f.store.Organization(ctx, f.org.ID)
	require.NoError(t, err)
	assert.Equal(t, int64(100-2*n), org.AvailableCredits)
	assert.Zero(t, org.ReservedCredits)
}
