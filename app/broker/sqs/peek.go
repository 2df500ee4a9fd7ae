package sqs

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/eventpipe/eventpipe/app/broker"
)

var _ broker.Peeker = (*PubSub)(nil)

// peekMisses is how many receives in a row that bring no message not seen
// yet end a peek: SQS samples its servers on each short-poll receive, so one
// empty answer does not mean that nothing is left.
const peekMisses = 3

// peekVisibility is the visibility timeout of a peek's receives, in
// seconds: the shortest that can be asked for.
const peekVisibility = 1

// peekEffects is what a peek leaves changed on SQS (decision 0029).
const peekEffects = "SQS has no read-only receive: each message read had its ApproximateReceiveCount raised by one and was out of consumers' reach while the peek ran (one second at most); " +
	"eventpipe's redrive does not carry that count to the copy it sends, so a dead letter loses no attempt, but a peek of a work queue would spend one"

// Peek reads up to max distinct messages of queue's SQS queue with
// short-poll receives whose visibility timeout is one second (the SDK sends
// no 0): nothing is deleted, a message is out of a consumer's reach until the
// peek ends (then made visible again) or that second is over, and each message's receive count goes up by one (SQS has no other
// way to read a message). It stops at max, or
// after peekMisses receives in a row without a new message. SQS has no order
// on a standard queue and samples its servers, so a peek of a large queue
// sees a part of it and is never Complete; on a FIFO queue each receive
// returns the first messages of the groups it can, so a peek sees the head
// of each group. Needs sqs:ReceiveMessage.
func (p *PubSub) Peek(ctx context.Context, queue string, max int) (broker.Peeked, error) {
	out := broker.Peeked{Effects: peekEffects}
	if max <= 0 {
		return out, nil
	}
	resolveCtx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	url, err := p.queueURL(resolveCtx, queue, false)
	cancel()
	if err != nil {
		return broker.Peeked{}, fmt.Errorf("peek: %w", err)
	}
	seen := map[string]bool{}
	var handles []string
	// Visible again as soon as the peek is over, not a second later.
	defer func() { p.releasePeeked(context.WithoutCancel(ctx), url, handles) }()
	for misses := 0; misses < peekMisses && len(out.Messages) < max; {
		callCtx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
		got, err := p.client.ReceiveMessage(callCtx, &sqs.ReceiveMessageInput{
			QueueUrl:            aws.String(url),
			MaxNumberOfMessages: int32(min(max-len(out.Messages), 10)),
			// 0 is what a peek wants, but the SDK does not send a zero
			// (it means "the queue's default"): the smallest it sends.
			VisibilityTimeout:           peekVisibility,
			WaitTimeSeconds:             0,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: receiveSystemAttributes,
		})
		cancel()
		if missing := (*types.QueueDoesNotExist)(nil); errors.As(err, &missing) {
			name, _ := p.names.queue(queue)
			return broker.Peeked{}, fmt.Errorf("peek: %w", &QueueNotFoundError{Topic: queue, Queue: name})
		}
		if err != nil {
			return broker.Peeked{}, fmt.Errorf("sqs: peek %s: %w", queue, err)
		}
		fresh := false
		for i := range got.Messages {
			m := &got.Messages[i]
			id := aws.ToString(m.MessageId)
			if seen[id] || len(out.Messages) == max {
				continue
			}
			seen[id] = true
			handles = append(handles, aws.ToString(m.ReceiptHandle))
			fresh = true
			msg, err := p.cfg.Unmarshaler.Unmarshal(m)
			if err != nil || msg == nil {
				continue // the subscriber cannot read it either
			}
			setDeliveryMetadata(msg.Metadata, m.Attributes)
			out.Messages = append(out.Messages, msg)
		}
		if fresh {
			misses = 0
		} else {
			misses++
		}
	}
	return out, nil
}

// releasePeeked makes the peeked messages visible again (visibility 0), ten
// per call; a failure only leaves one hidden until its second is over.
func (p *PubSub) releasePeeked(ctx context.Context, url string, handles []string) {
	for start := 0; start < len(handles); start += 10 {
		batch := handles[start:min(start+10, len(handles))]
		entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(batch))
		for i, h := range batch {
			entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(h), VisibilityTimeout: 0}
		}
		callCtx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
		_, err := p.client.ChangeMessageVisibilityBatch(callCtx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url), Entries: entries})
		cancel()
		if err != nil {
			p.logger.Info("Could not make peeked messages visible at once; they are in a second", watermill.LogFields{"queue_url": url, "error": err.Error()})
		}
	}
}
