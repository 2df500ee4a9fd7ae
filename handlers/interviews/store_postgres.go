package interviews

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventpipe/eventpipe/app/dbtx"
	"github.com/eventpipe/eventpipe/migrations"
)

// Postgres is the Store on the tables of migrations/00003_interviews.sql.
type Postgres struct {
	pool   *pgxpool.Pool
	schema string
}

var _ Store = (*Postgres)(nil)

// NewPostgres returns the store on schema (migrations.DefaultSchema when
// empty), which must be migrated.
func NewPostgres(pool *pgxpool.Pool, schema string) (*Postgres, error) {
	schema = migrations.SchemaOrDefault(schema)
	if err := migrations.ValidateSchema(schema); err != nil {
		return nil, fmt.Errorf("interviews store: %w", err)
	}
	return &Postgres{pool: pool, schema: schema}, nil
}

func (p *Postgres) t(name string) string { return pgx.Identifier{p.schema, name}.Sanitize() }

// SettleCompleted implements Store.
func (p *Postgres) SettleCompleted(ctx context.Context, s Settlement, followUp FollowUp) (SettleResult, error) {
	return p.settle(ctx, s, followUp)
}

// SettleFailed implements Store.
func (p *Postgres) SettleFailed(ctx context.Context, s Settlement) (SettleResult, error) {
	s.Consumed = 0
	return p.settle(ctx, s, nil)
}

func (p *Postgres) settle(ctx context.Context, s Settlement, followUp FollowUp) (SettleResult, error) {
	var res SettleResult
	err := dbtx.InTx(ctx, p.pool, func(ctx context.Context, tx pgx.Tx) error {
		retention := s.Anchor.UTC().Add(RetentionPeriod)
		// The claim. Concurrent settlements of one interview queue on its
		// row lock; the second re-reads settled_at after the first commits
		// and matches nothing.
		var reserved, consumed int64
		var now time.Time
		err := tx.QueryRow(ctx, `UPDATE `+p.t("interviews")+`
			SET settled_at = now(), credits_consumed = LEAST(GREATEST($3::bigint, 0), credits_reserved),
			    retention_expires_at = $4, updated_at = now()
			WHERE id = $1 AND organization_id = $2 AND settled_at IS NULL
			RETURNING credits_reserved, credits_consumed, settled_at`,
			s.InterviewID, s.OrganizationID, s.Consumed, retention).Scan(&reserved, &consumed, &now)
		if errors.Is(err, pgx.ErrNoRows) {
			return p.whyNotClaimed(ctx, tx, s, &res)
		}
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		holds, err := p.holds(ctx, tx, s.InterviewID)
		if err != nil {
			return err
		}
		moves := planSettlement(holds, consumed, now)
		var unreserve, released int64
		for _, m := range moves {
			unreserve += m.Unreserve
			released += m.Released
		}
		// The organisation's row before its lots' rows, the order a
		// reservation (CreateInterview) takes them in: the other order
		// deadlocks a settlement with a reservation of the same
		// organisation, and settlements of one organisation queue here
		// rather than on lots taken in different orders.
		if _, err := tx.Exec(ctx, `UPDATE `+p.t("organizations")+`
			SET reserved_credits = reserved_credits - $2, available_credits = available_credits + $3, updated_at = now()
			WHERE id = $1`, s.OrganizationID, unreserve, released); err != nil {
			return fmt.Errorf("update organization %s: %w", s.OrganizationID, err)
		}
		for _, m := range moves {
			if _, err := tx.Exec(ctx, `UPDATE `+p.t("credit_lots")+`
				SET reserved = reserved - $2, remaining = remaining - $3,
				    status = CASE WHEN $4 THEN 'EXPIRED' WHEN remaining - $3 = 0 THEN 'DEPLETED' ELSE status END,
				    updated_at = now()
				WHERE id = $1`, m.LotID, m.Unreserve, m.Consumed+m.Forfeited, m.Expired); err != nil {
				return fmt.Errorf("update lot %s: %w", m.LotID, err)
			}
		}
		for _, e := range ledgerOf(s.OrganizationID, s.InterviewID, moves, now) {
			if _, err := tx.Exec(ctx, `INSERT INTO `+p.t("credit_ledger_entries")+`
				(organization_id, lot_id, kind, credits, reference_kind, reference_id, created_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7)`,
				e.OrganizationID, e.LotID, e.Kind, e.Credits, e.ReferenceKind, e.ReferenceID, e.CreatedAt); err != nil {
				return fmt.Errorf("ledger %s %s: %w", e.Kind, e.LotID, err)
			}
		}
		res = SettleResult{Settled: true, CreditsReserved: reserved, CreditsConsumed: consumed, RetentionExpiresAt: retention}
		if followUp != nil {
			return followUp(ctx)
		}
		return nil
	})
	if err != nil {
		return SettleResult{}, fmt.Errorf("settle interview %s: %w", s.InterviewID, err)
	}
	return res, nil
}

