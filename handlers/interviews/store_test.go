package interviews_test

// One store suite, run against the memory twin and PostgreSQL.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/handlers/interviews"
)

type storeCtor func(t *testing.T) interviews.Store

func storeCtors() map[string]storeCtor {
	return map[string]storeCtor{
		"memory": func(*testing.T) interviews.Store { return interviews.NewMemory() },
		"postgres": func(t *testing.T) interviews.Store {
			pool, schema := dbtest.Schema(t)
			s, err := interviews.NewPostgres(pool, schema)
			require.NoError(t, err)
			return s
		},
	}
}

func TestStore(t *testing.T) {
	t.Parallel()
	cases := map[string]func(t *testing.T, s interviews.Store){
		"settle completed":                                 testSettleCompleted,
		"consumption capped to reservation":                testSettleCapped,
		"settle twice is a no-op":                          testSettleTwice,
		"concurrent settlements settle once":               testSettleConcurrent,
		"reservations while settling do not deadlock":      testReserveWhileSettling,
		"settle failed releases everything":                testSettleFailed,
		"soonest-expiring lot first, expired lot forfeits": testLotsOrder,
		"refusals change nothing":                          testSettleRefusals,
		"report lifecycle":                                 testReportLifecycle,
		"stale claim is reclaimed":                         testStaleClaim,
		"a failed report is reset for a retry":             testResetFailedReport,
		"load interview is org-scoped, not deleted":        testLoadInterview,
		"seeding": testSeeding,
	}
	for kind, ctor := range storeCtors() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			for name, c := range cases {
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					c(t, ctor(t))
				})
			}
		})
	}
}

// seed creates an organisation with lots of the given sizes (nil expiry) and
// returns its id.
func seed(t *testing.T, s interviews.Store, lots ...int64) string {
	t.Helper()
	ctx := context.Background()
	org := interviews.NewObjectID()
	require.NoError(t, s.CreateOrganization(ctx, interviews.Organization{ID: org, Name: "Acme"}))
	for _, n := range lots {
		require.NoError(t, s.AddCreditLot(ctx, interviews.CreditLot{ID: interviews.NewObjectID(), OrganizationID: org, Remaining: n}))
	}
	return org
}

func newInterview(t *testing.T, s interviews.Store, org string, reserved int64) string {
	t.Helper()
	id := interviews.NewObjectID()
	require.NoError(t, s.CreateInterview(context.Background(), interviews.NewInterview{ID: id, OrganizationID: org, DurationSeconds: 600, CreditsReserved: reserved}))
	return id
}

func balances(t *testing.T, s interviews.Store, org string) (available, reserved int64) {
	t.Helper()
	o, err := s.Organization(context.Background(), org)
	require.NoError(t, err)
	return o.AvailableCredits, o.ReservedCredits
}

var anchor = time.Date(2026, 11, 30, 9, 30, 0, 0, time.UTC)

