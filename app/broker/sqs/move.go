package sqs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/eventpipe/eventpipe/app/broker"
)

var _ broker.MessageMover = (*PubSub)(nil)

// moveTaskPoll is how often MoveMessages asks SQS how far its task is.
var moveTaskPoll = time.Second

// maxMoveRate is SQS's limit on a move task's MaxNumberOfMessagesPerSecond.
const maxMoveRate = 500

// MoveMessages moves every message of the dead-letter queue of topic dlq to
// the queue of topic to with StartMessageMoveTask (permissions
// sqs:StartMessageMoveTask, sqs:ListMessageMoveTasks,
// sqs:CancelMessageMoveTask, and on the queues those the task needs), then
// follows the task with ListMessageMoveTasks until it ends; a ctx that ends
// first cancels it. SQS moves each message unchanged (body, attributes) and
// only from a queue that is some queue's dead-letter target. Where the API
// lacks the call (the emulator, decision 0004) it moves them itself in
// batches of ten: ReceiveMessage, SendMessageBatch of the same body and
// attributes (with the group and a deduplication id derived from the
// message id on FIFO), DeleteMessageBatch of what was sent; a crash between
// the send and the delete leaves a duplicate in the DLQ, never a loss.
func (p *PubSub) MoveMessages(ctx context.Context, dlq, to string, perSecond int, progress func(moved int64)) (int64, error) {
	resolveCtx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	dlqURL, err := p.queueURL(resolveCtx, dlq, false)
	if err == nil {
		var toURL string
		toURL, err = p.queueURL(resolveCtx, to, false)
		cancel()
		if err != nil {
			return 0, fmt.Errorf("move %s to %s: %w", dlq, to, err)
		}
		return p.move(ctx, dlq, dlqURL, to, toURL, perSecond, progress)
	}
	cancel()
	return 0, fmt.Errorf("move %s to %s: %w", dlq, to, err)
}

func (p *PubSub) move(ctx context.Context, dlq, dlqURL, to, toURL string, perSecond int, progress func(int64)) (int64, error) {
	arn := func(u string) (string, error) {
		attrs, err := p.queueAttributes(ctx, u, types.QueueAttributeNameQueueArn)
		if err != nil {
			return "", err
		}
		if attrs[string(types.QueueAttributeNameQueueArn)] == "" {
			return "", fmt.Errorf("queue %s has no ARN", u)
		}
		return attrs[string(types.QueueAttributeNameQueueArn)], nil
	}
	src, err := arn(dlqURL)
	if err != nil {
		return 0, fmt.Errorf("move %s to %s: %w", dlq, to, err)
	}
	dst, err := arn(toURL)
	if err != nil {
		return 0, fmt.Errorf("move %s to %s: %w", dlq, to, err)
	}
	in := &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(src), DestinationArn: aws.String(dst)}
	if perSecond > 0 {
		in.MaxNumberOfMessagesPerSecond = aws.Int32(int32(min(perSecond, maxMoveRate))) //nolint:gosec // bounded by maxMoveRate
	}
	callCtx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	started, err := p.client.StartMessageMoveTask(callCtx, in)
	cancel()
	if isUnsupported(err) {
		return p.moveByHand(ctx, dlqURL, toURL, isFIFO(toURL), perSecond, progress)
	}
	if err != nil {
		return 0, fmt.Errorf("move %s to %s: start a message move task: %w", dlq, to, err)
	}
	moved, err := p.followMoveTask(ctx, src, aws.ToString(started.TaskHandle), progress)
	if err != nil {
		return moved, fmt.Errorf("move %s to %s: %w", dlq, to, err)
	}
	return moved, nil
}

// followMoveTask polls the move task of source handle until it ends.
func (p *PubSub) followMoveTask(ctx context.Context, source, handle string, progress func(int64)) (int64, error) {
	var moved int64
	t := time.NewTicker(moveTaskPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			// Do not leave the task moving behind a stopped command.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.RequestTimeout)
			_, cerr := p.client.CancelMessageMoveTask(cctx, &sqs.CancelMessageMoveTaskInput{TaskHandle: aws.String(handle)})
			cancel()
			return moved, errors.Join(ctx.Err(), cerr)
		case <-t.C:
		}
		callCtx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
		// The most recent task of a source comes first.
		out, err := p.client.ListMessageMoveTasks(callCtx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(source), MaxResults: aws.Int32(1)})
		cancel()
		if err != nil {
			return moved, fmt.Errorf("follow message move task: %w", err)
		}
		if len(out.Results) == 0 {
			return moved, errors.New("follow message move task: SQS lists no task for the queue")
		}
		task := out.Results[0]
		moved = task.ApproximateNumberOfMessagesMoved
		if progress != nil {
			progress(moved)
		}
		switch aws.ToString(task.Status) {
		case "RUNNING", "CANCELLING":
			continue
		case "COMPLETED":
			return moved, nil
		default: // FAILED, CANCELLED
			return moved, fmt.Errorf("message move task %s: %s %s", handle, aws.ToString(task.Status), aws.ToString(task.FailureReason))
		}
	}
}

