package sqs

import (
	"context"
	"fmt"
	"path"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/cenkalti/backoff/v5"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// Subscribe returns the messages of topic's queue (QueueName; a topic whose
// queue name SQS would refuse is a *QueueNameError). Config.Workers receivers
// long-poll the queue while it has messages, one while it is idle (see
// Config.Workers); every received message is handed out on its own, so a
// consumer that handles messages concurrently (the Watermill router does) gets
// a whole batch at once, and at most BatchSize×Workers are in flight
// (received and not yet settled, whether handed out or waiting), or fewer
// when ctx asks for fewer at once (broker.WithConcurrency).
//
// A FIFO queue (its name ends in .fifo, which SQS requires of FIFO queues)
// keeps each message group's order. SQS returns several messages of one group
// in one receive, so within a batch a group's messages are handed out one at
// a time, in order, the next only once the one before was acked; different
// groups still run concurrently. When one is not acked — nacked (a handler
// past its timeout included), not unmarshaled, or released at the end of the
// subscription — the group's later messages of that batch are released
// (visibility 0) without being handed out or counted as failed, and the one
// that failed keeps the visibility its nack gives it, below; SQS then holds
// the group until that message is visible again and delivers it first. A
// message waiting its turn is extended by the heartbeat like one being
// handled. The Config.Workers receivers need no coordination: SQS gives no
// receiver any message of a group while one of the group is in flight ("FIFO
// queue delivery logic", SQS Developer Guide), so one batch holds everything
// of a group that is in flight. A MessageGroupId on a standard queue (a fair
// queue) orders nothing. A released message still counts a receive at SQS:
// one that waits behind a message that keeps failing spends receives toward
// the redrive policy's maxReceiveCount, and its x-attempt counts them.
//
// Every message carries metadata.AttemptKey, the number of its earlier
// deliveries (ApproximateReceiveCount − 1, so 0 on the first), and
// ReceiveCountKey. Until it is acked or nacked, its visibility is extended
// before half of the visibility timeout (Config.VisibilityTimeout, or the
// queue's own, read here once) has passed, so a long handler keeps it.
//
// A message from a FIFO queue carries its MessageGroupId as
// metadata.GroupIDKey, whoever published it, so that its dead letter or a
// redrive can be published to a FIFO queue in the same group.
//
// On a redelivery (ApproximateReceiveCount > 1) a message also carries
// metadata.FirstFailureKey: SQS's ApproximateFirstReceiveTimestamp, the time of
// its first receive, i.e. when the first (failed) attempt started, to the
// millisecond, in RFC 3339 UTC. SQS keeps no failure times of its own, so this
// is the closest it knows; it is absent on a first delivery. A publisher's
// value of any of these keys is dropped, and so is a metadata.NackDelayKey (or
// its metadata.ExplicitNackDelayKey) that came with the message.
//
// Ack deletes the message. A delete SQS fails is tried again a few times
// within a second or so, while the message is surely still invisible, so that
// a passing error neither delivers an acked message again nor, on a FIFO
// queue, holds up its group. A receipt handle SQS no longer takes (the
// visibility timeout ran out) is not retried: the message will be delivered
// again, which is logged at info.
//
// Nack leaves the visibility as it is, by default: retry timing is the
// queue's (the SQS specs' Lambda semantics), so the message comes back when
// its visibility timeout runs out — a visibility timeout after its receive or
// its last heartbeat — and a database outage shorter than that costs no
// receive. Config.NackVisibility, when set, is the visibility a nack gives
// instead. A shorter delay is a route's explicit choice: a message carrying
// metadata.ExplicitNackDelayKey ("true") is made visible again after its
// metadata.NackDelayKey (rounded up to whole seconds, clamped to 0..12 h; 0 =
// at once). The retry middleware sets NackDelayKey from the route's backoff
// on every broker and marks it explicit only for a route with
// route.Policy.ExplicitBackoff, so brokers without a timing of their own
// (Postgres) keep waiting the backoff while SQS routes keep the queue's.
//
// A message that cannot be unmarshaled is logged and left alone: it comes
// back after the queue's visibility timeout and the redrive policy
// dead-letters it. Receive errors are logged and retried with back-off. The
// subscription ends, and the channel closes, when ctx ends or the PubSub is
// closed; see Close for what happens to messages in flight.
func (p *PubSub) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	p.subs.Add(1)
	p.mu.Unlock()

	resolveCtx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	queueURL, err := p.queueURL(resolveCtx, topic, p.cfg.CreateQueues)
	cancel()
	if err != nil {
		p.subs.Done()
		return nil, fmt.Errorf("subscribe %s: %w", topic, err)
	}
	visibility, err := p.queueVisibility(ctx, queueURL)
	if err != nil {
		p.subs.Done()
		return nil, fmt.Errorf("subscribe %s: %w", topic, err)
	}

	s := &subscription{
		p:        p,
		topic:    topic,
		queueURL: queueURL,
		out:      make(chan *message.Message),
		// Message contexts carry Subscribe's values but not its
		// cancellation: a subscription that ends still gives the messages it
		// handed out DrainTimeout to finish.
		msgParent: context.WithoutCancel(ctx),
		batchSize: p.cfg.batchSizeOf(topic),
		// SQS requires a FIFO queue's name to end in .fifo, and the name is
		// the last segment of the queue's URL.
		fifo:    isFIFO(path.Base(queueURL)),
		slots:   make(chan struct{}, inFlight(ctx, p.cfg.batchSizeOf(topic)*p.cfg.Workers)),
		settle:  make(chan settleRequest),
		drained: make(chan struct{}),
		idle:    broker.NewIdleLoops(p.cfg.Workers),
	}
	s.heartbeat = newHeartbeat(s, visibility)
	s.stop, s.stopNow = context.WithCancel(ctx)
	for range cap(s.slots) {
		s.slots <- struct{}{}
	}
	s.start()
	return s.out, nil
}

