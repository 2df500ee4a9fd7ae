package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	"github.com/eventpipe/eventpipe/app/broker/postgres"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/handlers/disputes"
)

// disputesFlow is the disputes outbox spec end to end: the harness is the
// producer (the disputes store's RaiseDispute / FlagTransaction: business
// row and outbox row in one transaction), two serve processes run the
// events-worker on domain-events and one of them the outbox relay. One
// event's effect is one row: DisputeRaised → dispute_reminders,
// TransactionFlagged → review_queue.
type disputesFlow struct {
	store  *disputes.Postgres
	runID  string
	poison []string

	producerErrors atomic.Int64
	mu             sync.Mutex
	lastErr        error

	// dupPub re-sends published events (the duplicates fault); pgBroker is
	// its Postgres broker on the Postgres runs.
	dupPub   foreignPublisher
	pgBroker *postgres.PubSub
}

func (d *disputesFlow) title() string { return "disputes outbox" }

func (d *disputesFlow) start(ctx context.Context, r *flowRun) error {
	d.runID = strings.ToLower(watermill.NewShortUUID())
	var err error
	if d.store, err = disputes.NewPostgres(r.sc.pool, r.sc.schema, ""); err != nil {
		return err
	}
	r.relay = r.addProcess("relay", r.serveEnv("EVENTPIPE_DISPUTES_ENABLED=true", "EVENTPIPE_OUTBOX_RELAY=true"))
	r.consumer = r.addProcess("consumer", r.serveEnv("EVENTPIPE_DISPUTES_ENABLED=true", "EVENTPIPE_OUTBOX_RELAY=false"))
	return r.startAll(ctx)
}

func (d *disputesFlow) faultKinds(r *flowRun) []string {
	k := []string{FaultKillConsumer, FaultKillRelay, FaultSIGTERM, FaultCut, FaultStall}
	if r.kind != "postgres" {
		k = append(k, FaultDBCut)
	}
	return k
}

func (d *disputesFlow) close() {
	if d.dupPub != nil {
		d.dupPub.close()
	}
	if d.pgBroker != nil {
		_ = d.pgBroker.Close()
	}
}

