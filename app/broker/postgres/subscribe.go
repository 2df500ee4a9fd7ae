package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
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

	batchSize       int
	deadline        time.Duration
	pollInterval    time.Duration
	retryInterval   time.Duration
	redeliveryDelay time.Duration

	logger watermill.LoggerAdapter
	out    chan *message.Message
	// closing is the PubSub's: it ends when Close is called.
	closing context.Context
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
	for ctx.Err() == nil {
		rows, leaseEnd, err := sub.claim(ctx)
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
		if stalled := sub.work(ctx, rows, leaseEnd); stalled {
			sleep(ctx, sub.pollInterval)
		}
	}
}

// claim claims up to batchSize rows, in offset order, and returns when their
// lease ends by this clock. The statement does not stop when ctx ends: a
// claim cut off after it committed would leave its rows counted and
// claimed, unseen, for a whole lease; run to its end, it is given back.
func (sub *subscription) claim(ctx context.Context) ([]claimedRow, time.Time, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	q := sub.schema.claimQuery(sub.topic, sub.batchSize, sub.deadline)
	sent := time.Now()
	rows, err := sub.pool.Query(ctx, q.Query, q.Args...)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("claim: %w", err)
	}
	defer rows.Close()
	var claimed []claimedRow
	for rows.Next() {
		var (
			r                 claimedRow
			uuid              string
			payload, md       []byte
			earlier           int64
			firstFailedAtTime *time.Time
		)
		if err := rows.Scan(&r.offset, &uuid, &payload, &md, &earlier, &firstFailedAtTime, &r.token); err != nil {
			return nil, time.Time{}, fmt.Errorf("claim: scan row: %w", err)
		}
		r.msg = sub.schema.deliveredMessage(r.offset, uuid, payload, md, earlier, firstFailedAtTime)
		claimed = append(claimed, r)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("claim: %w", err)
	}
	slices.SortFunc(claimed, func(a, b claimedRow) int { return cmp.Compare(a.offset, b.offset) })
	return claimed, sent.Add(sub.deadline), nil
}

// leaseSlack is how much of a lease may be used up before a message is handed
// out under it: a delivered message gets between deadline-leaseSlack and
// deadline to be settled, and a batch renews its lease when its messages
// have taken more than leaseSlack in all (never with fast handlers, at most
// once per message with slow ones).
func (sub *subscription) leaseSlack() time.Duration {
	return min(sub.deadline/10, time.Second)
}

// work hands the claimed rows out one at a time and settles them: at the end
// of the batch, when the lease must be renewed, while a slow handler runs
// (so that what was settled before it does not outlive its lease), and when
// the subscription stops. The rows it has not delivered then are given back,
// uncounted, and so are they when the consumer does not take a message
// within the lease slack: stalled, a consumer that no longer reads its
// channel (without cancelling the subscription) leaves its rows to others
// instead of renewing their lease for as long as it stalls, and the
// subscription claims again a poll interval later.
func (sub *subscription) work(ctx context.Context, rows []claimedRow, leaseEnd time.Time) (stalled bool) {
	var settled []settlement
	flush := func() {
		if _, _, err := sub.settle(settled); err != nil {
			sub.logger.Error("Settling messages failed; their rows come back when their lease ends", err, nil)
		}
		settled = nil
	}
	for len(rows) > 0 && ctx.Err() == nil {
		if time.Until(leaseEnd) < sub.deadline-sub.leaseSlack() {
			var ok bool
			if rows, leaseEnd, ok = sub.renew(settled, rows); !ok {
				return false
			}
			settled = nil
			continue
		}
		st, taken := sub.deliver(ctx, rows[0], leaseEnd, flush)
		if !taken {
			stalled = ctx.Err() == nil
			break
		}
		rows = rows[1:]
		if st.action != "" {
			settled = append(settled, st)
		}
	}
	for _, r := range rows {
		settled = append(settled, settlement{row: r, action: giveBack})
	}
	flush()
	return stalled
}

// renew settles what is settled and extends the lease of rows, all in one
// statement. It returns the rows still claimed and when their lease ends;
// false when the database could not be reached, the rows then come back when
// their lease ends.
func (sub *subscription) renew(settled []settlement, rows []claimedRow) ([]claimedRow, time.Time, bool) {
	ss := slices.Clip(settled)
	for _, r := range rows {
		ss = append(ss, settlement{row: r, action: renew, delay: sub.deadline})
	}
	renewed, leaseEnd, err := sub.settle(ss)
	if err != nil {
		sub.logger.Error("Renewing the claim failed; its rows come back when their lease ends", err, nil)
		return nil, time.Time{}, false
	}
	kept := rows[:0]
	for _, r := range rows {
		if renewed[r.offset] {
			kept = append(kept, r)
		} else {
			// Its lease had run out and another subscriber claimed it.
			sub.logger.Info("Claimed message lost to another subscriber before delivery", watermill.LogFields{"message_uuid": r.msg.UUID})
		}
	}
	return kept, leaseEnd, true
}

// deliver hands r's message to the consumer and waits for its ack or nack, at
// most until leaseEnd. taken is false when the consumer did not take the
// message within the lease slack, or the subscription stopped.
// While a handler runs longer than the lease slack, flush settles what the
// batch settled before it.
func (sub *subscription) deliver(ctx context.Context, r claimedRow, leaseEnd time.Time, flush func()) (_ settlement, taken bool) {
	// The handler's time is the lease's: when it ends, another subscriber
	// may claim the row. A subscription that stops (shutdown stops intake
	// first) does not cut it short: a handler finishing then must still
	// settle what it has done. Only Close does.
	msgCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), leaseEnd)
	defer cancel() // the message's context ends with its settlement
	stopOnClose := context.AfterFunc(sub.closing, cancel)
	defer stopOnClose()
	r.msg.SetContext(msgCtx)
	// Taken later, the message would have less than its time.
	stale := time.NewTimer(time.Until(leaseEnd.Add(-(sub.deadline - sub.leaseSlack()))))
	defer stale.Stop()
	select {
	case sub.out <- r.msg:
	case <-stale.C:
		return settlement{}, false
	case <-ctx.Done():
		return settlement{}, false
	}

	slow := time.NewTimer(sub.leaseSlack())
	defer slow.Stop()
wait:
	for {
		select {
		case <-r.msg.Acked():
			break wait
		case <-r.msg.Nacked():
			break wait
		case <-msgCtx.Done():
			break wait
		case <-slow.C:
			flush()
		}
	}
	// An ack or nack that came with the end of the context still counts.
	select {
	case <-r.msg.Acked():
		return settlement{row: r, action: ack}, true
	case <-r.msg.Nacked():
		// The delay is read from the message, where the retry middleware set
		// it before nacking.
		n := nackOf(r.msg)
		delay := sub.redeliveryDelay
		if n.requested {
			delay = n.delay
		}
		return settlement{row: r, action: nackIt, delay: delay}, true
	default:
	}
	if sub.closing.Err() != nil {
		// Close: the row goes back at once.
		return settlement{row: r, action: release}, true
	}
	// The ack deadline: the lease has ended, the row is anyone's again.
	sub.logger.Info("Message not acked within its ack deadline; it will be delivered again",
		watermill.LogFields{"message_uuid": r.msg.UUID, "ack_deadline": sub.deadline})
	return settlement{}, true
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