// inFlight is how many messages a subscription holds in flight: the room of
// its receive loops' batches, or fewer when the subscriber asked for fewer at
// once (broker.WithConcurrency).
func inFlight(ctx context.Context, room int) int {
	if n, ok := broker.ConcurrencyFrom(ctx); ok && n > 0 && n < room {
		return n
	}
	return room
}

type subscription struct {
	p        *PubSub
	topic    string
	queueURL string
	out      chan *message.Message
	// batchSize is how many messages one receive asks for on this queue.
	batchSize int
	// fifo: the queue is a FIFO queue, whose messages of one group are
	// handed out one at a time, in order.
	fifo bool

	// stop ends intake: no new receive starts, nothing more is handed out.
	stop      context.Context
	stopNow   context.CancelFunc
	msgParent context.Context
	// slots holds one token per message that may be in flight.
	slots chan struct{}
	// settle carries acks, nacks and releases to the settlers, which batch
	// what arrives together.
	settle chan settleRequest
	// drained closes DrainTimeout after stop: messages handed out and still
	// unsettled are then released (made visible again at once).
	drained chan struct{}
	// heartbeat extends the visibility of received messages until they are
	// settled; nil when the queue's visibility timeout is 0.
	heartbeat *heartbeat

	// idle parks the receivers an idle queue does not need.
	idle *broker.IdleLoops

	workers    sync.WaitGroup
	deliveries sync.WaitGroup
	settlers   sync.WaitGroup
}

type settleRequest struct {
	receiptHandle string
	messageID     string
	delete        bool
	visibility    int32 // seconds, when not delete
	// visibleAt is, for a delete, the earliest the message may be visible
	// again (zero: not known); retries of a failed delete stop before it.
	visibleAt time.Time
}

func (s *subscription) start() {
	go func() {
		select {
		case <-s.p.closing:
			s.stopNow()
		case <-s.stop.Done():
		}
	}()

	s.settlers.Add(s.p.cfg.Workers)
	for range s.p.cfg.Workers {
		go s.settleLoop()
	}
	s.heartbeat.start()
	s.workers.Add(s.p.cfg.Workers)
	for range s.p.cfg.Workers {
		go s.receiveLoop()
	}
	go s.shutdown()
}

// shutdown waits for the end of intake, then for every message to be settled
// (or DrainTimeout), then flushes the settlers and closes the channel.
func (s *subscription) shutdown() {
	<-s.stop.Done()
	drainTimer := time.AfterFunc(s.p.cfg.DrainTimeout, func() { close(s.drained) })
	s.workers.Wait()
	s.deliveries.Wait()
	drainTimer.Stop()
	s.heartbeat.stop()
	close(s.settle)
	s.settlers.Wait()
	close(s.out)
	s.p.subs.Done()
}

func (s *subscription) fields(extra watermill.LogFields) watermill.LogFields {
	return watermill.LogFields{"queue": s.topic}.Add(extra)
}

