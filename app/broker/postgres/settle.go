package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/jackc/pgx/v5"
)

// settleTimeout bounds how long a subscription keeps trying to settle rows
// while the database fails. After that the rows are left to their lease: they
// come back when it ends, the acked ones included.
const settleTimeout = 15 * time.Second

// action is what a settlement does with a claimed row.
type action string

const (
	// ack deletes the row.
	ack action = "ack"
	// nackIt makes the row available after the settlement's delay, ends the
	// claim and stamps the failure times.
	nackIt action = "nack"
	// release makes a delivered row available at once and ends the claim (a
	// delivery that Close or the subscription's context ended): its attempt
	// counts.
	release action = "release"
	// giveBack releases a row that was claimed and never delivered, and takes
	// its attempt back: nobody tried it.
	giveBack action = "give-back"
	// renew extends the claim's lease by the settlement's delay, from now.
	renew action = "renew"
)

// settlement is one action on one claimed row.
type settlement struct {
	row    claimedRow
	action action
	// delay is a nack's redelivery delay or a renewal's lease.
	delay time.Duration
}

// settleSQL applies settlements in one statement, its parameters
// settleArgs. Every row is matched by its offset and by its claim's count
// (the token): a row whose lease ran out and that another subscriber has
// claimed since is left alone, and running the statement twice (a retry
// after a lost answer) changes nothing more. It returns the offsets it
// renewed. A subscription builds the text once.
func (s queueSchema) settleSQL(topic string) string {
	table := s.table(topic)
	return `WITH s AS (
				SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::bigint[]) AS s(off, token, action, delay_us)
			), acked AS (
				DELETE FROM ` + table + ` AS q USING s
				WHERE q."offset" = s.off AND q.attempts = s.token AND s.action = 'ack'
			)
			UPDATE ` + table + ` AS q
			SET attempts = q.attempts - CASE WHEN s.action = 'give-back' THEN 1 ELSE 0 END,
				available_at = statement_timestamp() + s.delay_us * interval '1 microsecond',
				claimed_until = CASE WHEN s.action = 'renew' THEN statement_timestamp() + s.delay_us * interval '1 microsecond' END,
				first_failed_at = CASE WHEN s.action = 'nack' THEN coalesce(q.first_failed_at, clock_timestamp()) ELSE q.first_failed_at END,
				last_failed_at = CASE WHEN s.action = 'nack' THEN clock_timestamp() ELSE q.last_failed_at END
			FROM s
			WHERE q."offset" = s.off AND q.attempts = s.token AND s.action <> 'ack'
			RETURNING q."offset", s.action = 'renew'`
}

// settleArgs are the parameters of settleSQL for ss.
func settleArgs(ss []settlement) []any {
	offsets := make([]int64, len(ss))
	tokens := make([]int64, len(ss))
	actions := make([]string, len(ss))
	delays := make([]int64, len(ss))
	for i, st := range ss {
		offsets[i], tokens[i], actions[i], delays[i] = st.row.offset, st.row.token, string(st.action), st.delay.Microseconds()
	}
	return []any{offsets, tokens, actions, delays}
}

// settle applies ss, retrying while the database fails, until giveUp. It
// does not follow the subscription's context: the acks and
// nacks a subscription got before it was stopped are still settled, and its
// undelivered rows given back. It returns the offsets still claimed after
// the renewals in ss, and when their lease ends by this clock (no later than
// by the database's, which started it after this process sent the
// statement).
func (sub *subscription) settle(ss []settlement, giveUp time.Time) (renewed map[int64]bool, leaseEnd time.Time, err error) {
	if len(ss) == 0 {
		return nil, time.Time{}, nil
	}
	args := settleArgs(ss)
	for attempt := 1; ; attempt++ {
		sent := time.Now()
		ctx, cancel := context.WithDeadline(context.Background(), giveUp)
		renewed, err = sub.exec(ctx, args)
		cancel()
		if err == nil {
			return renewed, sent.Add(sub.deadline), nil
		}
		if time.Until(giveUp) < sub.retryInterval {
			return nil, time.Time{}, fmt.Errorf("settle %d rows (%d attempts): %w", len(ss), attempt, err)
		}
		sub.logger.Error("Settling messages failed, retrying", err, watermill.LogFields{"rows": len(ss), "attempt": attempt})
		time.Sleep(sub.retryInterval)
	}
}

func (sub *subscription) exec(ctx context.Context, args []any) (map[int64]bool, error) {
	rows, err := sub.pool.Query(ctx, sub.settleSQL, args...)
	if err != nil {
		return nil, err
	}
	renewed := map[int64]bool{}
	var (
		offset    int64
		isRenewal bool
	)
	_, err = pgx.ForEachRow(rows, []any{&offset, &isRenewal}, func() error {
		if isRenewal {
			renewed[offset] = true
		}
		return nil
	})
	return renewed, err
}
