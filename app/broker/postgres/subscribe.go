package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventpipe/eventpipe/app/broker"
)

// Subscribe starts a subscription that competes with every other subscriber
// of topic. The channel closes when ctx ends or the PubSub closes. Each
// message must be acked or nacked before the next one arrives.
func (p *PubSub) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if err := p.schema.checkTopic(topic); err != nil {
		return nil, err
	}
	if p.isClosed() {
		return nil, ErrClosed
	}
	if p.cfg.AutoInitializeSchema {
		if err := p.ensureTable(ctx, topic); err != nil {
			return nil, err
		}
	} else if err := p.checkTable(ctx, topic); err != nil {
		return nil, err
	}

	sub := &subscription{
		topic:           topic,
		schema:          p.schema,
		claimSQL:        p.schema.claimSQL(topic, p.cfg.OrderedQueues[topic]),
		settleSQL:       p.schema.settleSQL(topic),
		pool:            p.consumePool,
		batchSize:       p.cfg.batchSizeOf(topic),
		deadline:        p.cfg.ackDeadlineOf(topic),
		pollInterval:    p.cfg.PollInterval,
		retryInterval:   p.cfg.RetryInterval,
		redeliveryDelay: p.cfg.RedeliveryDelay,
		logger:          p.logger.With(watermill.LogFields{"topic": topic}),
		out:             make(chan *message.Message),
		closing:         p.closing,
	}
	ctx, cancel := context.WithCancel(ctx)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		cancel()
		return nil, ErrClosed
	}
	p.subs[sub] = cancel
	p.running.Add(1)
	p.mu.Unlock()

	go func() {
		defer p.running.Done()
		defer p.forget(sub)
		defer close(sub.out)
		sub.run(ctx)
	}()
	return sub.out, nil
}