func testSettleCompleted(t *testing.T, s interviews.Store) {
	ctx := context.Background()
	org := seed(t, s, 50)
	id := newInterview(t, s, org, 20)
	avail, res := balances(t, s, org)
	assert.Equal(t, []int64{30, 20}, []int64{avail, res})

	r, err := s.SettleCompleted(ctx, interviews.Settlement{InterviewID: id, OrganizationID: org, Consumed: 12, Anchor: anchor}, nil)
	require.NoError(t, err)
	assert.True(t, r.Settled)
	assert.Equal(t, int64(12), r.CreditsConsumed)
	assert.True(t, anchor.Add(interviews.RetentionPeriod).Equal(r.RetentionExpiresAt))

	avail, res = balances(t, s, org)
	assert.Equal(t, []int64{38, 0}, []int64{avail, res}, "8 released, 12 consumed")
	lots, err := s.CreditLots(ctx, org)
	require.NoError(t, err)
	require.Len(t, lots, 1)
	assert.Equal(t, int64(38), lots[0].Remaining)
	assert.Equal(t, int64(0), lots[0].Reserved)
	assert.Equal(t, interviews.LotActive, lots[0].Status)
	iv, err := s.Interview(ctx, id)
	require.NoError(t, err)
	require.NotNil(t, iv.SettledAt)
	assert.Equal(t, int64(12), *iv.CreditsConsumed)
	assert.True(t, anchor.Add(60*24*time.Hour).Equal(*iv.RetentionExpiresAt))
	entries, err := s.LedgerEntries(ctx, org)
	require.NoError(t, err)
	require.Len(t, entries, 2)
	assert.Equal(t, interviews.LedgerSettle, entries[0].Kind)
	assert.Equal(t, int64(12), entries[0].Credits)
	assert.Equal(t, interviews.LedgerRelease, entries[1].Kind)
	assert.Equal(t, int64(8), entries[1].Credits)
	for _, e := range entries {
		assert.Equal(t, interviews.ReferenceInterview, e.ReferenceKind)
		assert.Equal(t, id, e.ReferenceID)
	}
}

func testSettleCapped(t *testing.T, s interviews.Store) {
	ctx := context.Background()
	org := seed(t, s, 10)
	id := newInterview(t, s, org, 10)
	r, err := s.SettleCompleted(ctx, interviews.Settlement{InterviewID: id, OrganizationID: org, Consumed: 500, Anchor: anchor}, nil)
	require.NoError(t, err)
	assert.Equal(t, int64(10), r.CreditsConsumed)
	avail, res := balances(t, s, org)
	assert.Equal(t, []int64{0, 0}, []int64{avail, res})
	lots, err := s.CreditLots(ctx, org)
	require.NoError(t, err)
	assert.Equal(t, interviews.LotDepleted, lots[0].Status)
	entries, err := s.LedgerEntries(ctx, org)
	require.NoError(t, err)
	require.Len(t, entries, 1, "nothing left to release")
}

func testSettleTwice(t *testing.T, s interviews.Store) {
	ctx := context.Background()
	org := seed(t, s, 50)
	id := newInterview(t, s, org, 20)
	st := interviews.Settlement{InterviewID: id, OrganizationID: org, Consumed: 5, Anchor: anchor}
	_, err := s.SettleCompleted(ctx, st, nil)
	require.NoError(t, err)
	r, err := s.SettleCompleted(ctx, st, nil)
	require.NoError(t, err)
	assert.False(t, r.Settled)
	assert.Equal(t, int64(5), r.CreditsConsumed)
	r, err = s.SettleFailed(ctx, interviews.Settlement{InterviewID: id, OrganizationID: org, Anchor: anchor})
	require.NoError(t, err)
	assert.False(t, r.Settled, "a failure after a completion changes nothing")
	entries, err := s.LedgerEntries(ctx, org)
	require.NoError(t, err)
	assert.Len(t, entries, 2)
	avail, res := balances(t, s, org)
	assert.Equal(t, []int64{45, 0}, []int64{avail, res})
}

func testSettleConcurrent(t *testing.T, s interviews.Store) {
	ctx := context.Background()
	org := seed(t, s, 50)
	id := newInterview(t, s, org, 20)
	const n = 8
	var wg sync.WaitGroup
	results := make(chan interviews.SettleResult, n)
	for range n {
		wg.Go(func() {
			r, err := s.SettleCompleted(ctx, interviews.Settlement{InterviewID: id, OrganizationID: org, Consumed: 7, Anchor: anchor}, nil)
			assert.NoError(t, err)
			results <- r
		})
	}
	wg.Wait()
	close(results)
	settled := 0
	for r := range results {
		if r.Settled {
			settled++
		}
	}
	assert.Equal(t, 1, settled)
	avail, res := balances(t, s, org)
	assert.Equal(t, []int64{43, 0}, []int64{avail, res})
}

