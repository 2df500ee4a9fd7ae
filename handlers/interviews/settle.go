package interviews

import (
	"slices"
	"time"
)

// hold is the part of an interview's reservation one lot holds.
type hold struct {
	LotID     string
	Credits   int64
	ExpiresAt *time.Time
	CreatedAt time.Time
}

// lotMove is what a settlement does to one lot.
type lotMove struct {
	LotID string
	// Unreserve is the hold given up (all of it, always).
	Unreserve int64
	// Consumed leaves the lot (a SETTLE entry).
	Consumed int64
	// Released returns to the organisation's available credits (RELEASE).
	Released int64
	// Forfeited leaves an expired lot unused (FORFEIT).
	Forfeited int64
	// Expired: the lot was past its expiry at the settlement.
	Expired bool
}

// planSettlement spreads consumed credits over an interview's holds, the
// soonest-expiring lot first (so credits about to expire are the ones used),
// and releases the rest; the unused part of a lot already expired is
// forfeited instead of returned. Both stores use it, so they cannot disagree.
func planSettlement(holds []hold, consumed int64, now time.Time) []lotMove {
	holds = slices.Clone(holds)
	slices.SortFunc(holds, func(a, b hold) int {
		return compareLots(a.ExpiresAt, b.ExpiresAt, a.CreatedAt, b.CreatedAt, a.LotID, b.LotID)
	})
	left := consumed
	moves := make([]lotMove, 0, len(holds))
	for _, h := range holds {
		use := min(h.Credits, left)
		left -= use
		m := lotMove{LotID: h.LotID, Unreserve: h.Credits, Consumed: use}
		m.Expired = h.ExpiresAt != nil && !h.ExpiresAt.After(now)
		if unused := h.Credits - use; m.Expired {
			m.Forfeited = unused
		} else {
			m.Released = unused
		}
		moves = append(moves, m)
	}
	return moves
}

// ledgerOf returns the entries of a settlement's moves.
func ledgerOf(organizationID, interviewID string, moves []lotMove, at time.Time) []LedgerEntry {
	var out []LedgerEntry
	add := func(lot, kind string, n int64) {
		if n > 0 {
			out = append(out, LedgerEntry{OrganizationID: organizationID, LotID: lot, Kind: kind, Credits: n,
				ReferenceKind: ReferenceInterview, ReferenceID: interviewID, CreatedAt: at})
		}
	}
	for _, m := range moves {
		add(m.LotID, LedgerSettle, m.Consumed)
		add(m.LotID, LedgerRelease, m.Released)
		add(m.LotID, LedgerForfeit, m.Forfeited)
	}
	return out
}

// lotStatus is a lot's status after a move.
func lotStatus(current string, remaining int64, expired bool) string {
	switch {
	case expired:
		return LotExpired
	case remaining == 0:
		return LotDepleted
	default:
		return current
	}
}