// resend is the duplicates fault: n published outbox rows, picked at
// random, are published again by a foreign client straight to
// domain-events with their event id (message id, the event_id attribute /
// header, the body's event_id) and trace id: what a relay that lost its
// "published" mark, or a producer replaying its log, does.
func (d *disputesFlow) resend(ctx context.Context, r *flowRun, n int) (int, error) {
	if d.dupPub == nil {
		if r.kind == "postgres" {
			ps, err := postgres.New(ctx, postgres.Config{DSN: r.sc.pgDirect, Schema: r.sc.schema, AutoInitializeSchema: true}, watermill.NopLogger{})
			if err != nil {
				return 0, err
			}
			d.pgBroker = ps
		}
		pub, err := newForeignPublisher(r, d.pgBroker)
		if err != nil {
			return 0, err
		}
		d.dupPub = pub
	}
	rows, err := r.sc.pool.Query(ctx, `SELECT event_id, payload, coalesce(metadata->>'`+metadata.TraceIDKey+`', '')
		FROM `+r.sc.table("outbox")+` WHERE published_at IS NOT NULL AND topic = $1 AND NOT (event_id = ANY($3)) ORDER BY random() LIMIT $2`,
		disputes.DomainEventsQueue, n, append([]string{}, d.poison...))
	if err != nil {
		return 0, err
	}
	var msgs []foreignMsg
	for rows.Next() {
		var id, trace string
		var body []byte
		if err := rows.Scan(&id, &body, &trace); err != nil {
			rows.Close()
			return 0, err
		}
		h := map[string]string{disputes.EventIDKey: id}
		if trace != "" {
			h[metadata.TraceIDKey] = trace
		}
		msgs = append(msgs, foreignMsg{ID: id, Body: body, Headers: h})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	sent := 0
	var last error
	for _, m := range msgs {
		if _, ok := sendConfirmed(ctx, d.dupPub, foreignDest{Queue: disputes.DomainEventsQueue}, m, func(err error) { last = err }); ok {
			sent++
		}
	}
	return sent, last
}

// produce writes the poison events first, then m.disputes business changes
// spread until until in bursts, from m.producers goroutines.
func (d *disputesFlow) produce(ctx context.Context, r *flowRun, until time.Time) {
	for i := range r.m.disputePoison {
		id, err := d.writePoison(ctx, r, i)
		if err != nil {
			d.fail(err)
			continue
		}
		d.poison = append(d.poison, id)
	}
	n := r.m.disputes
	start := time.Now()
	interval := time.Until(until) / time.Duration(n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range r.m.producers {
		wg.Go(func() {
			for {
				k := int(next.Add(1) - 1)
				if k >= n || !sleep(ctx, time.Until(r.m.due(start, k, interval))) {
					return
				}
				d.write(ctx, k)
			}
		})
	}
	wg.Wait()
	if k := next.Load(); int(k) < n {
		r.short(int(k), n, "business changes")
	}
}

// write commits business change k, retrying (bounded) what fails. A
// dispute has a fixed id, so a retry after an ambiguous commit finds it
// (ErrExists) instead of raising it twice; what was really committed is
// counted from the tables in the end, not from here.
func (d *disputesFlow) write(ctx context.Context, k int) {
	for attempt := 0; attempt < 30; attempt++ {
		var err error
		if k%2 == 0 {
			_, err = d.store.RaiseDispute(ctx, disputes.Dispute{
				ID:    fmt.Sprintf("dsp_chaos_%s_%07d", d.runID, k),
				TxnID: fmt.Sprintf("txn_chaos_%s_%07d", d.runID, k), ReasonCode: disputes.ReasonFailedButDebited, Rail: disputes.RailUPI,
			})
			if errors.Is(err, disputes.ErrExists) {
				return
			}
		} else {
			_, err = d.store.FlagTransaction(ctx, disputes.Flag{
				TxnID: fmt.Sprintf("txn_chaos_%s_%07d", d.runID, k), RiskScore: float64(k % 100), Reason: "chaos",
			})
		}
		if err == nil {
			return
		}
		d.fail(err)
		if !sleep(ctx, time.Duration(min(200*(attempt+1), 2000))*time.Millisecond) {
			return
		}
	}
}

func (d *disputesFlow) fail(err error) {
	d.producerErrors.Add(1)
	d.mu.Lock()
	d.lastErr = err
	d.mu.Unlock()
}

// writePoison puts a domain event no consumer can handle (an unknown
// event_type: permanent, fail until max → domain-events-dlq after 5
// attempts) in the outbox, as a producer's bug would.
func (d *disputesFlow) writePoison(ctx context.Context, r *flowRun, i int) (string, error) {
	now := time.Now().UTC()
	id := disputes.NewEventID(now)
	body := fmt.Sprintf(`{"event_id":%q,"event_type":"ChaosPoison","event_version":1,"aggregate_type":"dispute","aggregate_id":"dsp_poison_%d",`+
		`"occurred_at":%q,"trace_id":"%032x","payload":{}}`, id, i, now.Format("2006-01-02T15:04:05.000Z"), now.UnixNano())
	msg := message.NewMessage(id, []byte(body))
	msg.Metadata.Set(disputes.EventIDKey, id)
	msg.Metadata.Set(metadata.TraceIDKey, fmt.Sprintf("%032x", now.UnixNano()))
	err := pgx.BeginFunc(ctx, r.sc.pool, func(tx pgx.Tx) error {
		return outbox.Table{Schema: r.sc.schema}.Write(ctx, tx, disputes.DomainEventsQueue, msg)
	})
	return id, err
}

// sentAndEffects are the flow's two counts: the business changes committed
// (each announced by its outbox row) and those with their effect.
func (d *disputesFlow) sentAndEffects(ctx context.Context, r *flowRun) (sent, effects, unpublished int, err error) {
	t := r.sc.table
	err = r.sc.pool.QueryRow(ctx, `
		WITH sent AS (SELECT event_id FROM `+t("disputes")+` UNION ALL SELECT event_id FROM `+t("transaction_flags")+`),
		     eff AS (SELECT event_id FROM `+t("dispute_reminders")+` UNION SELECT event_id FROM `+t("review_queue")+`)
		SELECT (SELECT count(*) FROM sent),
		       (SELECT count(*) FROM sent WHERE event_id IN (SELECT event_id FROM eff)),
		       (SELECT count(*) FROM `+t("outbox")+` WHERE published_at IS NULL)`).Scan(&sent, &effects, &unpublished)
	return sent, effects, unpublished, err
}

func (d *disputesFlow) settled(ctx context.Context, r *flowRun) (bool, string) {
	sent, effects, unpublished, err := d.sentAndEffects(ctx, r)
	if err != nil {
		return false, err.Error()
	}
	dead, err := r.dlqDepth(ctx, disputes.DomainEventsDLQ)
	if err != nil {
		return false, err.Error()
	}
	state := fmt.Sprintf("%d of %d effects, %d outbox rows unpublished, %d in %s (%d poison sent)", effects, sent, unpublished, dead, disputes.DomainEventsDLQ, len(d.poison))
	return effects == sent && dead >= len(d.poison), state
}

func (d *disputesFlow) count(ctx context.Context, r *flowRun, row *Row) []string {
	var ev []string
	t := r.sc.table
	sent, effects, unpublished, err := d.sentAndEffects(ctx, r)
	if err != nil {
		return []string{"count: " + err.Error()}
	}
	row.Sent, row.Effects, row.Lost = sent, effects, sent-effects
	row.PoisonSent = len(d.poison)
	if n := d.producerErrors.Load(); n > 0 {
		d.mu.Lock()
		ev = append(ev, fmt.Sprintf("producer: %d failed writes retried, last: %v", n, d.lastErr))
		d.mu.Unlock()
	}

	// Duplicated effects: an event id whose effect transaction committed
	// more than once.
	dups, dupSample := duplicates(ctx, r)
	row.Duplicated = dups
	if dups > 0 {
		ev = append(ev, fmt.Sprintf("duplicated effects: %d extra applications; e.g. %s", dups, strings.Join(dupSample, "; ")))
	}

	// Where the lost ones are: never published, parked, or published
	// without an effect.
	var parked, missingOutbox int
	if err := r.sc.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM `+t("outbox")+` WHERE parked_at IS NOT NULL),
		(SELECT count(*) FROM (SELECT event_id FROM `+t("disputes")+` UNION ALL SELECT event_id FROM `+t("transaction_flags")+`) s
			WHERE event_id NOT IN (SELECT event_id FROM `+t("outbox")+`))`).Scan(&parked, &missingOutbox); err != nil {
		ev = append(ev, "outbox state: "+err.Error())
	}
	if unpublished > 0 || parked > 0 || missingOutbox > 0 {
		ev = append(ev, fmt.Sprintf("outbox at the end: %d rows unpublished, %d parked, %d business rows without an outbox row", unpublished, parked, missingOutbox))
	}
	if row.Lost > 0 {
		rows, err := r.sc.pool.Query(ctx, `
			SELECT s.event_id, o.published_at IS NOT NULL, o.attempts, o.parked_at IS NOT NULL, coalesce(o.last_error, ''),
			       EXISTS (SELECT 1 FROM `+t("processed_messages")+` p WHERE p.message_id = s.event_id)
			FROM (SELECT event_id FROM `+t("disputes")+` UNION ALL SELECT event_id FROM `+t("transaction_flags")+`) s
			LEFT JOIN `+t("outbox")+` o ON o.event_id = s.event_id
			WHERE s.event_id NOT IN (SELECT event_id FROM `+t("dispute_reminders")+` UNION SELECT event_id FROM `+t("review_queue")+`)
			ORDER BY o.id LIMIT 5`)
		if err == nil {
			for rows.Next() {
				var id, lastErr string
				var published, parked, marked bool
				var attempts *int
				if err := rows.Scan(&id, &published, &attempts, &parked, &lastErr, &marked); err != nil {
					ev = append(ev, "lost sample: "+err.Error())
					break
				}
				a := -1
				if attempts != nil {
					a = *attempts
				}
				line := fmt.Sprintf("lost %s: outbox published=%v attempts=%d parked=%v last_error=%q, inbox marker=%v", id, published, a, parked, truncate(lastErr, 160), marked)
				if logs := grepLogs(r.dir, id, 3); len(logs) > 0 {
					line += "; logs: " + strings.Join(logs, " | ")
				} else {
					line += "; no log line names it"
				}
				ev = append(ev, line)
			}
			rows.Close()
		} else {
			ev = append(ev, "lost sample: "+err.Error())
		}
	}

	// Dead letters: the poison expected, anything else is a lost event.
	depth, err := r.dlqDepth(ctx, disputes.DomainEventsDLQ)
	if err != nil {
		ev = append(ev, "DLQ depth: "+err.Error())
	}
	row.DLQDepth = depth
	if depth == 0 && row.PoisonSent > 0 {
		ev = append(ev, missingPoison(r, nil, d.poison)...)
	}
	if depth > 0 {
		dls, err := r.peekDLQ(ctx, disputes.DomainEventsDLQ, depth+20, "EVENTPIPE_DISPUTES_ENABLED=true")
		if err != nil {
			ev = append(ev, "DLQ peek: "+err.Error())
		}
		row.DeadExpected, row.DeadOther = classify(dls, d.poison)
		if row.DeadExpected < row.PoisonSent {
			ev = append(ev, missingPoison(r, dls, d.poison)...)
		}
		if row.DeadOther > 0 {
			ev = append(ev, "dead-lettered events that were valid: "+strings.Join(deadSample(dls, d.poison, 3), "; "))
		}
		if len(dls) != depth {
			ev = append(ev, fmt.Sprintf("the DLQ holds %d messages, dlq peek showed %d distinct ids (it stops at an id seen before): a message was dead-lettered more than once; %s",
				depth, len(dls), strings.Join(deadLetteredLines(r.dir, 4), " | ")))
		}
	}
	if n := countLogMsg(r.dir, "duplicate domain event, acknowledged without effect"); n > 0 {
		ev = append(ev, fmt.Sprintf("redeliveries the inbox absorbed (duplicate domain event, acknowledged without effect): %d", n))
	}
	return ev
}
