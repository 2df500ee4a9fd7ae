package interviews

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Memory is the in-process Store for the embedded mode and tests. One mutex
// makes each method a transaction: everything is checked before anything
// changes. Nothing survives the process.
type Memory struct {
	mu         sync.Mutex
	orgs       map[string]*Organization
	lots       map[string]*CreditLot
	interviews map[string]*Interview
	holds      map[string][]hold // by interview id
	ledger     []LedgerEntry
	reports    map[string]*Report
	now        func() time.Time
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty store.
func NewMemory() *Memory {
	return &Memory{
		orgs:       map[string]*Organization{},
		lots:       map[string]*CreditLot{},
		interviews: map[string]*Interview{},
		holds:      map[string][]hold{},
		reports:    map[string]*Report{},
		now:        func() time.Time { return time.Now().UTC() },
	}
}

// SettleCompleted implements Store. followUp runs under the store's lock,
// before the settlement becomes visible; its error undoes nothing (the memory
// store has no rollback), so it must only stage (outbox.AfterCommit).
func (m *Memory) SettleCompleted(ctx context.Context, s Settlement, followUp FollowUp) (SettleResult, error) {
	return m.settle(ctx, s, followUp)
}

// SettleFailed implements Store.
func (m *Memory) SettleFailed(ctx context.Context, s Settlement) (SettleResult, error) {
	s.Consumed = 0
	return m.settle(ctx, s, nil)
}

func (m *Memory) settle(ctx context.Context, s Settlement, followUp FollowUp) (SettleResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	iv, err := m.interviewOf(s.OrganizationID, s.InterviewID, true)
	if err != nil {
		return SettleResult{}, fmt.Errorf("settle interview %s: %w", s.InterviewID, err)
	}
	org, ok := m.orgs[s.OrganizationID]
	if !ok {
		return SettleResult{}, fmt.Errorf("settle interview %s: organization %s: %w", s.InterviewID, s.OrganizationID, ErrUnknownOrganization)
	}
	if iv.SettledAt != nil {
		return SettleResult{Settled: false, CreditsReserved: iv.CreditsReserved, CreditsConsumed: deref(iv.CreditsConsumed)}, nil
	}
	if followUp != nil {
		// Before any change: a failed follow-up leaves the interview unsettled.
		if err := followUp(ctx); err != nil {
			return SettleResult{}, fmt.Errorf("settle interview %s: %w", s.InterviewID, err)
		}
	}
	now := m.now()
	consumed := billed(s.Consumed, iv.CreditsReserved)
	moves := planSettlement(m.holds[iv.ID], consumed, now)
	for _, mv := range moves {
		lot := m.lots[mv.LotID]
		lot.Reserved -= mv.Unreserve
		lot.Remaining -= mv.Consumed + mv.Forfeited
		lot.Status = lotStatus(lot.Status, lot.Remaining, mv.Expired)
		org.ReservedCredits -= mv.Unreserve
		org.AvailableCredits += mv.Released
	}
	m.ledger = append(m.ledger, ledgerOf(org.ID, iv.ID, moves, now)...)
	retention := s.Anchor.UTC().Add(RetentionPeriod)
	iv.SettledAt, iv.CreditsConsumed, iv.RetentionExpiresAt = &now, &consumed, &retention
	return SettleResult{Settled: true, CreditsReserved: iv.CreditsReserved, CreditsConsumed: consumed, RetentionExpiresAt: retention}, nil
}

// interviewOf finds an interview of org; settlement sees soft-deleted
// interviews too (their credits still settle), report generation does not.
func (m *Memory) interviewOf(orgID, id string, withDeleted bool) (*Interview, error) {
	iv, ok := m.interviews[id]
	if !ok || (!withDeleted && iv.DeletedAt != nil) {
		return nil, ErrUnknownInterview
	}
	if iv.OrganizationID != orgID {
		if _, known := m.orgs[orgID]; !known {
			return nil, fmt.Errorf("organization %s: %w", orgID, ErrUnknownOrganization)
		}
		return nil, fmt.Errorf("%w (message names %s)", ErrOrganizationMismatch, orgID)
	}
	return iv, nil
}

// LoadInterview implements Store.
func (m *Memory) LoadInterview(_ context.Context, organizationID, interviewID string) (Interview, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	iv, err := m.interviewOf(organizationID, interviewID, false)
	if err != nil {
		return Interview{}, fmt.Errorf("load interview %s: %w", interviewID, err)
	}
	return cloneInterview(iv), nil
}

// LoadReport implements Store.
func (m *Memory) LoadReport(_ context.Context, interviewID string) (Report, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.reports[interviewID]
	if !ok {
		return Report{}, false, nil
	}
	return *r, true, nil
}

// ClaimReport implements Store.
func (m *Memory) ClaimReport(_ context.Context, organizationID, interviewID string, staleAfter time.Duration) (Claim, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	r, ok := m.reports[interviewID]
	if !ok {
		r = &Report{InterviewID: interviewID, OrganizationID: organizationID, Status: ReportNotStarted}
		m.reports[interviewID] = r
	}
	stale := r.Status == ReportProcessing && r.ClaimedAt != nil && now.Sub(*r.ClaimedAt) > staleAfter
	if r.Status != ReportNotStarted && r.Status != ReportFailed && !stale {
		return Claim{Claimed: false, AttemptCount: r.AttemptCount, Status: r.Status}, nil
	}
	r.Status, r.AttemptCount, r.ClaimedAt = ReportProcessing, r.AttemptCount+1, &now
	return Claim{Claimed: true, AttemptCount: r.AttemptCount, Status: r.Status}, nil
}

// CompleteReport implements Store.
func (m *Memory) CompleteReport(_ context.Context, interviewID string, attemptCount int, content ReportContent) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.reports[interviewID]
	if !ok || r.Status != ReportProcessing || r.AttemptCount != attemptCount {
		return false, nil
	}
	now := m.now()
	r.Status, r.Content, r.CompletedAt, r.LastError = ReportCompleted, content, &now, ""
	if iv, ok := m.interviews[interviewID]; ok && iv.RetentionExpiresAt != nil {
		t := *iv.RetentionExpiresAt
		r.RetentionExpiresAt = &t
	}
	return true, nil
}

