package sqs

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/eventpipe/eventpipe/app/broker"
)

// Heartbeat timing, as fractions of the visibility timeout V: a message is
// extended (to V from then) once V/heartbeatDueDivisor has passed since it was
// received or last extended, checked every V/heartbeatTickDivisor. So every
// extension is asked for by V/3 + V/10 < V/2 after the previous one, with the
// rest of V left for the call itself and for clock slack.
const (
	heartbeatDueDivisor  = 3
	heartbeatTickDivisor = 10
	// receiveLatencyAllowance is how much earlier than the end of a
	// ReceiveMessage call SQS may have started a message's visibility clock:
	// a long poll returns as soon as messages are there, so the clock started
	// shortly before the answer arrived (never before the call was sent).
	receiveLatencyAllowance = time.Second
)

// heartbeat keeps the messages a subscription has received, and not yet
// settled, invisible to other consumers: it extends each one's visibility
// before half of the visibility timeout has passed, batching the messages
// that are due together into ChangeMessageVisibilityBatch calls of up to ten.
// A nil *heartbeat (a queue with visibility timeout 0) does nothing.
type heartbeat struct {
	s          *subscription
	visibility time.Duration

	mu      sync.Mutex
	entries map[string]*beat // by receipt handle

	// calling is held while an extension call is under way, so that untrack
	// returns only once no extension of the message can still reach SQS: an
	// extension landing after a nack's visibility change would hide the
	// message again.
	calling sync.Mutex

	done    chan struct{} // closed to stop run
	stopped chan struct{} // closed when run has returned
}

type beat struct {
	messageID string
	// clock says when the handler's attempt must end (middleware.Timeout
	// reports it); past it the message is no longer extended.
	clock   *broker.AttemptClock
	overdue bool // logged once
	due     time.Time
	// visibleAt is the earliest the message may be visible again: a
	// visibility timeout after its receive or its last extension.
	visibleAt time.Time
}

func newHeartbeat(s *subscription, visibility time.Duration) *heartbeat {
	if visibility <= 0 {
		return nil
	}
	return &heartbeat{
		s:          s,
		visibility: visibility,
		entries:    map[string]*beat{},
		done:       make(chan struct{}),
		stopped:    make(chan struct{}),
	}
}

// track starts extending a message whose visibility clock started at
// received, until its handler's attempt is past the deadline clock reports
// (the route's handler timeout): the message is then left to become visible
// when its visibility runs out, and SQS delivers it again (one more receive
// counted) even if the handler never returns. Between attempts (a retry's
// backoff in process) it is extended.
func (h *heartbeat) track(handle, messageID string, received time.Time, clock *broker.AttemptClock) {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.entries[handle] = &beat{
		messageID: messageID,
		clock:     clock,
		due:       received.Add(h.visibility / heartbeatDueDivisor),
		visibleAt: received.Add(h.visibility),
	}
	h.mu.Unlock()
}

// untrack stops extending a message. When it returns, no extension of it is
// under way or will be sent. It returns the earliest time the message may be
// visible again — until then its receipt handle is surely ours — or zero when
// that is not known (a queue without visibility timeout, a message no longer
// tracked).
func (h *heartbeat) untrack(handle string) (visibleAt time.Time) {
	if h == nil {
		return time.Time{}
	}
	h.mu.Lock()
	if b, ok := h.entries[handle]; ok {
		visibleAt = b.visibleAt
	}
	delete(h.entries, handle)
	h.mu.Unlock()
	h.calling.Lock()
	h.calling.Unlock() //nolint:staticcheck // an empty critical section: waits for a call under way
	// An extension that was under way when the entry was read may have
	// moved the time on; the earlier one is the safe answer.
	return visibleAt
}

func (h *heartbeat) start() {
	if h == nil {
		return
	}
	go h.run()
}

// stop ends the heartbeat and waits for it. The subscription calls it after
// every delivery has ended, so nothing is tracked any more.
func (h *heartbeat) stop() {
	if h == nil {
		return
	}
	close(h.done)
	<-h.stopped
}