// A reservation (the API creating an interview) and a settlement (the
// consumer) of one organisation at once: both take the organisation's row
// and its lots' rows, in one order, so neither deadlocks the other (seen:
// "deadlock detected" creating an interview while the previous one settled).
func testReserveWhileSettling(t *testing.T, s interviews.Store) {
	ctx := context.Background()
	org := seed(t, s, 500, 500)
	const n = 20
	settling := make([]string, n)
	for i := range settling {
		settling[i] = newInterview(t, s, org, 5)
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, err := s.SettleCompleted(ctx, interviews.Settlement{InterviewID: settling[i], OrganizationID: org, Consumed: 2, Anchor: anchor}, nil)
			assert.NoError(t, err, "settle")
		})
		wg.Go(func() {
			err := s.CreateInterview(ctx, interviews.NewInterview{ID: interviews.NewObjectID(), OrganizationID: org, DurationSeconds: 60, CreditsReserved: 5})
			assert.NoError(t, err, "reserve")
		})
	}
	wg.Wait()
	avail, res := balances(t, s, org)
	assert.Equal(t, []int64{1000 - n*2 - n*5, n * 5}, []int64{avail, res}, "each settled consumed 2, each new one holds 5")
}

func testSettleFailed(t *testing.T, s interviews.Store) {
	ctx := context.Background()
	org := seed(t, s, 50)
	id := newInterview(t, s, org, 20)
	r, err := s.SettleFailed(ctx, interviews.Settlement{InterviewID: id, OrganizationID: org, Consumed: 99, Anchor: anchor})
	require.NoError(t, err)
	assert.True(t, r.Settled)
	assert.Zero(t, r.CreditsConsumed, "a failed interview consumes nothing, whatever it says")
	avail, res := balances(t, s, org)
	assert.Equal(t, []int64{50, 0}, []int64{avail, res})
	entries, err := s.LedgerEntries(ctx, org)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Equal(t, interviews.LedgerRelease, entries[0].Kind)
	assert.Equal(t, int64(20), entries[0].Credits)
}

func testLotsOrder(t *testing.T, s interviews.Store) {
	ctx := context.Background()
	org := seed(t, s, 10) // never expires
	later := time.Now().Add(48 * time.Hour)
	soon := time.Now().Add(time.Second)
	laterLot, soonLot := interviews.NewObjectID(), interviews.NewObjectID()
	require.NoError(t, s.AddCreditLot(ctx, interviews.CreditLot{ID: laterLot, OrganizationID: org, Remaining: 10, ExpiresAt: &later}))
	require.NoError(t, s.AddCreditLot(ctx, interviews.CreditLot{ID: soonLot, OrganizationID: org, Remaining: 4, ExpiresAt: &soon}))
	id := newInterview(t, s, org, 10) // 4 from soon, 6 from later
	lots, err := s.CreditLots(ctx, org)
	require.NoError(t, err)
	reserved := map[string]int64{}
	for _, l := range lots {
		reserved[l.ID] = l.Reserved
	}
	assert.Equal(t, int64(4), reserved[soonLot])
	assert.Equal(t, int64(6), reserved[laterLot])

	time.Sleep(1100 * time.Millisecond) // the soon lot expires
	_, err = s.SettleCompleted(ctx, interviews.Settlement{InterviewID: id, OrganizationID: org, Consumed: 2, Anchor: anchor}, nil)
	require.NoError(t, err)
	entries, err := s.LedgerEntries(ctx, org)
	require.NoError(t, err)
	got := map[string]int64{}
	for _, e := range entries {
		got[e.Kind+" "+e.LotID] = e.Credits
	}
	assert.Equal(t, map[string]int64{
		"SETTLE " + soonLot:   2,
		"FORFEIT " + soonLot:  2,
		"RELEASE " + laterLot: 6,
	}, got)
	lots, err = s.CreditLots(ctx, org)
	require.NoError(t, err)
	for _, l := range lots {
		if l.ID == soonLot {
			assert.Equal(t, interviews.LotExpired, l.Status)
			assert.Equal(t, int64(0), l.Remaining)
		}
	}
	avail, res := balances(t, s, org)
	assert.Equal(t, []int64{20, 0}, []int64{avail, res}, "24 - 10 reserved + 6 released; the forfeited 2 never come back")
}