func (p *PubSub) forget(sub *subscription) {
	p.mu.Lock()
	cancel := p.subs[sub]
	delete(p.subs, sub)
	p.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// subscription is one Subscribe call's loop: claim a batch, hand its messages
// out one at a time, settle them, claim again.
type subscription struct {
	topic  string
	schema queueSchema
	pool   *pgxpool.Pool
	// claimSQL and settleSQL are the topic's statements, built once.
	claimSQL, settleSQL string

	batchSize       int
	deadline        time.Duration
	pollInterval    time.Duration
	retryInterval   time.Duration
	redeliveryDelay time.Duration

	logger watermill.LoggerAdapter
	out    chan *message.Message
	// closing is the PubSub's: it ends when Close is called.
	closing context.Context

	// msgBase is the parent of every delivered message's context: the
	// subscription's values, ended by Close only.
	msgBase context.Context
	// timer serves every delivery in turn (one at a time).
	timer *time.Timer
}

// claimedRow is a row this subscription has claimed.
type claimedRow struct {
	offset int64
	// token is the row's attempts as this claim set it; settlements match
	// it, so that they never touch a claim that is not this one.
	token int64
	msg   *message.Message
}

func (sub *subscription) run(ctx context.Context) {
	// Messages' contexts keep the subscription's values but not its end
	// (a handler finishing after intake stopped must still settle what it
	// has done); Close ends them.
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	stopOnClose := context.AfterFunc(sub.closing, cancelBase)
	defer stopOnClose()
	sub.msgBase = base
	sub.timer = time.NewTimer(time.Hour)
	sub.timer.Stop()

	// pending are the settlements of the last batch, applied with the next
	// claim.
	var pending []settlement
	defer func() { sub.flush(&held{settled: pending}) }()
	for ctx.Err() == nil {
		rows, leaseEnd, err := sub.claim(ctx, pending)
		pending = nil
		switch {
		case ctx.Err() != nil:
			// The subscription stopped while it claimed: work gives the
			// rows back.
		case err != nil:
			sub.logger.Error("Claiming messages failed", err, nil)
			sleep(ctx, sub.retryInterval)
			continue
		case len(rows) == 0:
			sleep(ctx, sub.pollInterval)
			continue
		}
		h := &held{rows: rows, leaseEnd: leaseEnd}
		stalled := sub.work(ctx, h)
		if stalled || ctx.Err() != nil {
			sub.flush(h)
		} else {
			pending = h.settled
		}
		if stalled {
			sleep(ctx, sub.pollInterval)
		}
	}
}

// claim applies pending and claims up to batchSize rows, in offset order,
// and returns when their lease ends by this clock. Both statements go in one
// round trip and commit together (a pgx batch is one implicit transaction),
// and the claim's rows are handed out only once that commit is confirmed: a
// batch costs one commit, its acks riding with the next claim. When the
// round trip fails, pending is settled on its own, retried. The statements do
// not stop when ctx ends: a claim cut off after it committed would leave its
// rows counted and claimed, unseen, for a whole lease; run to its end, it is
// given back.
func (sub *subscription) claim(ctx context.Context, pending []settlement) ([]claimedRow, time.Time, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	var (
		b       pgx.Batch
		claimed []claimedRow
	)
	if len(pending) > 0 {
		b.Queue(sub.settleSQL, settleArgs(pending)...)
	}
	b.Queue(sub.claimSQL, claimArgs(sub.batchSize, sub.deadline)...).Query(func(rows pgx.Rows) error {
		// Scanned into the same variables row after row (pgx gives every
		// row its own payload, metadata, uuid and time).
		var (
			r                 claimedRow
			uuid              string
			payload, md       []byte
			earlier           int64
			firstFailedAtTime *time.Time
		)
		dest := []any{&r.offset, &uuid, &payload, &md, &earlier, &firstFailedAtTime, &r.token}
		for rows.Next() {
			if err := rows.Scan(dest...); err != nil {
				return fmt.Errorf("scan row: %w", err)
			}
			if claimed == nil { // an idle poll allocates no batch
				claimed = make([]claimedRow, 0, sub.batchSize)
			}
			r.msg = sub.schema.deliveredMessage(r.offset, uuid, payload, md, earlier, firstFailedAtTime)
			claimed = append(claimed, r)
		}
		return rows.Err()
	})
	sent := time.Now()
	// Close reads every result and the end of the implicit transaction.
	if err := sub.pool.SendBatch(ctx, &b).Close(); err != nil {
		if len(pending) > 0 {
			sub.flush(&held{settled: pending})
		}
		return nil, time.Time{}, fmt.Errorf("claim: %w", err)
	}
	slices.SortFunc(claimed, func(a, b claimedRow) int { return cmp.Compare(a.offset, b.offset) })
	return claimed, sent.Add(sub.deadline), nil
}

// leaseSlack is how much of a lease may be used up before a message is handed
// out under it: a delivered message starts with between deadline-leaseSlack
// and deadline of lease, and a batch renews its lease before handing out a
// message when its messages have taken more than leaseSlack in all (never
// with fast handlers, at most once per message with slow ones).
func (sub *subscription) leaseSlack() time.Duration {
	return min(sub.deadline/10, time.Second)
}

// renewalAge is how old a lease may get while a delivered message is
// handled before the heartbeat renews it: a third of the deadline, so that
// every renewal is sent before half of the lease has passed, with the rest
// left for the statement (and its retries) and for clock slack.
func (sub *subscription) renewalAge() time.Duration { return sub.deadline / 3 }

// held is what a subscription holds of one claim.
type held struct {
	// rows are the claimed rows not yet handed out, in offset order; while a
	// message is delivered, it is rows[0].
	rows []claimedRow
	// settled are the settlements not yet applied.
	settled []settlement
	// leaseEnd is when the lease of every claimed row ends, by this clock.
	leaseEnd time.Time
}

// work hands the claimed rows out one at a time and settles them when the
// lease must be renewed and while a slow handler runs (so that what was
// settled before it does not outlive its lease); what is settled at the end
// of the batch is left in h.settled for the caller to apply (with the next
// claim). The rows it has not delivered when the subscription stops are
// given back, uncounted, and so are they when the consumer does not take a
// message within the lease slack: stalled, a consumer that no longer reads
// its channel (without cancelling the subscription) leaves its rows to
// others instead of renewing their lease for as long as it stalls, and the
// subscription claims again a poll interval later.
func (sub *subscription) work(ctx context.Context, h *held) (stalled bool) {
	for len(h.rows) > 0 && ctx.Err() == nil {
		if time.Until(h.leaseEnd) < sub.deadline-sub.leaseSlack() {
			if ok, _ := sub.renew(h, -1); !ok {
				break
			}
			continue
		}
		st, taken := sub.deliver(ctx, h)
		if !taken {
			stalled = ctx.Err() == nil
			break
		}
		if len(h.rows) > 0 && h.rows[0].offset == st.row.offset {
			h.rows = h.rows[1:]
		}
		if st.action != "" {
			h.settled = append(h.settled, st)
		}
	}
	for _, r := range h.rows {
		h.settled = append(h.settled, settlement{row: r, action: giveBack})
	}
	h.rows = nil
	return stalled
}

// flush applies what h has settled.
func (sub *subscription) flush(h *held) {
	if _, _, err := sub.settle(h.settled, time.Now().Add(settleTimeout)); err != nil {
		sub.logger.Error("Settling messages failed; their rows come back when their lease ends", err, nil)
	}
	h.settled = nil
}

// renew applies what h has settled and extends the lease of its rows, all in
// one statement, retried until the lease ends. The rows it no longer holds
// (another subscriber claimed them after their lease ran out) are dropped
// from h, with a log line. ok is false when the database could not be
// reached: h is left as it was, its rows come back when their lease ends.
// kept tells whether the row at offset delivered, if any, is still held.
func (sub *subscription) renew(h *held, delivered int64) (ok, kept bool) {
	ss := slices.Clip(h.settled)
	for _, r := range h.rows {
		ss = append(ss, settlement{row: r, action: renew, delay: sub.deadline})
	}
	renewed, leaseEnd, err := sub.settle(ss, h.leaseEnd)
	if err != nil {
		sub.logger.Error("Renewing the claim failed; its rows come back when their lease ends unless a renewal succeeds before", err, nil)
		return false, true
	}
	h.settled, h.leaseEnd = nil, leaseEnd
	kept = delivered < 0
	rows := h.rows[:0]
	for _, r := range h.rows {
		switch {
		case renewed[r.offset]:
			rows = append(rows, r)
			kept = kept || r.offset == delivered
		case r.offset == delivered:
			sub.logger.Error("Lease of a message being handled lost to another subscriber; it will be delivered again", nil,
				watermill.LogFields{"message_uuid": r.msg.UUID, "offset": r.offset})
		default:
			// Its lease had run out and another subscriber claimed it.
			sub.logger.Info("Claimed message lost to another subscriber before delivery", watermill.LogFields{"message_uuid": r.msg.UUID})
		}
	}
	h.rows = rows
	return true, kept
}

// giveBackRest applies what h has settled and gives back its rows but the
// one being delivered, in one statement: they should not wait behind a
// handler that is past its deadline.
func (sub *subscription) giveBackRest(h *held) {
	if len(h.rows) < 2 && len(h.settled) == 0 {
		return
	}
	for _, r := range h.rows[1:] {
		h.settled = append(h.settled, settlement{row: r, action: giveBack})
	}
	h.rows = h.rows[:1]
	sub.flush(h)
}

// deliver hands h.rows[0]'s message to the consumer and waits for its ack or
// nack. taken is false when the consumer did not take the message within the
// lease slack, or the subscription stopped.
//
// While it waits, a heartbeat renews the lease of every row h holds (and
// applies what h has settled) whenever the lease is a third of the deadline
// old, so another subscriber never gets a message whose handler is still at
// work. It stops renewing while the handler is past the deadline of its
// attempt (broker.StartAttempt, which the Timeout middleware calls), and
// gives the rest of the batch back: the lease then runs out and the message
// goes to another subscriber. When the lease ends (renewals stopped or
// failed) or is lost (the row was claimed by another subscriber), the
// message's context is cancelled and deliver returns without a settlement.
// While a handler runs longer than the lease slack, what the batch settled
// before it is applied.
func (sub *subscription) deliver(ctx context.Context, h *held) (_ settlement, taken bool) {
	r := h.rows[0]
	// A subscription that stops (shutdown stops intake first) does not cut
	// the handler short: a handler finishing then must still settle what it
	// has done. Only Close or the end of the lease does.
	msgCtx, cancel := context.WithCancel(sub.msgBase)
	defer cancel() // the message's context ends with its settlement
	msgCtx, clock := broker.WithAttemptClock(msgCtx)
	r.msg.SetContext(msgCtx)
	// Taken later, the message would have less than its time.
	timer := sub.timer
	defer timer.Stop()
	timer.Reset(time.Until(h.leaseEnd.Add(-(sub.deadline - sub.leaseSlack()))))
	select {
	case sub.out <- r.msg:
	case <-timer.C:
		return settlement{}, false
	case <-ctx.Done():
		return settlement{}, false
	}

	flushAt := time.Now().Add(sub.leaseSlack())
	renewAt := h.leaseEnd.Add(-sub.deadline + sub.renewalAge())
	overdue := false
	lost := false
wait:
	for {
		next := earliest(h.leaseEnd, renewAt)
		if !flushAt.IsZero() {
			next = earliest(next, flushAt)
		}
		timer.Reset(time.Until(next))
		select {
		case <-r.msg.Acked():
			break wait
		case <-r.msg.Nacked():
			break wait
		case <-msgCtx.Done():
			break wait
		case now := <-timer.C:
			if !now.Before(h.leaseEnd) {
				break wait
			}
			if !flushAt.IsZero() && !now.Before(flushAt) {
				flushAt = time.Time{}
				if len(h.settled) > 0 {
					sub.flush(h)
				}
			}
			if now.Before(renewAt) {
				continue
			}
			if clock.Overdue(now) {
				if !overdue {
					overdue = true
					sub.logger.Info("Handler past its deadline: its message's lease is no longer renewed, it will be delivered again",
						watermill.LogFields{"message_uuid": r.msg.UUID, "lease_end": h.leaseEnd})
					sub.giveBackRest(h)
				}
				// Checked again: a handler that returns late, or the
				// policy's next attempt, renews again while it can.
				renewAt = now.Add(sub.deadline / 10)
				continue
			}
			overdue = false
			ok, kept := sub.renew(h, r.offset)
			if !kept {
				lost = true
				break wait
			}
			if !ok {
				renewAt = now.Add(sub.deadline / 10)
				continue
			}
			renewAt = h.leaseEnd.Add(-sub.deadline + sub.renewalAge())
		}
	}
	// An ack or nack that came with the end of the context still counts.
	if !lost {
		select {
		case <-r.msg.Acked():
			return settlement{row: r, action: ack}, true
		case <-r.msg.Nacked():
			// The delay is read from the message, where the retry middleware
			// set it before nacking.
			n := nackOf(r.msg)
			delay := sub.redeliveryDelay
			if n.requested {
				delay = n.delay
			}
			return settlement{row: r, action: nackIt, delay: delay}, true
		default:
		}
	}
	cancel()
	switch {
	case lost:
		// Logged by renew; the row is another subscriber's now.
	case sub.closing.Err() != nil:
		// Close: the row goes back at once.
		return settlement{row: r, action: release}, true
	default:
		// The lease has ended, the row is anyone's again.
		sub.logger.Info("Message not acked or nacked before its lease ended; it will be delivered again",
			watermill.LogFields{"message_uuid": r.msg.UUID, "ack_deadline": sub.deadline, "handler_overdue": overdue})
	}
	return settlement{row: r}, true
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