func (h *heartbeat) run() {
	defer close(h.stopped)
	tick := time.NewTicker(h.visibility / heartbeatTickDivisor)
	defer tick.Stop()
	for {
		select {
		case <-h.done:
			return
		case now := <-tick.C:
			h.extendDue(now)
		}
	}
}

type dueMessage struct {
	handle    string
	messageID string
}

// extendDue extends every tracked message that is due at now.
func (h *heartbeat) extendDue(now time.Time) {
	h.calling.Lock()
	defer h.calling.Unlock()

	h.mu.Lock()
	var due []dueMessage
	var overdue []string
	for handle, b := range h.entries {
		if now.Before(b.due) {
			continue
		}
		if b.clock.Overdue(now) {
			if !b.overdue {
				b.overdue = true
				overdue = append(overdue, b.messageID)
			}
			continue
		}
		due = append(due, dueMessage{handle: handle, messageID: b.messageID})
	}
	h.mu.Unlock()
	for _, id := range overdue {
		h.s.p.logger.Info("SQS message's handler is past its timeout: visibility no longer extended, it will be delivered again",
			h.s.fields(watermill.LogFields{"message_id": id}))
	}

	for start := 0; start < len(due); start += maxBatchSize {
		h.extend(due[start:min(start+maxBatchSize, len(due))])
	}
}

// extend sets the visibility of up to ten messages to the visibility timeout
// from now. A message SQS refuses to extend (deleted meanwhile, visibility
// already expired, 12 h reached) is logged and no longer tracked: it is not
// ours any more. When the whole call fails, every message stays due and is
// tried again at the next tick.
func (h *heartbeat) extend(ms []dueMessage) {
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(ms))
	for i, m := range ms {
		entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{
			Id:                aws.String(strconv.Itoa(i)),
			ReceiptHandle:     aws.String(m.handle),
			VisibilityTimeout: int32(h.visibility / time.Second),
		}
	}
	sent := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), h.s.p.cfg.RequestTimeout)
	defer cancel()
	out, err := h.s.p.client.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{
		QueueUrl: aws.String(h.s.queueURL),
		Entries:  entries,
	})
	if err != nil {
		for _, m := range ms {
			h.s.p.logger.Error("Cannot extend the visibility of an SQS message in progress, retrying", err,
				h.s.fields(watermill.LogFields{"message_id": m.messageID}))
		}
		return
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range out.Successful {
		i, err := strconv.Atoi(aws.ToString(r.Id))
		if err != nil || i < 0 || i >= len(ms) {
			continue
		}
		if b, ok := h.entries[ms[i].handle]; ok {
			b.due = sent.Add(h.visibility / heartbeatDueDivisor)
			b.visibleAt = sent.Add(h.visibility)
		}
	}
	for _, f := range out.Failed {
		id := "unknown"
		if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && i >= 0 && i < len(ms) {
			id = ms[i].messageID
			delete(h.entries, ms[i].handle)
		}
		h.s.p.logger.Error("Cannot extend the visibility of an SQS message in progress; it may be delivered again",
			fmt.Errorf("%s: %s", aws.ToString(f.Code), aws.ToString(f.Message)),
			h.s.fields(watermill.LogFields{"message_id": id}))
	}
}

// queueVisibility returns the visibility timeout messages received by this
// PubSub get on queueURL: Config.VisibilityTimeout, or the queue's own.
func (p *PubSub) queueVisibility(ctx context.Context, queueURL string) (time.Duration, error) {
	if p.cfg.VisibilityTimeout > 0 {
		return p.cfg.VisibilityTimeout, nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	name := string(types.QueueAttributeNameVisibilityTimeout)
	out, err := p.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(queueURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameVisibilityTimeout},
	})
	if err != nil {
		return 0, fmt.Errorf("sqs: read the visibility timeout of %s: %w", queueURL, err)
	}
	seconds, err := strconv.Atoi(out.Attributes[name])
	if err != nil || seconds < 0 {
		return 0, fmt.Errorf("sqs: queue %s has visibility timeout %q: want whole seconds", queueURL, out.Attributes[name])
	}
	return time.Duration(seconds) * time.Second, nil
}
