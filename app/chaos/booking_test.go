package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/eventpipe/eventpipe/app/broker/postgres"
	"github.com/eventpipe/eventpipe/handlers/booking"
)

// bookingFlow is the booking FIFO spec: a foreign client publishes
// sessions × perSession booking-session events straight to
// booking-session-events.fifo (raw amqp091-go on RabbitMQ, the AWS SDK
// with MessageGroupId = the session and MessageDeduplicationId = the event
// id on SQS, eventpipe's Postgres broker publisher on Postgres), one serve
// process (the spec's one consumer) applies them, and booking_session_events
// shows, per session in applied order (seq), whether each arrived once and
// in publish order.
type bookingFlow struct {
	runID string
	base  time.Time

	mu   sync.Mutex
	sent map[string]bool // event ids the broker confirmed
	// confirmed lists the confirmed events, for the duplicates fault.
	confirmed []bookingSent
	// dupPub re-sends them (the duplicator's own client); dupN numbers
	// the re-sends.
	dupPub foreignPublisher
	dupN   int
	// poison are the ids the poison messages may carry in the DLQ.
	poison []string

	publishErrors atomic.Int64
	lastErr       error
	pgBroker      *postgres.PubSub
}

func (b *bookingFlow) title() string { return "booking FIFO" }

func (b *bookingFlow) start(ctx context.Context, r *flowRun) error {
	b.runID = strings.ToLower(watermill.NewShortUUID())
	b.base = time.Now().UTC().Truncate(time.Millisecond)
	b.sent = map[string]bool{}
	r.consumer = r.addProcess("consumer", r.serveEnv("EVENTPIPE_BOOKING_ENABLED=true", "EVENTPIPE_OUTBOX_RELAY=false"))
	if err := r.startAll(ctx); err != nil {
		return err
	}
	if r.kind == "postgres" {
		var err error
		b.pgBroker, err = postgres.New(ctx, postgres.Config{DSN: r.sc.pgDirect, Schema: r.sc.schema, AutoInitializeSchema: true, MaxPublishConns: r.m.producers}, watermill.NopLogger{})
		return err
	}
	return nil
}

func (b *bookingFlow) close() {
	if b.dupPub != nil {
		b.dupPub.close()
	}
	if b.pgBroker != nil {
		_ = b.pgBroker.Close()
	}
}

func (b *bookingFlow) faultKinds(r *flowRun) []string {
	k := []string{FaultKillConsumer, FaultSIGTERM, FaultCut, FaultStall}
	if r.kind != "postgres" {
		k = append(k, FaultDBCut)
	}
	return k
}

// bookingSent is one confirmed event: session k's event seq.
type bookingSent struct{ session, seq int }

// resend is the duplicates fault: n confirmed events, picked at random, are
// published again with their eventId. On SQS each re-send gets a
// MessageDeduplicationId of its own: one inside SQS's 5-minute window would
// be dropped by SQS itself and test nothing of eventpipe (a producer
// retrying after the window looks exactly like this).
func (b *bookingFlow) resend(ctx context.Context, r *flowRun, n int) (int, error) {
	if b.dupPub == nil {
		pub, err := newForeignPublisher(r, b.pgBroker)
		if err != nil {
			return 0, err
		}
		b.dupPub = pub
	}
	b.mu.Lock()
	picks := make([]bookingSent, 0, n)
	for range n {
		if len(b.confirmed) == 0 {
			break
		}
		picks = append(picks, b.confirmed[r.randIntN(len(b.confirmed))])
	}
	b.mu.Unlock()
	sent := 0
	var last error
	for _, p := range picks {
		ev, body, err := b.event(p.session, p.seq)
		if err != nil {
			return sent, err
		}
		m := bookingMessage(ev.BookingSessionID, ev.EventID, body)
		if r.kind == "sqs" {
			b.dupN++
			m.DedupID = fmt.Sprintf("dup-%d-%s", b.dupN, ev.EventID)
		}
		if _, ok := sendConfirmed(ctx, b.dupPub, bookingDest, m, func(err error) { last = err }); ok {
			sent++
		}
	}
	return sent, last
}

func (b *bookingFlow) session(k int) string { return fmt.Sprintf("chaos-%s-s%04d", b.runID, k) }

// event is session k's i-th event; data.seq is its publish position.
func (b *bookingFlow) event(k, i int) (booking.Event, []byte, error) {
	ev := booking.Event{
		BookingSessionID: b.session(k), Type: booking.TypeStepCompleted,
		OccurredAt: b.base.Add(time.Duration(i) * time.Millisecond), StepID: fmt.Sprintf("step-%d", i),
		Data: json.RawMessage(fmt.Sprintf(`{"seq":%d}`, i)),
	}
	id, err := booking.DeriveEventID(ev)
	if err != nil {
		return ev, nil, err
	}
	ev.EventID = id
	body, err := booking.Encode(ev)
	return ev, body, err
}

