package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/broker"
)

var _ broker.BatchReceiver = (*PubSub)(nil)

// ReceiveBatches reads the queue of topic in batches, as a subscription
// would but without handing messages out one at a time: each Next is one
// claim statement (the subscription's, so a claim counts an attempt and
// leases the rows for the queue's ack deadline, and an ordered queue hands
// out only its groups' heads), Ack is one settlement statement deleting
// every row Next returned since the last Ack, and Close gives back, in one
// statement, what was read and not acked, with the attempt taken back: a
// batch reader does not try a message, its caller settles it. While rows
// are held, a heartbeat renews their lease every third of the ack deadline,
// so a slow caller (a redrive capped at a few messages a second) keeps
// them; a row whose lease was lost all the same (the database was
// unreachable until it ended and another consumer claimed it) makes Ack
// fail, naming how many. A reader left open when the PubSub closes stops
// renewing; its rows come back when their lease ends.
func (p *PubSub) ReceiveBatches(ctx context.Context, topic string, size int) (broker.BatchReader, error) {
	if size <= 0 {
		return nil, errors.New("postgres: batch size must be positive")
	}
	if err := p.schema.checkTopic(topic); err != nil {
		return nil, err
	}
	if p.isClosed() {
		return nil, fmt.Errorf("postgres: read %s in batches: %w", topic, ErrClosed)
	}
	if p.cfg.AutoInitializeSchema {
		if err := p.ensureTable(ctx, topic); err != nil {
			return nil, err
		}
	} else if err := p.checkTable(ctx, topic); err != nil {
		return nil, err
	}
	b := &batchReader{
		p:    p,
		size: size,
		sub: &subscription{
			topic:         topic,
			schema:        p.schema,
			claims:        newClaimTexts(p.schema, topic, p.cfg.OrderedQueues[topic], p.cfg.ackDeadlineOf(topic)),
			settleSQL:     p.schema.settleSQL(topic),
			pool:          p.consumePool,
			deadline:      p.cfg.ackDeadlineOf(topic),
			pollInterval:  p.cfg.PollInterval,
			retryInterval: p.cfg.RetryInterval,
			logger:        p.logger.With(watermill.LogFields{"topic": topic, "reader": "batches"}),
			closing:       p.closing,
		},
		stopped: make(chan struct{}),
	}
	var heartbeat context.Context
	heartbeat, b.stop = context.WithCancel(p.closing)
	go b.heartbeat(heartbeat)
	return b, nil
}

// batchReader is one ReceiveBatches call. Next, Ack and Close are called
// from one goroutine; mu keeps them apart from the heartbeat.
type batchReader struct {
	p    *PubSub
	sub  *subscription
	size int

	mu sync.Mutex
	// held are the rows Next returned and Ack has not removed; leaseEnd
	// is when their lease ends by this clock (each claim or renewal
	// starts it for all of them).
	held     []claimedRow
	leaseEnd time.Time
	// lost counts the held rows another consumer claimed after their
	// lease ran out; the next Ack reports them.
	lost int
	// closed is set by Close.
	closed bool

	stop    context.CancelFunc
	stopped chan struct{}
}

// Next claims up to min(limit, size) rows in one statement, polling every
// PollInterval until wait has passed when the queue has none available.
func (b *batchReader) Next(ctx context.Context, limit int, wait time.Duration) ([]*message.Message, error) {
	limit = min(limit, b.size)
	if limit <= 0 {
		return nil, nil
	}
	giveUp := time.Now().Add(wait)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if b.p.isClosed() {
			return nil, fmt.Errorf("postgres: read %s in batches: %w", b.sub.topic, ErrClosed)
		}
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return nil, fmt.Errorf("postgres: read %s in batches: the reader is closed", b.sub.topic)
		}
		rows, leaseEnd, err := b.sub.claim(ctx, nil, limit)
		if err == nil && len(rows) > 0 {
			b.held = append(b.held, rows...)
			// The rows held before are renewed no later than these.
			if b.leaseEnd.IsZero() || leaseEnd.Before(b.leaseEnd) {
				b.leaseEnd = leaseEnd
			}
		}
		b.mu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("postgres: read %s in batches: %w", b.sub.topic, err)
		}
		if len(rows) > 0 {
			out := make([]*message.Message, len(rows))
			for i, r := range rows {
				out[i] = r.msg
			}
			return out, nil
		}
		left := time.Until(giveUp)
		if left <= 0 {
			return nil, nil
		}
		sleep(ctx, min(left, b.sub.pollInterval))
	}
}

// Ack deletes every held row in one statement (matched by its claim, as
// every settlement is).
func (b *batchReader) Ack() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	lost := b.lost
	b.lost = 0
	if len(b.held) > 0 {
		ss := make([]settlement, len(b.held))
		for i, r := range b.held {
			ss[i] = settlement{row: r, action: ack}
		}
		if _, _, err := b.sub.settle(ss, time.Now().Add(settleTimeout)); err != nil {
			return fmt.Errorf("postgres: ack a batch of %s: %w", b.sub.topic, err)
		}
		b.held, b.leaseEnd = nil, time.Time{}
	}
	if lost > 0 {
		return fmt.Errorf("postgres: ack a batch of %s: %d row(s) were claimed by another consumer after their lease ran out and stay in the queue", b.sub.topic, lost)
	}
	return nil
}

// Close stops the heartbeat and gives back every held row, uncounted, in
// one statement. It is safe to call more than once.
func (b *batchReader) Close() error {
	b.stop()
	<-b.stopped
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	if len(b.held) == 0 || b.p.isClosed() {
		return nil
	}
	ss := make([]settlement, len(b.held))
	for i, r := range b.held {
		ss[i] = settlement{row: r, action: giveBack}
	}
	b.held = nil
	if _, _, err := b.sub.settle(ss, time.Now().Add(settleTimeout)); err != nil {
		return fmt.Errorf("postgres: give back a batch of %s: %w", b.sub.topic, err)
	}
	return nil
}

// heartbeat renews the held rows' lease whenever it is a third of the ack
// deadline old, until ctx ends (Close, or the PubSub's Close).
func (b *batchReader) heartbeat(ctx context.Context) {
	defer close(b.stopped)
	tick := time.NewTicker(max(b.sub.renewalAge()/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		b.mu.Lock()
		if len(b.held) > 0 && time.Until(b.leaseEnd) <= b.sub.deadline-b.sub.renewalAge() {
			b.renew()
		}
		b.mu.Unlock()
	}
}

// renew extends the lease of the held rows in one statement, tried again
// until their lease ends; the rows it finds claimed by another consumer are
// dropped from held and counted in lost. b.mu is held.
func (b *batchReader) renew() {
	ss := make([]settlement, len(b.held))
	for i, r := range b.held {
		ss[i] = settlement{row: r, action: renew, delay: b.sub.deadline}
	}
	renewed, leaseEnd, err := b.sub.settle(ss, b.leaseEnd)
	if err != nil {
		b.sub.logger.Error("Renewing a batch's lease failed; its rows come back when their lease ends unless a renewal succeeds before", err, nil)
		return
	}
	kept := b.held[:0]
	for _, r := range b.held {
		if renewed[r.offset] {
			kept = append(kept, r)
			continue
		}
		b.lost++
		b.sub.logger.Error("Lease of a message read in a batch lost to another consumer", nil, watermill.LogFields{"message_uuid": r.msg.UUID})
	}
	b.held, b.leaseEnd = kept, leaseEnd
}
