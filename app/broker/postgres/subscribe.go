package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventpipe/eventpipe/app/broker"
)

// Subscribe starts a subscription that competes with every other subscriber
// of topic. The channel closes when ctx ends or the PubSub closes. Each
// message must be acked or nacked before the next one arrives, unless ctx
// asks for more at once (broker.WithConcurrency): then up to that many are
// handed out unsettled at once, by up to Config.Workers claim loops (never
// more loops than messages asked for), each holding at most one claim's rows.
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

	// An ordered queue needs no bound of its own: a claim holds at most one
	// row of each group (the head; see claimSQL), and a group's next row is
	// claimable only once its head is settled, whichever loop claimed it.
	batch := p.cfg.batchSizeOf(topic)
	n := broker.ConcurrencyWithin(ctx, batch)
	loops := min(p.cfg.Workers, n)
	out := make(chan *message.Message)
	idle := broker.NewIdleLoops(loops)
	slots := make(chan struct{}, n)
	subs := make([]*subscription, loops)
	for i := range subs {
		subs[i] = &subscription{
			topic:     topic,
			schema:    p.schema,
			claims:    newClaimTexts(p.schema, topic, p.cfg.OrderedQueues[topic], p.cfg.ackDeadlineOf(topic)),
			settleSQL: p.schema.settleSQL(topic),
			pool:      p.consumePool,
			batchSize: batch,
			// The loops share the concurrency asked for (slots): one of
			// them may use all of it.
			concurrency:     n,
			slots:           slots,
			deadline:        p.cfg.ackDeadlineOf(topic),
			pollInterval:    p.cfg.PollInterval,
			retryInterval:   p.cfg.RetryInterval,
			redeliveryDelay: p.cfg.RedeliveryDelay,
			logger:          p.logger.With(watermill.LogFields{"topic": topic}),
			out:             out,
			idle:            idle,
			closing:         p.closing,
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		cancel()
		return nil, ErrClosed
	}
	p.subs[subs[0]] = cancel
	p.running.Add(1)
	p.mu.Unlock()

	go func() {
		defer p.running.Done()
		defer p.forget(subs[0])
		defer close(out)
		var loops sync.WaitGroup
		for _, sub := range subs {
			loops.Go(func() { sub.run(ctx) })
		}
		loops.Wait()
	}()
	return out, nil
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

// subscription is one claim loop of a Subscribe call: claim a batch, hand
// its messages out (concurrency at once), settle them, claim again. A
// Subscribe call runs Config.Workers of them on one channel.
type subscription struct {
	topic  string
	schema queueSchema
	pool   *pgxpool.Pool
	// claims and settleSQL are the topic's statements, built once.
	claims    *claimTexts
	settleSQL string

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
	// timer serves every claim's work in turn.
	timer *time.Timer
	// concurrency is how many messages the subscription hands out
	// unsettled at once, broker.ConcurrencyWithin of its context: one loop
	// may use all of it, slots keeping the loops within it together.
	concurrency int
	// idle parks the loops an idle queue does not need (nil: a loop of its
	// own, the batch reader's).
	idle *broker.IdleLoops
	// slots holds a token per message handed out and not yet settled (or
	// about to be offered), shared by the subscription's loops: they hand
	// out up to its capacity at once between them. Nil: concurrency alone
	// bounds this loop.
	slots chan struct{}
}

// tryAcquireSlot takes a slot for the next offer if one is free.
func (sub *subscription) tryAcquireSlot() bool {
	if sub.slots == nil {
		return true
	}
	select {
	case sub.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// releaseSlot gives back a slot taken by tryAcquireSlot or a wait for one.
func (sub *subscription) releaseSlot() {
	if sub.slots != nil {
		<-sub.slots
	}
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
		rows, leaseEnd, err := sub.claim(ctx, pending, sub.batchSize)
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
			if sub.park(ctx) {
				sleep(ctx, sub.pollInterval)
			}
			continue
		case len(rows) == sub.batchSize:
			// The queue is busy: every loop claims.
			sub.wake()
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

// park is called after a claim that found nothing: the loop waits until
// another finds the queue busy, unless it is the last one polling. It
// reports whether the loop is to poll again after the poll interval (false:
// it was woken, and claims at once, or ctx ended).
func (sub *subscription) park(ctx context.Context) (poll bool) {
	if sub.idle == nil {
		return true
	}
	parked, ok := sub.idle.Park(ctx.Done())
	return ok && !parked
}

// wake is called after a claim that came back full.
func (sub *subscription) wake() {
	if sub.idle != nil {
		sub.idle.Wake()
	}
}

// claim applies pending and claims up to limit rows, in offset order,
// and returns when their lease ends by this clock. Both statements go in one
// round trip and commit together (a pgx batch is one implicit transaction),
// and the claim's rows are handed out only once that commit is confirmed: a
// batch costs one commit, its acks riding with the next claim. When the
// round trip fails, pending is settled on its own, retried. The statements do
// not stop when ctx ends: a claim cut off after it committed would leave its
// rows counted and claimed, unseen, for a whole lease; run to its end, it is
// given back.
func (sub *subscription) claim(ctx context.Context, pending []settlement, limit int) ([]claimedRow, time.Time, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	var (
		b       pgx.Batch
		claimed []claimedRow
	)
	// The batch's commit does not wait for its WAL to reach the disk (the
	// consuming pool's connections run with synchronous_commit off, decision
	// 0039): it only counts attempts, leases rows and settles handled ones,
	// and what a database crash could take back of it is a settlement or a
	// count, never a message — a row comes back and is delivered again.
	// Publishing and the handlers' effects stay durable.
	if len(pending) > 0 {
		b.Queue(sub.settleSQL, settleArgs(pending)...)
	}
	b.Queue(sub.claims.text(limit)).Query(func(rows pgx.Rows) error {
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
				claimed = make([]claimedRow, 0, limit)
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

// leaseSlack is how long a consumer has to take a message on offer before
// the subscription takes it for stalled, and how long settlements wait while
// handlers still run before they are applied on their own.
func (sub *subscription) leaseSlack() time.Duration {
	return min(sub.deadline/10, time.Second)
}

// renewalAge is how old a lease may get while a delivered message is
// handled before the heartbeat renews it, and before a message is handed out
// under it (a batch renews its lease first: never with fast handlers, at
// most once per message with slow ones): a third of the deadline, so that
// every renewal is sent before half of the lease has passed, with the rest
// left for the statement (and its retries) and for clock slack.
func (sub *subscription) renewalAge() time.Duration { return sub.deadline / 3 }

// held is what a subscription holds of one claim.
type held struct {
	// rows are the claimed rows not yet handed out, in offset order.
	rows []claimedRow
	// out are the rows handed out and not yet settled, in hand-out order.
	out []*delivery
	// settled are the settlements not yet applied.
	settled []settlement
	// leaseEnd is when the lease of rows ends, by this clock, and of every
	// delivery in out whose renewals have not stopped.
	leaseEnd time.Time
}

// delivery is a claimed row handed out to the consumer.
type delivery struct {
	row claimedRow
	// ctx is the message's context as handed out (middleware may give the
	// message another one) and cancel ends it.
	ctx    context.Context
	cancel context.CancelFunc
	clock  *broker.AttemptClock
	// leaseEnd is when the row's lease ends by this clock: held.leaseEnd,
	// or earlier when its renewals stopped while its handler was overdue.
	leaseEnd time.Time
	// since is when it was handed out.
	since time.Time
	// overdue: its handler is past the deadline of its attempt, its lease
	// is not renewed.
	overdue bool
	// ended: its lease has ended (its context is cancelled); lost: another
	// subscriber has claimed the row since.
	ended, lost bool
}

// work hands the claimed rows out, up to sub.concurrency unsettled at once,
// and returns once each is settled or given up. While messages are out and
// every row is handed out, it claims more for the free room (claimMore),
// the settlements so far going with that claim. What is settled is left in
// h.settled for the caller to apply with the next claim, unless the lease
// must be renewed, or settlements would wait longer than the lease slack
// while a handler runs (so that none outlives its lease): those are applied
// on the way.
//
// A message is handed out only while the lease is younger than the
// renewal age, or fresh from the database (from the claim or a renewal, not
// yet used to hand out a message: a round trip as slow as the renewal age
// must not make the subscription renew for ever); otherwise the lease is
// renewed first. While a message is
// handed out and unsettled, a heartbeat renews the lease of every row the
// subscription holds whenever the lease is a third of the deadline old, but
// for the rows whose handler is past the deadline of its attempt
// (broker.StartAttempt, which the Timeout middleware calls): those are no
// longer renewed, and the rows not handed out are given back so that they
// do not wait behind a stuck handler; the lease of such a row then runs out
// and the message goes to another subscriber. When a handed-out row's lease
// ends or is lost (another subscriber claimed it), its message's context is
// cancelled and it is left without a settlement.
//
// The rows not handed out when the subscription stops are given back,
// uncounted, and so are they when the consumer does not take a message
// within the lease slack of its offer: stalled, a consumer that no longer reads its
// channel (without cancelling the subscription) leaves its rows to others
// instead of renewing their lease for as long as it stalls, and the
// subscription claims again a poll interval later. Messages already handed
// out are waited for: their contexts do not end with the subscription's (a
// handler finishing after intake stopped must still settle what it has
// done), only with Close or their lease.
func (sub *subscription) work(ctx context.Context, h *held) (stalled bool) {
	// settledOut receives each delivery once its message is acked or
	// nacked, or its context ends; at most sub.concurrency are out at once.
	settledOut := make(chan *delivery, sub.concurrency)
	var (
		// offer is the delivery on offer, until offerUntil.
		offer      *delivery
		offerUntil time.Time
		// retryAt, when set, is when a failed renewal is tried again;
		// checkAt, when set, when overdue handlers are looked at again.
		retryAt, checkAt time.Time
		// flushAt, when set, is when the settlements so far are applied
		// while handlers still run.
		flushAt time.Time
		// fresh: h.leaseEnd came from the database after the last message
		// was handed out.
		fresh = true
		// claimAt, when set, is when more rows may be claimed while
		// messages are out: the last claim found the queue drained (it
		// came back short), or failed.
		claimAt = sub.nextClaim(len(h.rows), sub.batchSize)
		// drained: the last claim came back short.
		drained = len(h.rows) < sub.batchSize
		stop    = ctx.Done()
	)
	timer := sub.timer
	defer timer.Stop()
	// haveSlot: this loop holds one of the subscription's slots for its next
	// offer (sub.slots); a delivery handed out keeps it until settled.
	haveSlot := false
	dropOffer := func() {
		if offer != nil {
			offer.cancel()
			offer = nil
		}
		if haveSlot {
			sub.releaseSlot()
			haveSlot = false
		}
	}
	endIntake := func(stall bool) {
		dropOffer()
		stop = nil
		stalled = stall
		sub.giveBackRows(h)
	}
	for {
		if stop != nil && ctx.Err() != nil {
			endIntake(false)
		}
		if len(h.rows) == 0 && len(h.out) == 0 {
			dropOffer() // a slot taken for rows lost since
			return stalled
		}
		topUp := false
		// While the queue is busy, more is claimed once half the room is
		// free and the oldest message out has run longer than the slack (a
		// straggler: fast handlers' batches are claimed whole); once it
		// was drained, a poll interval later for any room, as an idle
		// subscription polls.
		var topUpAt time.Time
		if room := sub.concurrency - len(h.out); stop != nil && len(h.rows) == 0 && room > 0 && (drained || 2*room >= sub.concurrency) {
			topUpAt = claimAt
			if !drained {
				topUpAt = latest(claimAt, h.out[0].since.Add(sub.leaseSlack()))
			}
			if topUpAt.IsZero() || !time.Now().Before(topUpAt) {
				// A batch's fast handlers settle at once: taken together,
				// the whole batch goes to the next claim.
				for drained := false; !drained && len(h.out) > 0; {
					select {
					case d := <-settledOut:
						sub.finish(h, d)
					default:
						drained = true
					}
				}
				if len(h.out) > 0 {
					claimAt, drained = sub.claimMore(ctx, h)
					fresh = fresh || len(h.rows) > 0
				}
				continue
			}
			topUp = true
		}
		wantOffer := offer == nil && stop != nil && len(h.rows) > 0 && len(h.out) < sub.concurrency
		if wantOffer && !haveSlot {
			haveSlot = sub.tryAcquireSlot()
		}
		if wantOffer && haveSlot {
			if !fresh && time.Until(h.leaseEnd) < sub.deadline-sub.renewalAge() {
				if !sub.renew(h) {
					endIntake(false)
				} else {
					retryAt, fresh = time.Time{}, true
				}
				continue
			}
			offer = sub.prepare(h.rows[0])
			offerUntil = time.Now().Add(sub.leaseSlack())
		}
		switch {
		case len(h.settled) == 0 || len(h.out) == 0:
			flushAt = time.Time{}
		case flushAt.IsZero():
			flushAt = time.Now().Add(sub.leaseSlack())
		}

		var (
			out       chan<- *message.Message
			offered   *message.Message
			heartbeat time.Time
			next      time.Time
		)
		var acquire chan<- struct{}
		if offer != nil {
			out, offered, next = sub.out, offer.row.msg, offerUntil
		} else if wantOffer && !haveSlot {
			// Every slot is taken by the subscription's other loops: wait
			// for one, keeping the rows leased meanwhile.
			acquire = sub.slots
		}
		if topUp {
			next = earliestSet(next, topUpAt)
		}
		renewAt := func() time.Time {
			if oldest := sub.oldestLease(h); !oldest.IsZero() {
				return cmp.Or(retryAt, oldest.Add(-sub.deadline+sub.renewalAge()))
			}
			return time.Time{}
		}
		if len(h.out) > 0 || acquire != nil {
			heartbeat = earliestSet(renewAt(), checkAt)
			next = earliestSet(next, heartbeat)
			next = earliestSet(next, flushAt)
			for _, d := range h.out {
				if !d.ended {
					next = earliestSet(next, d.leaseEnd)
				}
			}
		}
		timer.Reset(time.Until(next))
		select {
		case acquire <- struct{}{}:
			haveSlot = true
		case out <- offered:
			haveSlot = false // the delivery's now, until it is settled
			fresh = false
			offer.since = time.Now()
			h.rows = h.rows[1:]
			offer.leaseEnd = h.leaseEnd
			h.out = append(h.out, offer)
			go watch(offer, settledOut)
			offer = nil
		case d := <-settledOut:
			sub.finish(h, d)
		case <-stop:
		case now := <-timer.C:
			if offer != nil && !now.Before(offerUntil) {
				endIntake(ctx.Err() == nil)
			}
			for _, d := range h.out {
				if !d.ended && !now.Before(d.leaseEnd) {
					d.ended = true
					d.cancel()
				}
			}
			if !flushAt.IsZero() && !now.Before(flushAt) {
				flushAt = time.Time{}
				sub.flush(h)
			}
			if !heartbeat.IsZero() && !now.Before(heartbeat) {
				due := renewAt()
				retryAt, checkAt = sub.heartbeat(h, now, !due.IsZero() && !now.Before(due))
				if offer != nil && (len(h.rows) == 0 || h.rows[0].offset != offer.row.offset) {
					// The row on offer was given back (a handler past its
					// deadline) or lost to another subscriber.
					dropOffer()
				}
			}
		}
	}
}

// prepare gives r's message the context it is delivered with. A
// subscription that stops (shutdown stops intake first) does not cut the
// handler short: only Close or the end of the lease does.
func (sub *subscription) prepare(r claimedRow) *delivery {
	msgCtx, cancel := context.WithCancel(sub.msgBase)
	msgCtx, clock := broker.WithAttemptClock(msgCtx)
	r.msg.SetContext(msgCtx)
	return &delivery{row: r, ctx: msgCtx, cancel: cancel, clock: clock}
}

// watch sends d to settled once its message is acked or nacked, or its
// context ends.
func watch(d *delivery, settled chan<- *delivery) {
	msg := d.row.msg
	select {
	case <-msg.Acked():
	case <-msg.Nacked():
	case <-d.ctx.Done():
	}
	settled <- d
}

// finish takes d, which watch reported, out of h and records its
// settlement: an ack or nack, even one that came with the end of its
// context, unless its row was lost to another subscriber.
func (sub *subscription) finish(h *held, d *delivery) {
	h.out = slices.DeleteFunc(h.out, func(o *delivery) bool { return o == d })
	sub.releaseSlot()
	defer d.cancel() // the message's context ends with its settlement
	r := d.row
	if !d.lost {
		select {
		case <-r.msg.Acked():
			h.settled = append(h.settled, settlement{row: r, action: ack})
			return
		case <-r.msg.Nacked():
			// The delay is read from the message, where the retry
			// middleware set it before nacking.
			n := nackOf(r.msg)
			delay := sub.redeliveryDelay
			if n.requested {
				delay = n.delay
			}
			h.settled = append(h.settled, settlement{row: r, action: nackIt, delay: delay})
			return
		default:
		}
	}
	switch {
	case d.lost:
		// Logged by renew; the row is another subscriber's now.
	case sub.closing.Err() != nil:
		// Close: the row goes back at once.
		h.settled = append(h.settled, settlement{row: r, action: release})
	default:
		// The lease has ended, the row is anyone's again.
		sub.logger.Info("Message not acked or nacked before its lease ended; it will be delivered again",
			watermill.LogFields{"message_uuid": r.msg.UUID, "ack_deadline": sub.deadline, "handler_overdue": d.overdue})
	}
}

// heartbeat looks at the handlers of h's deliveries and, when due (or when
// a handler is no longer overdue, so that its row is renewed again while it
// can), renews the lease of every row but those whose handler is overdue.
// A handler newly past its deadline is logged, and the rows not handed out
// are given back. It returns when to retry a renewal that failed, and when
// to look at overdue handlers again (a handler that returns late, or the
// policy's next attempt, renews again while it can).
func (sub *subscription) heartbeat(h *held, now time.Time, due bool) (retryAt, checkAt time.Time) {
	anyOverdue, newlyOverdue := false, false
	for _, d := range h.out {
		if d.ended {
			continue
		}
		overdue := d.clock.Overdue(now)
		switch {
		case overdue && !d.overdue:
			newlyOverdue = true
			sub.logger.Info("Handler past its deadline: its message's lease is no longer renewed, it will be delivered again",
				watermill.LogFields{"message_uuid": d.row.msg.UUID, "lease_end": d.leaseEnd})
		case !overdue && d.overdue:
			due = true
		}
		d.overdue = overdue
		anyOverdue = anyOverdue || overdue
	}
	if anyOverdue {
		checkAt = now.Add(sub.deadline / 10)
	}
	if newlyOverdue {
		// They should not wait behind a handler that is past its deadline.
		sub.giveBackRows(h)
		if !due {
			sub.flush(h)
		}
	}
	if due && !sub.renew(h) {
		retryAt = now.Add(sub.deadline / 10)
	}
	return retryAt, checkAt
}

// giveBackRows moves h's rows not handed out to its settlements, given
// back: nobody tried them.
func (sub *subscription) giveBackRows(h *held) {
	for _, r := range h.rows {
		h.settled = append(h.settled, settlement{row: r, action: giveBack})
	}
	h.rows = nil
}

// flush applies what h has settled.
func (sub *subscription) flush(h *held) {
	if _, _, err := sub.settle(h.settled, time.Now().Add(settleTimeout)); err != nil {
		sub.logger.Error("Settling messages failed; their rows come back when their lease ends", err, nil)
	}
	h.settled = nil
}

// renew applies what h has settled and extends the lease of its rows not
// handed out and of its deliveries whose handler is not overdue, all in one
// statement, retried until the lease ends. The rows it no longer holds
// (another subscriber claimed them after their lease ran out) are dropped
// from h, with a log line, and a delivery's message context is then
// cancelled. ok is false when the database could not be reached: h is left
// as it was, its rows come back when their lease ends.
func (sub *subscription) renew(h *held) (ok bool) {
	ss := slices.Clip(h.settled)
	for _, r := range h.rows {
		ss = append(ss, settlement{row: r, action: renew, delay: sub.deadline})
	}
	for _, d := range h.out {
		if !d.overdue && !d.ended {
			ss = append(ss, settlement{row: d.row, action: renew, delay: sub.deadline})
		}
	}
	renewed, leaseEnd, err := sub.settle(ss, cmp.Or(sub.oldestLease(h), time.Now().Add(settleTimeout)))
	if err != nil {
		sub.logger.Error("Renewing the claim failed; its rows come back when their lease ends unless a renewal succeeds before", err, nil)
		return false
	}
	h.settled, h.leaseEnd = nil, leaseEnd
	for _, d := range h.out {
		switch {
		case d.overdue || d.ended:
		case renewed[d.row.offset]:
			d.leaseEnd = leaseEnd
		default:
			d.lost, d.ended = true, true
			d.cancel()
			sub.logger.Error("Lease of a message being handled lost to another subscriber; it will be delivered again", nil,
				watermill.LogFields{"message_uuid": d.row.msg.UUID, "offset": d.row.offset})
		}
	}
	h.rows = slices.DeleteFunc(h.rows, func(r claimedRow) bool {
		if renewed[r.offset] {
			return false
		}
		// Its lease had run out and another subscriber claimed it.
		sub.logger.Info("Claimed message lost to another subscriber before delivery", watermill.LogFields{"message_uuid": r.msg.UUID})
		return true
	})
	return true
}

// claimMore claims rows for the free room of a subscription whose messages
// are out and whose rows are all handed out, so that up to
// sub.concurrency are out at once even when a claim came back with fewer,
// applying what h has settled in the same round trip; held rows stay
// within the batch size. It returns when to try again: a poll interval
// later when the queue was drained, a retry interval later when the claim
// failed (nextClaim).
func (sub *subscription) claimMore(ctx context.Context, h *held) (claimAt time.Time, drained bool) {
	limit := sub.batchSize - len(h.out)
	rows, leaseEnd, err := sub.claim(ctx, h.settled, limit)
	// Applied with the claim, or on their own when it failed.
	h.settled = nil
	if err != nil {
		sub.logger.Error("Claiming messages failed", err, nil)
		return time.Now().Add(sub.retryInterval), false
	}
	if len(rows) > 0 {
		h.rows, h.leaseEnd = rows, leaseEnd
	}
	return sub.nextClaim(len(rows), limit), len(rows) < limit
}

// nextClaim is when a subscription whose last claim got got of limit rows
// may claim more while messages are out: at once after a full claim, a poll
// interval later after a short one (the queue was drained then), as an idle
// subscription polls; meanwhile the batch's settlements gather for one
// statement.
func (sub *subscription) nextClaim(got, limit int) time.Time {
	if got < limit {
		return time.Now().Add(sub.pollInterval)
	}
	return time.Time{}
}

// oldestLease is the earliest end of the leases the heartbeat renews: of
// h's rows not handed out and its deliveries whose handler is not overdue;
// zero when there is none.
func (sub *subscription) oldestLease(h *held) time.Time {
	var t time.Time
	if len(h.rows) > 0 {
		t = h.leaseEnd
	}
	for _, d := range h.out {
		if !d.overdue && !d.ended {
			t = earliestSet(t, d.leaseEnd)
		}
	}
	return t
}

// latest is the later of a and b.
func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// earliestSet is the earlier of a and b, ignoring either when zero.
func earliestSet(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero():
		return a
	}
	return earliest(a, b)
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