// dest is the booking queue, through the default exchange on RabbitMQ.
var bookingDest = foreignDest{Queue: booking.Queue}

// message is event body's foreign message: its id as message id and
// deduplication id, its session as the FIFO group.
func bookingMessage(session, id string, body []byte) foreignMsg {
	return foreignMsg{ID: id, Group: session, DedupID: id, Body: body}
}

// produce publishes round i of every session, then the poison, from
// m.producers goroutines that each own every m.producers-th session (so a
// session's events leave in order), spread until until in bursts.
func (b *bookingFlow) produce(ctx context.Context, r *flowRun, until time.Time) {
	total := r.m.sessions * r.m.perSession
	interval := time.Until(until) / time.Duration(total)
	start := time.Now()
	var wg sync.WaitGroup
	for g := range r.m.producers {
		wg.Go(func() {
			pub, err := newForeignPublisher(r, b.pgBroker)
			if err != nil {
				b.fail(err)
				r.note("producer %d: %v", g, err)
				return
			}
			defer pub.close()
			for i := range r.m.perSession {
				for k := g; k < r.m.sessions; k += r.m.producers {
					if !sleep(ctx, time.Until(r.m.due(start, i*r.m.sessions+k, interval))) {
						return
					}
					ev, body, err := b.event(k, i)
					if err != nil {
						b.fail(err)
						continue
					}
					if _, ok := sendConfirmed(ctx, pub, bookingDest, bookingMessage(b.session(k), ev.EventID, body), b.fail); ok {
						b.mu.Lock()
						b.sent[ev.EventID] = true
						b.confirmed = append(b.confirmed, bookingSent{session: k, seq: i})
						b.mu.Unlock()
					}
				}
			}
		})
	}
	wg.Wait()
	// The poison goes after everything: on RabbitMQ and Postgres the route
	// holds a failing delivery for its in-process retries (about 30 s) and
	// every session waits behind it, so a poison sent earlier would keep
	// the traffic from flowing while the faults are injected.
	if r.m.bookingPoison > 0 {
		if pub, err := newForeignPublisher(r, b.pgBroker); err != nil {
			b.fail(err)
		} else {
			for i := range r.m.bookingPoison {
				b.publishPoison(ctx, pub, i)
			}
			pub.close()
		}
	}
	b.mu.Lock()
	n := len(b.sent)
	b.mu.Unlock()
	if n < total {
		r.short(n, total, "events confirmed")
	}
}

// publishPoison sends an event without eventId in a session of its own:
// the consumer never synthesises one, so it fails until max and reaches
// the DLQ after 5 attempts.
func (b *bookingFlow) publishPoison(ctx context.Context, pub foreignPublisher, i int) {
	id := fmt.Sprintf("chaos-poison-%s-%d", b.runID, i)
	body := fmt.Sprintf(`{"bookingSessionId":"chaos-%s-poison-%d","type":"step-completed","occurredAt":%q}`,
		b.runID, i, b.base.Format("2006-01-02T15:04:05.000Z"))
	brokerID, ok := sendConfirmed(ctx, pub, bookingDest, bookingMessage(fmt.Sprintf("chaos-%s-poison-%d", b.runID, i), id, []byte(body)), b.fail)
	if !ok {
		return
	}
	b.mu.Lock()
	b.poison = append(b.poison, id)
	if brokerID != "" && brokerID != id {
		b.poison = append(b.poison, brokerID)
	}
	b.mu.Unlock()
}

func (b *bookingFlow) fail(err error) {
	b.publishErrors.Add(1)
	b.mu.Lock()
	b.lastErr = err
	b.mu.Unlock()
}

func (b *bookingFlow) poisonSent() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, id := range b.poison {
		if strings.HasPrefix(id, "chaos-poison-") {
			n++
		}
	}
	return n
}

func (b *bookingFlow) settled(ctx context.Context, r *flowRun) (bool, string) {
	b.mu.Lock()
	sent := len(b.sent)
	b.mu.Unlock()
	var applied int
	if err := r.sc.pool.QueryRow(ctx, `SELECT count(*) FROM `+r.sc.table("booking_session_events")).Scan(&applied); err != nil {
		return false, err.Error()
	}
	dead, err := r.dlqDepth(ctx, booking.DLQ)
	if err != nil {
		return false, err.Error()
	}
	return applied >= sent && dead >= b.poisonSent(),
		fmt.Sprintf("%d of %d events applied, %d in %s (%d poison sent)", applied, sent, dead, booking.DLQ, b.poisonSent())
}