func testSettleRefusals(t *testing.T, s interviews.Store) {
	ctx := context.Background()
	org := seed(t, s, 50)
	other := seed(t, s, 5)
	id := newInterview(t, s, org, 20)
	for name, c := range map[string]struct {
		st   interviews.Settlement
		want error
	}{
		"unknown interview":    {interviews.Settlement{InterviewID: interviews.NewObjectID(), OrganizationID: org, Consumed: 1}, interviews.ErrUnknownInterview},
		"unknown organization": {interviews.Settlement{InterviewID: id, OrganizationID: interviews.NewObjectID(), Consumed: 1}, interviews.ErrUnknownOrganization},
		"another organization": {interviews.Settlement{InterviewID: id, OrganizationID: other, Consumed: 1}, interviews.ErrOrganizationMismatch},
	} {
		_, err := s.SettleCompleted(ctx, c.st, nil)
		assert.ErrorIs(t, err, c.want, name)
		_, err = s.SettleFailed(ctx, c.st)
		assert.ErrorIs(t, err, c.want, name)
	}
	for _, o := range []string{org, other} {
		entries, err := s.LedgerEntries(ctx, o)
		require.NoError(t, err)
		assert.Empty(t, entries)
	}
	avail, res := balances(t, s, org)
	assert.Equal(t, []int64{30, 20}, []int64{avail, res})
	iv, err := s.Interview(ctx, id)
	require.NoError(t, err)
	assert.Nil(t, iv.SettledAt)
}

func testReportLifecycle(t *testing.T, s interviews.Store) {
	ctx := context.Background()
	org := seed(t, s, 50)
	id := newInterview(t, s, org, 5)
	_, ok, err := s.LoadReport(ctx, id)
	require.NoError(t, err)
	assert.False(t, ok)

	c, err := s.ClaimReport(ctx, org, id, time.Hour)
	require.NoError(t, err)
	assert.Equal(t, interviews.Claim{Claimed: true, AttemptCount: 1, Status: interviews.ReportProcessing}, c)
	c, err = s.ClaimReport(ctx, org, id, time.Hour)
	require.NoError(t, err)
	assert.Equal(t, interviews.Claim{Claimed: false, AttemptCount: 1, Status: interviews.ReportProcessing}, c, "held by another worker")

	require.NoError(t, s.FailReport(ctx, id, 1, "model down"))
	r, _, err := s.LoadReport(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, interviews.ReportFailed, r.Status)
	assert.Equal(t, "model down", r.LastError)

	c, err = s.ClaimReport(ctx, org, id, time.Hour)
	require.NoError(t, err)
	assert.Equal(t, interviews.Claim{Claimed: true, AttemptCount: 2, Status: interviews.ReportProcessing}, c)
	ok, err = s.CompleteReport(ctx, id, 1, interviews.ReportContent{Summary: "stale"})
	require.NoError(t, err)
	assert.False(t, ok, "an older claim cannot complete")
	content := interviews.ReportContent{
		OverallScore: 77, Recommendation: interviews.RecommendHire, Summary: "good",
		SkillAssessments: []interviews.SkillAssessment{{Skill: "go", Score: 4, Evidence: "e"}},
		QuestionAnalysis: []interviews.QuestionReview{{Question: "q", Score: 3, Strengths: "s", Concerns: "c"}},
		Generation:       interviews.Generation{Model: "m", PromptVersion: "v1", PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3, GeneratedAt: anchor},
	}
	ok, err = s.CompleteReport(ctx, id, 2, content)
	require.NoError(t, err)
	assert.True(t, ok)
	r, _, err = s.LoadReport(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, interviews.ReportCompleted, r.Status)
	assert.Equal(t, 2, r.AttemptCount)
	assert.True(t, content.Generation.GeneratedAt.Equal(r.Content.Generation.GeneratedAt))
	r.Content.Generation.GeneratedAt = content.Generation.GeneratedAt
	assert.Equal(t, content, r.Content)
	assert.NotNil(t, r.CompletedAt)

	c, err = s.ClaimReport(ctx, org, id, 0)
	require.NoError(t, err)
	assert.False(t, c.Claimed, "a completed report is never claimed")
	require.NoError(t, s.FailReport(ctx, id, 0, "cap"))
	r, _, err = s.LoadReport(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, interviews.ReportCompleted, r.Status, "a completed report never fails")
}