// FailReport implements Store.
func (m *Memory) FailReport(_ context.Context, interviewID string, attemptCount int, reason string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.reports[interviewID]
	if !ok || r.Status == ReportCompleted {
		return nil
	}
	if attemptCount > 0 && (r.Status != ReportProcessing || r.AttemptCount != attemptCount) {
		return nil
	}
	r.Status, r.LastError = ReportFailed, reason
	return nil
}

// ResetFailedReport implements Store.
func (m *Memory) ResetFailedReport(_ context.Context, interviewID string) (Report, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.reports[interviewID]
	if !ok {
		return Report{}, fmt.Errorf("report of interview %s: none: %w", interviewID, ErrReportNotFailed)
	}
	if r.Status != ReportFailed {
		return Report{}, fmt.Errorf("report of interview %s is %s: %w", interviewID, r.Status, ErrReportNotFailed)
	}
	was := *r
	r.Status, r.AttemptCount, r.LastError, r.ClaimedAt = ReportNotStarted, 0, "", nil
	return was, nil
}

// CreateOrganization implements Store.
func (m *Memory) CreateOrganization(_ context.Context, o Organization) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.orgs[o.ID]; ok {
		return fmt.Errorf("create organization %s: %w", o.ID, ErrExists)
	}
	m.orgs[o.ID] = &Organization{ID: o.ID, Name: o.Name}
	return nil
}

// AddCreditLot implements Store.
func (m *Memory) AddCreditLot(_ context.Context, lot CreditLot) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	org, ok := m.orgs[lot.OrganizationID]
	if !ok {
		return fmt.Errorf("add credit lot %s: %w", lot.ID, ErrUnknownOrganization)
	}
	if _, ok := m.lots[lot.ID]; ok {
		return fmt.Errorf("add credit lot %s: %w", lot.ID, ErrExists)
	}
	l := CreditLot{ID: lot.ID, OrganizationID: lot.OrganizationID, Remaining: lot.Remaining, Status: LotActive, ExpiresAt: lot.ExpiresAt, CreatedAt: m.now()}
	m.lots[lot.ID] = &l
	org.AvailableCredits += lot.Remaining
	return nil
}