// whyNotClaimed tells an already settled interview (a no-op) from an unknown
// one or another organisation's.
func (p *Postgres) whyNotClaimed(ctx context.Context, tx pgx.Tx, s Settlement, res *SettleResult) error {
	var (
		org      string
		reserved int64
		consumed *int64
		settled  *time.Time
	)
	err := tx.QueryRow(ctx, `SELECT organization_id, credits_reserved, credits_consumed, settled_at FROM `+p.t("interviews")+` WHERE id = $1`,
		s.InterviewID).Scan(&org, &reserved, &consumed, &settled)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrUnknownInterview
	}
	if err != nil {
		return fmt.Errorf("read interview: %w", err)
	}
	if org != s.OrganizationID {
		return p.mismatch(ctx, tx, s.OrganizationID)
	}
	*res = SettleResult{Settled: false, CreditsReserved: reserved, CreditsConsumed: deref(consumed)}
	return nil
}

func (p *Postgres) mismatch(ctx context.Context, q dbtx.Querier, orgID string) error {
	var known bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+p.t("organizations")+` WHERE id = $1)`, orgID).Scan(&known); err != nil {
		return fmt.Errorf("read organization: %w", err)
	}
	if !known {
		return fmt.Errorf("organization %s: %w", orgID, ErrUnknownOrganization)
	}
	return fmt.Errorf("%w (message names %s)", ErrOrganizationMismatch, orgID)
}

func (p *Postgres) holds(ctx context.Context, tx pgx.Tx, interviewID string) ([]hold, error) {
	rows, err := tx.Query(ctx, `SELECT h.lot_id, h.credits, l.expires_at, l.created_at
		FROM `+p.t("interview_credit_holds")+` h JOIN `+p.t("credit_lots")+` l ON l.id = h.lot_id
		WHERE h.interview_id = $1`, interviewID)
	if err != nil {
		return nil, fmt.Errorf("read holds: %w", err)
	}
	hs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (hold, error) {
		var h hold
		err := r.Scan(&h.LotID, &h.Credits, &h.ExpiresAt, &h.CreatedAt)
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("read holds: %w", err)
	}
	return hs, nil
}

const interviewColumns = `id, organization_id, status, duration_seconds, transcript, credits_reserved,
	credits_consumed, settled_at, retention_expires_at, deleted_at`

func scanInterview(row pgx.Row) (Interview, error) {
	var (
		iv         Interview
		transcript []byte
	)
	err := row.Scan(&iv.ID, &iv.OrganizationID, &iv.Status, &iv.DurationSeconds, &transcript, &iv.CreditsReserved,
		&iv.CreditsConsumed, &iv.SettledAt, &iv.RetentionExpiresAt, &iv.DeletedAt)
	if err != nil {
		return Interview{}, err
	}
	if err := json.Unmarshal(transcript, &iv.Transcript); err != nil {
		return Interview{}, fmt.Errorf("transcript: %w", err)
	}
	return iv, nil
}