func (b *bookingFlow) count(ctx context.Context, r *flowRun, row *Row) []string {
	var ev []string
	b.mu.Lock()
	sent := make(map[string]bool, len(b.sent))
	for id := range b.sent {
		sent[id] = true
	}
	poison := append([]string(nil), b.poison...)
	if n := b.publishErrors.Load(); n > 0 {
		ev = append(ev, fmt.Sprintf("publisher: %d failed publishes retried, last: %v", n, b.lastErr))
	}
	b.mu.Unlock()
	row.Sent, row.PoisonSent = len(sent), b.poisonSent()

	rows, err := r.sc.pool.Query(ctx, `SELECT event_id, booking_session_id, (data->>'seq')::int, seq FROM `+
		r.sc.table("booking_session_events")+` ORDER BY booking_session_id, seq`)
	if err != nil {
		return append(ev, "count: "+err.Error())
	}
	applied := map[string]bool{}
	var (
		session    string
		highest    int
		outOfOrder int
		orderLines []string
		unsent     int
	)
	for rows.Next() {
		var id, sid string
		var pos *int
		var seq int64
		if err := rows.Scan(&id, &sid, &pos, &seq); err != nil {
			rows.Close()
			return append(ev, "count: "+err.Error())
		}
		applied[id] = true
		if !sent[id] {
			unsent++
		}
		if pos == nil {
			continue
		}
		if sid != session {
			session, highest = sid, -1
		}
		if *pos < highest {
			outOfOrder++
			if len(orderLines) < 5 {
				orderLines = append(orderLines, fmt.Sprintf("%s: event %d applied (seq %d) after event %d", sid, *pos, seq, highest))
			}
			continue
		}
		highest = *pos
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		ev = append(ev, "count: "+err.Error())
	}
	row.OutOfOrder = outOfOrder
	if outOfOrder > 0 {
		ev = append(ev, fmt.Sprintf("out of order: %d events; e.g. %s", outOfOrder, strings.Join(orderLines, "; ")))
	}
	if unsent > 0 {
		ev = append(ev, fmt.Sprintf("%d events applied that the publisher never had confirmed (a publish that failed ambiguously)", unsent))
	}
	var lostIDs []string
	for id := range sent {
		if applied[id] {
			row.Effects++
		} else {
			lostIDs = append(lostIDs, id)
		}
	}
	row.Lost = len(lostIDs)
	for i, id := range lostIDs {
		if i == 5 {
			break
		}
		line := "lost " + id
		if logs := grepLogs(r.dir, id, 3); len(logs) > 0 {
			line += "; logs: " + strings.Join(logs, " | ")
		} else {
			line += "; no log line names it"
		}
		ev = append(ev, line)
	}

	dups, dupSample := duplicates(ctx, r)
	row.Duplicated = dups
	if dups > 0 {
		ev = append(ev, fmt.Sprintf("duplicated effects: %d extra applications; e.g. %s", dups, strings.Join(dupSample, "; ")))
	}

	depth, err := r.dlqDepth(ctx, booking.DLQ)
	if err != nil {
		ev = append(ev, "DLQ depth: "+err.Error())
	}
	row.DLQDepth = depth
	if depth == 0 && row.PoisonSent > 0 {
		ev = append(ev, missingPoison(r, nil, poison)...)
	}
	if depth > 0 {
		dls, err := r.peekDLQ(ctx, booking.DLQ, depth+20, "EVENTPIPE_BOOKING_ENABLED=true")
		if err != nil {
			ev = append(ev, "DLQ peek: "+err.Error())
		}
		row.DeadExpected, row.DeadOther = classify(dls, poison)
		if row.DeadExpected < row.PoisonSent {
			ev = append(ev, missingPoison(r, dls, poison)...)
		}
		if row.DeadOther > 0 {
			ev = append(ev, "dead-lettered events that were valid: "+strings.Join(deadSample(dls, poison, 3), "; "))
		}
		if len(dls) != depth {
			ev = append(ev, fmt.Sprintf("the DLQ holds %d messages, dlq peek showed %d distinct ids (it stops at an id seen before): a message was dead-lettered more than once; %s",
				depth, len(dls), strings.Join(deadLetteredLines(r.dir, 4), " | ")))
		}
	}
	if r.kind == "sqs" && row.DeadExpected < row.PoisonSent {
		ev = append(ev, "the SQS queue's redrive policy: "+sqsAttribute(ctx, r.sc.sqsEndpoint, booking.Queue, types.QueueAttributeNameRedrivePolicy))
	}
	if n := countLogMsg(r.dir, "duplicate booking-session event, acknowledged without effect"); n > 0 {
		ev = append(ev, fmt.Sprintf("redeliveries the inbox absorbed (duplicate booking-session event, acknowledged without effect): %d", n))
	}
	return ev
}