func (s *subscription) receiveLoop() {
	defer s.workers.Done()
	retry := backoff.ExponentialBackOff{
		InitialInterval:     100 * time.Millisecond,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         10 * time.Second,
	}
	retry.Reset()
	for {
		n := s.acquireSlots()
		if n == 0 {
			return
		}
		msgs, received, err := s.receive(n)
		s.releaseSlots(n - len(msgs))
		if err != nil {
			if s.stop.Err() != nil {
				return
			}
			wait := retry.NextBackOff()
			s.p.logger.Error("Cannot receive from SQS, retrying", err, s.fields(watermill.LogFields{"retry_in": wait.String()}))
			timer := time.NewTimer(wait)
			select {
			case <-s.stop.Done():
				timer.Stop()
				return
			case <-timer.C:
			}
			continue
		}
		retry.Reset()
		if len(msgs) == 0 {
			if _, ok := s.idle.Park(s.stop.Done()); !ok {
				return
			}
			continue
		}
		s.idle.Wake()
		s.dispatch(msgs, received)
	}
}

// Short waits that buy full batches: SQS bills per request, and the emulator
// is bound by requests, not messages. Both only apply when the application is
// busy (slots short) or acks are already flowing.
const (
	// slotFillWait is how long a receiver with fewer free slots than
	// BatchSize waits for more before polling with what it has.
	slotFillWait = 20 * time.Millisecond
	// settleLinger is how long a settler collects acks and nacks after the
	// first before sending them.
	settleLinger = 5 * time.Millisecond
)

// acquireSlots takes between 1 and BatchSize slots: it waits for the first,
// then up to slotFillWait for the rest. 0 means the subscription is stopping.
func (s *subscription) acquireSlots() int {
	select {
	case <-s.slots:
	case <-s.stop.Done():
		return 0
	}
	n := 1
	var fill *time.Timer
	defer func() {
		if fill != nil {
			fill.Stop()
		}
	}()
	for n < s.batchSize {
		select {
		case <-s.slots:
			n++
			continue
		default:
		}
		if fill == nil {
			fill = time.NewTimer(slotFillWait)
		}
		select {
		case <-s.slots:
			n++
			continue
		case <-fill.C:
		case <-s.stop.Done():
		}
		break
	}
	if s.stop.Err() != nil {
		s.releaseSlots(n)
		return 0
	}
	return n
}

func (s *subscription) releaseSlots(n int) {
	for range n {
		s.slots <- struct{}{}
	}
}

// receive long-polls for up to n messages. The poll is not cancelled when the
// subscription stops: an abandoned poll can still take messages, which would
// then stay invisible for the queue's visibility timeout. What it brings after
// the stop is released by dispatch. It also returns the earliest time the
// messages' visibility clock may have started, for the heartbeat.
func (s *subscription) receive(n int) ([]types.Message, time.Time, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.stop), s.p.cfg.WaitTime+s.p.cfg.RequestTimeout)
	defer cancel()
	sent := time.Now()
	in := &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(s.queueURL),
		MaxNumberOfMessages:         int32(n),
		WaitTimeSeconds:             int32(s.p.cfg.WaitTime / time.Second),
		MessageAttributeNames:       []string{"All"},
		MessageSystemAttributeNames: receiveSystemAttributes,
	}
	if s.p.cfg.VisibilityTimeout > 0 {
		in.VisibilityTimeout = int32(s.p.cfg.VisibilityTimeout / time.Second)
	}
	out, err := s.p.client.ReceiveMessage(ctx, in)
	if err != nil {
		return nil, time.Time{}, err
	}
	received := time.Now().Add(-receiveLatencyAllowance)
	if received.Before(sent) {
		received = sent
	}
	return out.Messages, received, nil
}

// dispatch hands the messages of one receive out; each owns its slot from
// here on. On a FIFO queue, the messages of one group in the batch go to one
// goroutine, in batch order (see deliverInOrder); every other message goes on
// its own, so a batch is handled concurrently.
//
// That a batch is the whole of what must be kept in order follows from SQS:
// it returns as many messages of one group as it can in one receive, and
// none of a group to any receive — this subscription's other workers
// included — while a message of that group is in flight. So no two batches
// in flight hold the same group, as long as a message waiting its turn stays
// in flight: prepare starts its heartbeat at once.
func (s *subscription) dispatch(msgs []types.Message, received time.Time) {
	for _, run := range s.runs(msgs) {
		ds := make([]delivery, len(run))
		for i, m := range run {
			ds[i] = s.prepare(m, received)
		}
		s.deliveries.Add(1)
		go s.deliverInOrder(ds)
	}
}

