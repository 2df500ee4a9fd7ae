package sqs

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/eventpipe/eventpipe/app/broker"
)

var _ broker.QueueStatter = (*PubSub)(nil)

// statsAttributes are the three counts GetQueueAttributes reports.
var statsAttributes = []types.QueueAttributeName{
	types.QueueAttributeNameApproximateNumberOfMessages,
	types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
	types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
}

// QueueStats reads ApproximateNumberOfMessages (Ready), …NotVisible
// (InFlight: received and not deleted, or made invisible by a nack's delay)
// and …Delayed (Delayed) of queue's SQS queue (queue is a topology name,
// mapped by QueueName; the result names it as given) with one
// GetQueueAttributes call on the URL Config.QueueURLResolver gives (never
// creating the queue). The
// counts are approximate: eventually consistent, about a minute behind.
// OldestAge is 0: SQS reports ApproximateAgeOfOldestMessage to CloudWatch
// only. It needs the sqs:GetQueueAttributes permission.
func (p *PubSub) QueueStats(ctx context.Context, queue string) (broker.QueueStats, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	url, err := p.queueURL(ctx, queue, false)
	if err != nil {
		return broker.QueueStats{}, fmt.Errorf("queue stats: %w", err)
	}
	out, err := p.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: statsAttributes,
	})
	if missing := (*types.QueueDoesNotExist)(nil); errors.As(err, &missing) {
		// Deleted since its URL was resolved (and cached).
		name, _ := p.names.queue(queue) // resolved above, so valid
		return broker.QueueStats{}, fmt.Errorf("queue stats: %w", &QueueNotFoundError{Topic: queue, Queue: name})
	}
	if err != nil {
		return broker.QueueStats{}, fmt.Errorf("sqs: queue stats of %s: %w", queue, err)
	}
	counts := make([]int64, len(statsAttributes))
	for i, a := range statsAttributes {
		v, ok := out.Attributes[string(a)]
		if !ok {
			return broker.QueueStats{}, fmt.Errorf("sqs: queue stats of %s: %s not returned", queue, a)
		}
		if counts[i], err = strconv.ParseInt(v, 10, 64); err != nil || counts[i] < 0 {
			return broker.QueueStats{}, fmt.Errorf("sqs: queue stats of %s: %s = %q: want a count", queue, a, v)
		}
	}
	return broker.QueueStats{
		Queue:         queue,
		Ready:         counts[0],
		InFlight:      counts[1],
		InFlightKnown: true,
		Delayed:       counts[2],
		Approximate:   true,
		Note:          "SQS counts are approximate: see zero for several minutes before trusting it",
	}, nil
}