// CreateInterview implements Store.
func (m *Memory) CreateInterview(_ context.Context, in NewInterview) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	org, ok := m.orgs[in.OrganizationID]
	if !ok {
		return fmt.Errorf("create interview %s: %w", in.ID, ErrUnknownOrganization)
	}
	if _, ok := m.interviews[in.ID]; ok {
		return fmt.Errorf("create interview %s: %w", in.ID, ErrExists)
	}
	var lots []*CreditLot
	for _, l := range m.lots {
		if l.OrganizationID == in.OrganizationID && l.Status == LotActive && l.Remaining > l.Reserved {
			lots = append(lots, l)
		}
	}
	slices.SortFunc(lots, func(a, b *CreditLot) int {
		return compareLots(a.ExpiresAt, b.ExpiresAt, a.CreatedAt, b.CreatedAt, a.ID, b.ID)
	})
	left := in.CreditsReserved
	var hs []hold
	for _, l := range lots {
		if left == 0 {
			break
		}
		take := min(l.Remaining-l.Reserved, left)
		left -= take
		hs = append(hs, hold{LotID: l.ID, Credits: take, ExpiresAt: l.ExpiresAt, CreatedAt: l.CreatedAt})
	}
	if left > 0 {
		return fmt.Errorf("create interview %s: reserve %d: %w", in.ID, in.CreditsReserved, ErrInsufficientCredits)
	}
	for _, h := range hs {
		m.lots[h.LotID].Reserved += h.Credits
	}
	org.AvailableCredits -= in.CreditsReserved
	org.ReservedCredits += in.CreditsReserved
	m.holds[in.ID] = hs
	status := cmp.Or(in.Status, "COMPLETED")
	m.interviews[in.ID] = &Interview{ID: in.ID, OrganizationID: in.OrganizationID, Status: status,
		DurationSeconds: in.DurationSeconds, Transcript: slices.Clone(in.Transcript), CreditsReserved: in.CreditsReserved}
	return nil
}

// Organization implements Store.
func (m *Memory) Organization(_ context.Context, id string) (Organization, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.orgs[id]
	if !ok {
		return Organization{}, fmt.Errorf("organization %s: %w", id, ErrUnknownOrganization)
	}
	return *o, nil
}

// CreditLots implements Store.
func (m *Memory) CreditLots(_ context.Context, organizationID string) ([]CreditLot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []CreditLot
	for _, l := range m.lots {
		if l.OrganizationID == organizationID {
			out = append(out, *l)
		}
	}
	slices.SortFunc(out, func(a, b CreditLot) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// Interview implements Store.
func (m *Memory) Interview(_ context.Context, id string) (Interview, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	iv, ok := m.interviews[id]
	if !ok {
		return Interview{}, fmt.Errorf("interview %s: %w", id, ErrUnknownInterview)
	}
	return cloneInterview(iv), nil
}

// LedgerEntries implements Store.
func (m *Memory) LedgerEntries(_ context.Context, organizationID string) ([]LedgerEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []LedgerEntry
	for _, e := range m.ledger {
		if e.OrganizationID == organizationID {
			out = append(out, e)
		}
	}
	return out, nil
}

// DeleteInterview implements Store.
func (m *Memory) DeleteInterview(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	iv, ok := m.interviews[id]
	if !ok {
		return fmt.Errorf("delete interview %s: %w", id, ErrUnknownInterview)
	}
	now := m.now()
	iv.DeletedAt = &now
	return nil
}

func cloneInterview(iv *Interview) Interview {
	c := *iv
	c.Transcript = slices.Clone(iv.Transcript)
	return c
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// compareLots orders lots for reservation: soonest expiry first (lots that
// never expire last), then oldest, then by id.
func compareLots(ea, eb *time.Time, ca, cb time.Time, ia, ib string) int {
	switch {
	case ea != nil && eb == nil:
		return -1
	case ea == nil && eb != nil:
		return 1
	case ea != nil && !ea.Equal(*eb):
		return ea.Compare(*eb)
	}
	return cmp.Or(ca.Compare(cb), cmp.Compare(ia, ib))
}