// moveByHand is MoveMessages where SQS has no move task: batches of ten
// received, sent to toURL and deleted, until a receive finds none.
func (p *PubSub) moveByHand(ctx context.Context, dlqURL, toURL string, fifo bool, perSecond int, progress func(int64)) (int64, error) {
	var moved int64
	start := time.Now()
	for {
		callCtx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout+time.Second)
		got, err := p.client.ReceiveMessage(callCtx, &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(dlqURL),
			MaxNumberOfMessages:         10,
			WaitTimeSeconds:             1,
			VisibilityTimeout:           int32(p.cfg.RequestTimeout.Seconds()) * 2, //nolint:gosec // a few seconds
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameMessageGroupId},
		})
		cancel()
		if err != nil {
			return moved, fmt.Errorf("move by hand: receive: %w", err)
		}
		if len(got.Messages) == 0 {
			return moved, nil
		}
		entries := make([]types.SendMessageBatchRequestEntry, len(got.Messages))
		for i, m := range got.Messages {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: m.Body, MessageAttributes: m.MessageAttributes}
			if fifo {
				group := m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
				if group == "" {
					group = aws.ToString(m.MessageId)
				}
				entries[i].MessageGroupId = aws.String(group)
				// The same dead letter moved twice (its delete lost) is
				// dropped by the source queue the second time.
				entries[i].MessageDeduplicationId = aws.String("moved-" + aws.ToString(m.MessageId))
			}
		}
		callCtx, cancel = context.WithTimeout(ctx, p.cfg.RequestTimeout)
		sent, err := p.client.SendMessageBatch(callCtx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(toURL), Entries: entries})
		cancel()
		if err != nil {
			p.release(ctx, dlqURL, got.Messages)
			return moved, fmt.Errorf("move by hand: send: %w", err)
		}
		var del []types.DeleteMessageBatchRequestEntry
		var unsent []types.Message
		for _, ok := range sent.Successful {
			i, _ := strconv.Atoi(aws.ToString(ok.Id))
			del = append(del, types.DeleteMessageBatchRequestEntry{Id: ok.Id, ReceiptHandle: got.Messages[i].ReceiptHandle})
		}
		for _, f := range sent.Failed {
			i, _ := strconv.Atoi(aws.ToString(f.Id))
			unsent = append(unsent, got.Messages[i])
		}
		if len(del) > 0 {
			callCtx, cancel = context.WithTimeout(ctx, p.cfg.RequestTimeout)
			out, err := p.client.DeleteMessageBatch(callCtx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(dlqURL), Entries: del})
			cancel()
			if err != nil {
				return moved, fmt.Errorf("move by hand: delete what was sent (it is now in both queues): %w", err)
			}
			moved += int64(len(out.Successful))
			if progress != nil {
				progress(moved)
			}
		}
		if len(unsent) > 0 {
			p.release(ctx, dlqURL, unsent)
			return moved, fmt.Errorf("move by hand: SQS refused %d of a batch: %s %s", len(sent.Failed), aws.ToString(sent.Failed[0].Code), aws.ToString(sent.Failed[0].Message))
		}
		if perSecond > 0 {
			// Keep the average at perSecond.
			due := start.Add(time.Duration(float64(moved) / float64(perSecond) * float64(time.Second)))
			select {
			case <-time.After(time.Until(due)):
			case <-ctx.Done():
				return moved, ctx.Err()
			}
		}
	}
}

// release makes received messages visible again at once.
func (p *PubSub) release(ctx context.Context, queueURL string, msgs []types.Message) {
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(msgs))
	for i, m := range msgs {
		entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0}
	}
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.RequestTimeout)
	defer cancel()
	_, _ = p.client.ChangeMessageVisibilityBatch(callCtx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(queueURL), Entries: entries})
}