func testStaleClaim(t *testing.T, s interviews.Store) {
	ctx := context.Background()
	org := seed(t, s, 50)
	id := newInterview(t, s, org, 5)
	_, err := s.ClaimReport(ctx, org, id, time.Hour)
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond)
	c, err := s.ClaimReport(ctx, org, id, 10*time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, interviews.Claim{Claimed: true, AttemptCount: 2, Status: interviews.ReportProcessing}, c, "a dead worker's claim is taken over")
}

func testLoadInterview(t *testing.T, s interviews.Store) {
	ctx := context.Background()
	org := seed(t, s, 50)
	other := seed(t, s)
	id := interviews.NewObjectID()
	qa := []interviews.QA{{Question: "q", Answer: "a"}}
	require.NoError(t, s.CreateInterview(ctx, interviews.NewInterview{ID: id, OrganizationID: org, DurationSeconds: 90, Transcript: qa, CreditsReserved: 2}))
	iv, err := s.LoadInterview(ctx, org, id)
	require.NoError(t, err)
	assert.Equal(t, 90, iv.DurationSeconds)
	assert.Equal(t, qa, iv.Transcript)
	_, err = s.LoadInterview(ctx, other, id)
	assert.ErrorIs(t, err, interviews.ErrOrganizationMismatch)
	_, err = s.LoadInterview(ctx, interviews.NewObjectID(), id)
	assert.ErrorIs(t, err, interviews.ErrUnknownOrganization)
	_, err = s.LoadInterview(ctx, org, interviews.NewObjectID())
	assert.ErrorIs(t, err, interviews.ErrUnknownInterview)
	require.NoError(t, s.DeleteInterview(ctx, id))
	_, err = s.LoadInterview(ctx, org, id)
	assert.ErrorIs(t, err, interviews.ErrUnknownInterview, "soft-deleted")
}

func testSeeding(t *testing.T, s interviews.Store) {
	ctx := context.Background()
	org := seed(t, s, 5)
	err := s.CreateOrganization(ctx, interviews.Organization{ID: org})
	assert.ErrorIs(t, err, interviews.ErrExists)
	err = s.CreateInterview(ctx, interviews.NewInterview{ID: interviews.NewObjectID(), OrganizationID: org, CreditsReserved: 6})
	assert.ErrorIs(t, err, interviews.ErrInsufficientCredits)
	avail, res := balances(t, s, org)
	assert.Equal(t, []int64{5, 0}, []int64{avail, res}, "a refused reservation changes nothing")
	err = s.AddCreditLot(ctx, interviews.CreditLot{ID: interviews.NewObjectID(), OrganizationID: interviews.NewObjectID(), Remaining: 1})
	assert.ErrorIs(t, err, interviews.ErrUnknownOrganization)
	_, err = s.Organization(ctx, interviews.NewObjectID())
	assert.ErrorIs(t, err, interviews.ErrUnknownOrganization)
}