// LoadInterview implements Store.
func (p *Postgres) LoadInterview(ctx context.Context, organizationID, interviewID string) (Interview, error) {
	q := dbtx.Q(ctx, p.pool)
	iv, err := scanInterview(q.QueryRow(ctx, `SELECT `+interviewColumns+` FROM `+p.t("interviews")+`
		WHERE id = $1 AND deleted_at IS NULL`, interviewID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Interview{}, fmt.Errorf("load interview %s: %w", interviewID, ErrUnknownInterview)
	}
	if err != nil {
		return Interview{}, fmt.Errorf("load interview %s: %w", interviewID, err)
	}
	if iv.OrganizationID != organizationID {
		return Interview{}, fmt.Errorf("load interview %s: %w", interviewID, p.mismatch(ctx, q, organizationID))
	}
	return iv, nil
}

const reportColumns = `interview_id, organization_id, status, attempt_count, coalesce(overall_score, 0),
	coalesce(recommendation, ''), coalesce(summary, ''), insufficient_evidence, skill_assessments, question_analysis,
	generation, coalesce(last_error, ''), retention_expires_at, claimed_at, completed_at`

func scanReport(row pgx.Row) (Report, error) {
	var (
		r                   Report
		skills, qs, genJSON []byte
	)
	err := row.Scan(&r.InterviewID, &r.OrganizationID, &r.Status, &r.AttemptCount, &r.Content.OverallScore,
		&r.Content.Recommendation, &r.Content.Summary, &r.Content.InsufficientEvidence, &skills, &qs, &genJSON,
		&r.LastError, &r.RetentionExpiresAt, &r.ClaimedAt, &r.CompletedAt)
	if err != nil {
		return Report{}, err
	}
	for _, f := range []struct {
		raw []byte
		to  any
	}{{skills, &r.Content.SkillAssessments}, {qs, &r.Content.QuestionAnalysis}, {genJSON, &r.Content.Generation}} {
		if err := json.Unmarshal(f.raw, f.to); err != nil {
			return Report{}, fmt.Errorf("decode report: %w", err)
		}
	}
	return r, nil
}

// LoadReport implements Store.
func (p *Postgres) LoadReport(ctx context.Context, interviewID string) (Report, bool, error) {
	r, err := scanReport(dbtx.Q(ctx, p.pool).QueryRow(ctx, `SELECT `+reportColumns+` FROM `+p.t("interview_reports")+` WHERE interview_id = $1`, interviewID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Report{}, false, nil
	}
	if err != nil {
		return Report{}, false, fmt.Errorf("load report %s: %w", interviewID, err)
	}
	return r, true, nil
}

// ClaimReport implements Store: one upsert whose conditional DO UPDATE is the
// claim, so two workers cannot both win.
func (p *Postgres) ClaimReport(ctx context.Context, organizationID, interviewID string, staleAfter time.Duration) (Claim, error) {
	q := dbtx.Q(ctx, p.pool)
	var c Claim
	err := q.QueryRow(ctx, `INSERT INTO `+p.t("interview_reports")+` AS r
			(interview_id, organization_id, status, attempt_count, claimed_at)
		VALUES ($1, $2, 'PROCESSING', 1, now())
		ON CONFLICT (interview_id) DO UPDATE
			SET status = 'PROCESSING', attempt_count = r.attempt_count + 1, claimed_at = now(), updated_at = now()
			WHERE r.status IN ('NOT_STARTED', 'FAILED')
			   OR (r.status = 'PROCESSING' AND r.claimed_at < now() - make_interval(secs => $3))
		RETURNING attempt_count`, interviewID, organizationID, staleAfter.Seconds()).Scan(&c.AttemptCount)
	if errors.Is(err, pgx.ErrNoRows) {
		r, ok, err := p.LoadReport(ctx, interviewID)
		if err != nil {
			return Claim{}, err
		}
		if !ok {
			return Claim{}, fmt.Errorf("claim report %s: vanished", interviewID)
		}
		return Claim{Claimed: false, AttemptCount: r.AttemptCount, Status: r.Status}, nil
	}
	if err != nil {
		return Claim{}, fmt.Errorf("claim report %s: %w", interviewID, err)
	}
	c.Claimed, c.Status = true, ReportProcessing
	return c, nil
}

// CompleteReport implements Store.
func (p *Postgres) CompleteReport(ctx context.Context, interviewID string, attemptCount int, content ReportContent) (bool, error) {
	skills, err := json.Marshal(nonNil(content.SkillAssessments))
	if err != nil {
		return false, fmt.Errorf("complete report %s: %w", interviewID, err)
	}
	qs, err := json.Marshal(nonNil(content.QuestionAnalysis))
	if err != nil {
		return false, fmt.Errorf("complete report %s: %w", interviewID, err)
	}
	genJSON, err := json.Marshal(content.Generation)
	if err != nil {
		return false, fmt.Errorf("complete report %s: %w", interviewID, err)
	}
	tag, err := dbtx.Q(ctx, p.pool).Exec(ctx, `UPDATE `+p.t("interview_reports")+` r
		SET status = 'COMPLETED', overall_score = $3, recommendation = $4, summary = $5, insufficient_evidence = $6,
		    skill_assessments = $7, question_analysis = $8, generation = $9, last_error = NULL,
		    completed_at = now(), updated_at = now(),
		    retention_expires_at = (SELECT retention_expires_at FROM `+p.t("interviews")+` WHERE id = r.interview_id)
		WHERE interview_id = $1 AND status = 'PROCESSING' AND attempt_count = $2`,
		interviewID, attemptCount, content.OverallScore, content.Recommendation, content.Summary, content.InsufficientEvidence,
		skills, qs, genJSON)
	if err != nil {
		return false, fmt.Errorf("complete report %s: %w", interviewID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// FailReport implements Store.
func (p *Postgres) FailReport(ctx context.Context, interviewID string, attemptCount int, reason string) error {
	_, err := dbtx.Q(ctx, p.pool).Exec(ctx, `UPDATE `+p.t("interview_reports")+`
		SET status = 'FAILED', last_error = $3, updated_at = now()
		WHERE interview_id = $1 AND status <> 'COMPLETED'
		  AND ($2 = 0 OR (status = 'PROCESSING' AND attempt_count = $2))`, interviewID, attemptCount, reason)
	if err != nil {
		return fmt.Errorf("fail report %s: %w", interviewID, err)
	}
	return nil
}

// ResetFailedReport implements Store: one conditional UPDATE, whose old row
// is read in the same statement.
func (p *Postgres) ResetFailedReport(ctx context.Context, interviewID string) (Report, error) {
	q := dbtx.Q(ctx, p.pool)
	was, err := scanReport(q.QueryRow(ctx, `WITH old AS (
			SELECT `+reportColumns+` FROM `+p.t("interview_reports")+` WHERE interview_id = $1 AND status = 'FAILED' FOR UPDATE)
		UPDATE `+p.t("interview_reports")+` r SET status = 'NOT_STARTED', attempt_count = 0, last_error = NULL, claimed_at = NULL, updated_at = now()
		FROM old WHERE r.interview_id = $1
		RETURNING old.*`, interviewID))
	if errors.Is(err, pgx.ErrNoRows) {
		r, ok, lerr := p.LoadReport(ctx, interviewID)
		switch {
		case lerr != nil:
			return Report{}, lerr
		case !ok:
			return Report{}, fmt.Errorf("report of interview %s: none: %w", interviewID, ErrReportNotFailed)
		default:
			return Report{}, fmt.Errorf("report of interview %s is %s: %w", interviewID, r.Status, ErrReportNotFailed)
		}
	}
	if err != nil {
		return Report{}, fmt.Errorf("retry report %s: %w", interviewID, err)
	}
	return was, nil
}

// CreateOrganization implements Store.
func (p *Postgres) CreateOrganization(ctx context.Context, o Organization) error {
	_, err := dbtx.Q(ctx, p.pool).Exec(ctx, `INSERT INTO `+p.t("organizations")+` (id, name) VALUES ($1, $2)`, o.ID, o.Name)
	if isUniqueViolation(err) {
		return fmt.Errorf("create organization %s: %w", o.ID, ErrExists)
	}
	if err != nil {
		return fmt.Errorf("create organization %s: %w", o.ID, err)
	}
	return nil
}

// AddCreditLot implements Store.
func (p *Postgres) AddCreditLot(ctx context.Context, lot CreditLot) error {
	err := dbtx.InTx(ctx, p.pool, func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE `+p.t("organizations")+` SET available_credits = available_credits + $2, updated_at = now() WHERE id = $1`,
			lot.OrganizationID, lot.Remaining)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrUnknownOrganization
		}
		_, err = tx.Exec(ctx, `INSERT INTO `+p.t("credit_lots")+` (id, organization_id, remaining, expires_at, created_at)
			VALUES ($1, $2, $3, $4, clock_timestamp())`, lot.ID, lot.OrganizationID, lot.Remaining, lot.ExpiresAt)
		if isUniqueViolation(err) {
			return ErrExists
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("add credit lot %s: %w", lot.ID, err)
	}
	return nil
}

// CreateInterview implements Store.
func (p *Postgres) CreateInterview(ctx context.Context, in NewInterview) error {
	transcript, err := json.Marshal(nonNil(in.Transcript))
	if err != nil {
		return fmt.Errorf("create interview %s: %w", in.ID, err)
	}
	err = dbtx.InTx(ctx, p.pool, func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE `+p.t("organizations")+`
			SET available_credits = available_credits - $2, reserved_credits = reserved_credits + $2, updated_at = now()
			WHERE id = $1`, in.OrganizationID, in.CreditsReserved)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrUnknownOrganization
		}
		_, err = tx.Exec(ctx, `INSERT INTO `+p.t("interviews")+`
			(id, organization_id, status, duration_seconds, transcript, credits_reserved)
			VALUES ($1, $2, $3, $4, $5, $6)`,
			in.ID, in.OrganizationID, cmp.Or(in.Status, "COMPLETED"), in.DurationSeconds, transcript, in.CreditsReserved)
		if isUniqueViolation(err) {
			return ErrExists
		}
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT id, remaining - reserved, expires_at, created_at FROM `+p.t("credit_lots")+`
			WHERE organization_id = $1 AND status = 'ACTIVE' AND remaining > reserved FOR UPDATE`, in.OrganizationID)
		if err != nil {
			return err
		}
		lots, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (hold, error) {
			var h hold
			err := r.Scan(&h.LotID, &h.Credits, &h.ExpiresAt, &h.CreatedAt)
			return h, err
		})
		if err != nil {
			return err
		}
		left := in.CreditsReserved
		for _, l := range planSettlement(lots, in.CreditsReserved, time.Time{}) {
			// planSettlement's "consumed" is the reservation here: the same
			// soonest-expiring-first walk.
			if l.Consumed == 0 {
				continue
			}
			left -= l.Consumed
			if _, err := tx.Exec(ctx, `UPDATE `+p.t("credit_lots")+` SET reserved = reserved + $2, updated_at = now() WHERE id = $1`, l.LotID, l.Consumed); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+p.t("interview_credit_holds")+` (interview_id, lot_id, credits) VALUES ($1, $2, $3)`, in.ID, l.LotID, l.Consumed); err != nil {
				return err
			}
		}
		if left > 0 {
			return fmt.Errorf("reserve %d: %w", in.CreditsReserved, ErrInsufficientCredits)
		}
		return nil
	})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23514" { // check_violation: available would go negative
			err = fmt.Errorf("reserve %d: %w", in.CreditsReserved, ErrInsufficientCredits)
		}
		return fmt.Errorf("create interview %s: %w", in.ID, err)
	}
	return nil
}

// Organization implements Store.
func (p *Postgres) Organization(ctx context.Context, id string) (Organization, error) {
	var o Organization
	err := dbtx.Q(ctx, p.pool).QueryRow(ctx, `SELECT id, name, available_credits, reserved_credits FROM `+p.t("organizations")+` WHERE id = $1`, id).
		Scan(&o.ID, &o.Name, &o.AvailableCredits, &o.ReservedCredits)
	if errors.Is(err, pgx.ErrNoRows) {
		return Organization{}, fmt.Errorf("organization %s: %w", id, ErrUnknownOrganization)
	}
	if err != nil {
		return Organization{}, fmt.Errorf("organization %s: %w", id, err)
	}
	return o, nil
}

// CreditLots implements Store.
func (p *Postgres) CreditLots(ctx context.Context, organizationID string) ([]CreditLot, error) {
	rows, err := dbtx.Q(ctx, p.pool).Query(ctx, `SELECT id, organization_id, remaining, reserved, status, expires_at, created_at
		FROM `+p.t("credit_lots")+` WHERE organization_id = $1 ORDER BY created_at, id`, organizationID)
	if err != nil {
		return nil, fmt.Errorf("credit lots of %s: %w", organizationID, err)
	}
	lots, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (CreditLot, error) {
		var l CreditLot
		err := r.Scan(&l.ID, &l.OrganizationID, &l.Remaining, &l.Reserved, &l.Status, &l.ExpiresAt, &l.CreatedAt)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("credit lots of %s: %w", organizationID, err)
	}
	return lots, nil
}

// Interview implements Store.
func (p *Postgres) Interview(ctx context.Context, id string) (Interview, error) {
	iv, err := scanInterview(dbtx.Q(ctx, p.pool).QueryRow(ctx, `SELECT `+interviewColumns+` FROM `+p.t("interviews")+` WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Interview{}, fmt.Errorf("interview %s: %w", id, ErrUnknownInterview)
	}
	if err != nil {
		return Interview{}, fmt.Errorf("interview %s: %w", id, err)
	}
	return iv, nil
}

// LedgerEntries implements Store.
func (p *Postgres) LedgerEntries(ctx context.Context, organizationID string) ([]LedgerEntry, error) {
	rows, err := dbtx.Q(ctx, p.pool).Query(ctx, `SELECT organization_id, lot_id, kind, credits, reference_kind, reference_id, created_at
		FROM `+p.t("credit_ledger_entries")+` WHERE organization_id = $1 ORDER BY id`, organizationID)
	if err != nil {
		return nil, fmt.Errorf("ledger of %s: %w", organizationID, err)
	}
	es, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (LedgerEntry, error) {
		var e LedgerEntry
		err := r.Scan(&e.OrganizationID, &e.LotID, &e.Kind, &e.Credits, &e.ReferenceKind, &e.ReferenceID, &e.CreatedAt)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("ledger of %s: %w", organizationID, err)
	}
	return es, nil
}

// DeleteInterview implements Store.
func (p *Postgres) DeleteInterview(ctx context.Context, id string) error {
	tag, err := dbtx.Q(ctx, p.pool).Exec(ctx, `UPDATE `+p.t("interviews")+` SET deleted_at = now(), updated_at = now() WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("delete interview %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("delete interview %s: %w", id, ErrUnknownInterview)
	}
	return nil
}

func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

// nonNil makes a nil slice encode as [] (the columns are NOT NULL arrays).
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