// runs splits a received batch into what is handed out in order: on a FIFO
// queue, the messages of each group in batch order (SQS's order within the
// group); otherwise each message alone. A group id on a standard queue (SQS
// fair queues) orders nothing.
func (s *subscription) runs(msgs []types.Message) [][]*types.Message {
	runs := make([][]*types.Message, 0, len(msgs))
	groupRun := map[string]int{}
	for i := range msgs {
		m := &msgs[i]
		group := m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
		if !s.fifo || group == "" {
			runs = append(runs, []*types.Message{m})
			continue
		}
		if at, ok := groupRun[group]; ok {
			runs[at] = append(runs[at], m)
			continue
		}
		groupRun[group] = len(runs)
		runs = append(runs, []*types.Message{m})
	}
	return runs
}

// delivery is one received message on its way to the application.
type delivery struct {
	id, handle string
	// msg is nil when the message could not be unmarshaled.
	msg    *message.Message
	cancel context.CancelFunc
}

// prepare unmarshals a received message and starts extending its
// visibility: from its receive on, waiting or handled, it is ours until it is
// settled or released.
func (s *subscription) prepare(m *types.Message, received time.Time) delivery {
	d := delivery{id: aws.ToString(m.MessageId), handle: aws.ToString(m.ReceiptHandle)}
	msg, err := s.p.cfg.Unmarshaler.Unmarshal(m)
	if err != nil || msg == nil {
		// Left invisible: it comes back after the visibility timeout, and the
		// redrive policy dead-letters it after maxReceiveCount. Releasing it
		// now would only spin on it.
		s.p.logger.Error("Cannot unmarshal SQS message, leaving it for redelivery", err, s.fields(watermill.LogFields{"message_id": d.id}))
		return d
	}
	if msg.Metadata == nil {
		msg.Metadata = message.Metadata{}
	}
	// The attempt number and first failure time come from SQS alone: a value
	// a publisher put in the attributes is never trusted.
	setDeliveryMetadata(msg.Metadata, m.Attributes)
	ctx, cancel := context.WithCancel(s.msgParent)
	// The handler's Timeout reports each attempt's deadline to the clock;
	// the heartbeat stops extending a message whose handler is past it.
	ctx, clock := broker.WithAttemptClock(ctx)
	msg.SetContext(ctx)
	d.msg, d.cancel = msg, cancel
	s.heartbeat.track(d.handle, d.id, received, clock)
	return d
}

// deliverInOrder hands ds out one at a time, each only after the one before
// was acked. Once one is not acked (nacked, as a handler past its timeout
// is; not unmarshaled; or released at the stop or the end of the drain), the
// rest are released untouched, neither handled nor counted as failed:
// handled, they would overtake it; held, they would keep their group in
// flight and so keep the failed one from coming back. It keeps the
// visibility its own outcome gave it, and SQS delivers the group again from
// it.
func (s *subscription) deliverInOrder(ds []delivery) {
	defer s.deliveries.Done()
	for i, d := range ds {
		if s.deliver(d) {
			continue
		}
		for _, rest := range ds[i+1:] {
			s.releaseUntouched(rest)
		}
		return
	}
}

// deliver hands d out and settles it; it reports whether it was acked.
func (s *subscription) deliver(d delivery) (acked bool) {
	defer s.releaseSlots(1)
	if d.msg == nil {
		return false // logged by prepare, left for the redrive policy
	}
	defer d.cancel()
	if s.stop.Err() != nil {
		s.release(d)
		return false
	}
	select {
	case s.out <- d.msg:
	case <-s.stop.Done():
		s.release(d)
		return false
	}

	select {
	case <-d.msg.Acked():
	case <-d.msg.Nacked():
	case <-s.drained:
	}
	visibleAt := s.heartbeat.untrack(d.handle)
	switch {
	case isDone(d.msg.Acked()):
		s.settleOne(settleRequest{receiptHandle: d.handle, messageID: d.id, delete: true, visibleAt: visibleAt})
		return true
	case isDone(d.msg.Nacked()):
		// Without a change the message comes back when the visibility timeout
		// the receive or the last heartbeat set runs out: the queue's timing.
		if visibility, change := nackVisibility(d.msg, s.p.cfg.NackVisibility); change {
			s.settleOne(settleRequest{receiptHandle: d.handle, messageID: d.id, visibility: visibility})
		}
	default:
		// Neither acked nor nacked by the end of the drain: released, so that
		// another consumer gets it now rather than after the visibility
		// timeout. Its handler, if still running, sees its context cancelled
		// (deferred above); a second copy may start meanwhile, which
		// at-least-once delivery and the dedupe in the handler's transaction
		// already allow for.
		s.p.logger.Info("SQS message not acked or nacked within the drain timeout, releasing it",
			s.fields(watermill.LogFields{"message_id": d.id, "message_uuid": d.msg.UUID}))
		s.release(d)
	}
	return false
}