// TestPostgresOutboxFollowUp: the report request is written to the outbox
// in the settlement's transaction, and only by the settling call.
func TestPostgresOutboxFollowUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := dbtest.Schema(t)
	s, err := interviews.NewPostgres(pool, schema)
	require.NoError(t, err)
	org := seed(t, s, 50)
	id := newInterview(t, s, org, 20)
	writer := outbox.TxWriter{Table: outbox.Table{Schema: schema}}
	follow := func(topic string) interviews.FollowUp {
		msg, err := interviews.NewReportGenerateMessage(ctx, interviews.ReportGenerate{InterviewID: id, OrganizationID: org})
		require.NoError(t, err)
		return func(ctx context.Context) error { return writer.Write(ctx, topic, msg) }
	}
	st := interviews.Settlement{InterviewID: id, OrganizationID: org, Consumed: 3, Anchor: anchor}
	r, err := s.SettleCompleted(ctx, st, follow(interviews.ReportGenerateQueue))
	require.NoError(t, err)
	assert.True(t, r.Settled)
	r, err = s.SettleCompleted(ctx, st, follow(interviews.ReportGenerateQueue))
	require.NoError(t, err)
	assert.False(t, r.Settled)

	var n int
	var topic string
	var meta map[string]string
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) OVER (), topic, metadata FROM `+pgx.Identifier{schema, "outbox"}.Sanitize()).Scan(&n, &topic, &meta))
	assert.Equal(t, 1, n, "one report request")
	assert.Equal(t, interviews.ReportGenerateQueue, topic)
	assert.Equal(t, "settlement-"+id, meta[interviews.RequestIDKey])
	assert.Equal(t, interviews.EventReportGenerate, meta[interviews.EventTypeKey])

	// An outbox write that fails rolls the settlement back.
	id2 := newInterview(t, s, org, 5)
	_, err = s.SettleCompleted(ctx, interviews.Settlement{InterviewID: id2, OrganizationID: org, Consumed: 1, Anchor: anchor},
		func(ctx context.Context) error { return writer.Write(ctx, "", message.NewMessage("x", []byte(`{}`))) })
	require.Error(t, err)
	iv, err := s.Interview(ctx, id2)
	require.NoError(t, err)
	assert.Nil(t, iv.SettledAt, "rolled back with the outbox write")
	assert.False(t, errors.Is(err, interviews.ErrUnknownInterview))
}

func testResetFailedReport(t *testing.T, s interviews.Store) {
	ctx := context.Background()
	org := interviews.Organization{ID: interviews.NewObjectID(), Name: "Acme"}
	require.NoError(t, s.CreateOrganization(ctx, org))
	id := interviews.NewObjectID()
	require.NoError(t, s.CreateInterview(ctx, interviews.NewInterview{ID: id, OrganizationID: org.ID, Status: "COMPLETED", DurationSeconds: 60}))
	_, err := s.ResetFailedReport(ctx, id)
	require.ErrorIs(t, err, interviews.ErrReportNotFailed, "no report yet")
	c, err := s.ClaimReport(ctx, org.ID, id, time.Hour)
	require.NoError(t, err)
	_, err = s.ResetFailedReport(ctx, id)
	require.ErrorIs(t, err, interviews.ErrReportNotFailed, "PROCESSING is not retried")
	require.NoError(t, s.FailReport(ctx, id, c.AttemptCount, "boom"))

	was, err := s.ResetFailedReport(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, interviews.ReportFailed, was.Status)
	assert.Equal(t, 1, was.AttemptCount)
	assert.Equal(t, "boom", was.LastError)
	assert.Equal(t, org.ID, was.OrganizationID)
	now, ok, err := s.LoadReport(ctx, id)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, interviews.ReportNotStarted, now.Status)
	assert.Zero(t, now.AttemptCount)
	c, err = s.ClaimReport(ctx, org.ID, id, time.Hour)
	require.NoError(t, err)
	assert.True(t, c.Claimed, "claimable again")
	assert.Equal(t, 1, c.AttemptCount, "a fresh budget")
}