// releaseUntouched gives back a message that waited behind one of its group
// that was not acked: released, never handed out. One that could not be
// unmarshaled stays as it is, as it would have in its turn.
func (s *subscription) releaseUntouched(d delivery) {
	defer s.releaseSlots(1)
	if d.msg == nil {
		return
	}
	d.cancel()
	s.p.logger.Info("SQS message released unhandled: an earlier message of its group in the same batch was not acked",
		s.fields(watermill.LogFields{"message_id": d.id, "message_uuid": d.msg.UUID, "group_id": d.msg.Metadata.Get(metadata.GroupIDKey)}))
	s.release(d)
}

// release makes a received message visible again at once: for another
// consumer now rather than after the visibility timeout.
func (s *subscription) release(d delivery) {
	s.heartbeat.untrack(d.handle)
	s.settleOne(settleRequest{receiptHandle: d.handle, messageID: d.id, visibility: 0})
}

func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (s *subscription) settleOne(r settleRequest) { s.settle <- r }

// settleLoop sends acks, nacks and releases to SQS, up to ten per call: what
// arrives within settleLinger of the first goes together. The acks of one
// received batch, settled by concurrent handlers, arrive together.
func (s *subscription) settleLoop() {
	defer s.settlers.Done()
	linger := time.NewTimer(0)
	<-linger.C
	for r := range s.settle {
		batch := []settleRequest{r}
		linger.Reset(settleLinger)
	fill:
		for len(batch) < maxBatchSize {
			select {
			case r, ok := <-s.settle:
				if !ok {
					break fill
				}
				batch = append(batch, r)
			case <-linger.C:
				break fill
			}
		}
		linger.Stop()
		s.flush(batch)
	}
}

func (s *subscription) flush(batch []settleRequest) {
	var deletes []settleRequest
	byVisibility := map[int32][]settleRequest{}
	for _, r := range batch {
		if r.delete {
			deletes = append(deletes, r)
		} else {
			byVisibility[r.visibility] = append(byVisibility[r.visibility], r)
		}
	}
	if len(deletes) > 0 {
		s.deleteMessages(deletes)
	}
	for visibility, rs := range byVisibility {
		s.changeVisibility(rs, visibility)
	}
}

// settleContext bounds one settle call. It does not derive from the
// subscription: acks must still reach SQS while the subscription shuts down.
func (s *subscription) settleContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.p.cfg.RequestTimeout)
}

func (s *subscription) changeVisibility(rs []settleRequest, visibility int32) {
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(rs))
	for i, r := range rs {
		entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{
			Id:                aws.String(strconv.Itoa(i)),
			ReceiptHandle:     aws.String(r.receiptHandle),
			VisibilityTimeout: visibility,
		}
	}
	ctx, cancel := s.settleContext()
	defer cancel()
	out, err := s.p.client.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(s.queueURL), Entries: entries})
	if err != nil {
		for _, r := range rs {
			s.p.logger.Error("Cannot make SQS message visible again; it returns after its visibility timeout", err, s.fields(watermill.LogFields{"message_id": r.messageID}))
		}
		return
	}
	s.logBatchFailures("Cannot make SQS message visible again; it returns after its visibility timeout", rs, out.Failed)
}

func (s *subscription) logBatchFailures(what string, rs []settleRequest, failed []types.BatchResultErrorEntry) {
	for _, f := range failed {
		id := "unknown"
		if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && i >= 0 && i < len(rs) {
			id = rs[i].messageID
		}
		s.p.logger.Error(what, fmt.Errorf("%s: %s", aws.ToString(f.Code), aws.ToString(f.Message)), s.fields(watermill.LogFields{"message_id": id}))
	}
}
