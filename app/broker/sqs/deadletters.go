package sqs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"golang.org/x/sync/errgroup"

	"github.com/eventpipe/eventpipe/app/broker"
)

var _ broker.DeadLetterSourcer = (*PubSub)(nil)

// scanConcurrency bounds the GetQueueAttributes calls of a source scan.
const scanConcurrency = 8

// DeadLetterSources returns the topics of the queues whose RedrivePolicy
// moves messages to the dead-letter queue of topic dlq, sorted. SQS names the
// queues by their SQS names (QueueName); each is mapped back to its topic by
// looking it up among the topics the PubSub knows (Config.Topics, and those
// it has mapped), never by inverting QueueName, which loses '.' versus '-'.
// A queue this PubSub does not know is named by its SQS name without
// Config.QueuePrefix (which maps to it again); one outside the prefix has no
// topic here and is an error. It asks SQS with
// ListDeadLetterSourceQueues (permission sqs:ListDeadLetterSourceQueues);
// where the API lacks that call (the emulator, decision 0004) it reads every
// queue's RedrivePolicy instead (sqs:ListQueues, sqs:GetQueueAttributes),
// which costs a call per queue of the account and region.
func (p *PubSub) DeadLetterSources(ctx context.Context, dlq string) ([]string, error) {
	resolveCtx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	dlqURL, err := p.queueURL(resolveCtx, dlq, false)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("dead-letter sources of %s: %w", dlq, err)
	}
	urls, err := p.listDeadLetterSources(ctx, dlqURL)
	if isUnsupported(err) {
		urls, err = p.scanDeadLetterSources(ctx, dlqURL)
	}
	if err != nil {
		return nil, fmt.Errorf("dead-letter sources of %s: %w", dlq, err)
	}
	names := make([]string, 0, len(urls))
	var outside []string
	for _, u := range urls {
		topic, ok := p.names.topicOrName(path.Base(u))
		if !ok {
			outside = append(outside, path.Base(u))
			continue
		}
		names = append(names, topic)
	}
	if len(outside) > 0 {
		slices.Sort(outside)
		return nil, fmt.Errorf("dead-letter sources of %s: queue(s) %s dead-letter into it but are outside queue prefix %q, so no topic of this deployment names them",
			dlq, strings.Join(slices.Compact(outside), ", "), p.cfg.QueuePrefix)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

func (p *PubSub) listDeadLetterSources(ctx context.Context, dlqURL string) ([]string, error) {
	var urls []string
	pages := sqs.NewListDeadLetterSourceQueuesPaginator(p.client, &sqs.ListDeadLetterSourceQueuesInput{
		QueueUrl:   aws.String(dlqURL),
		MaxResults: aws.Int32(1000),
	})
	for pages.HasMorePages() {
		callCtx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
		page, err := pages.NextPage(callCtx)
		cancel()
		if err != nil {
			return nil, err
		}
		urls = append(urls, page.QueueUrls...)
	}
	return urls, nil
}

// scanDeadLetterSources reads the RedrivePolicy of every queue and returns
// those whose dead-letter target is dlqURL's queue.
func (p *PubSub) scanDeadLetterSources(ctx context.Context, dlqURL string) ([]string, error) {
	dlqAttrs, err := p.queueAttributes(ctx, dlqURL, types.QueueAttributeNameQueueArn)
	if err != nil {
		return nil, err
	}
	dlqARN := dlqAttrs[string(types.QueueAttributeNameQueueArn)]
	if dlqARN == "" {
		return nil, fmt.Errorf("queue %s has no ARN", dlqURL)
	}

	var (
		mu      sync.Mutex
		sources []string
	)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(scanConcurrency)
	pages := sqs.NewListQueuesPaginator(p.client, &sqs.ListQueuesInput{MaxResults: aws.Int32(1000)})
	for pages.HasMorePages() {
		callCtx, cancel := context.WithTimeout(gctx, p.cfg.RequestTimeout)
		page, err := pages.NextPage(callCtx)
		cancel()
		if err != nil {
			_ = g.Wait()
			return nil, fmt.Errorf("list queues: %w", err)
		}
		for _, u := range page.QueueUrls {
			if u == dlqURL {
				continue
			}
			g.Go(func() error {
				attrs, err := p.queueAttributes(gctx, u, types.QueueAttributeNameRedrivePolicy)
				if queueGone(err) {
					return nil // deleted since the listing
				}
				if err != nil {
					return err
				}
				var policy struct {
					DeadLetterTargetArn string `json:"deadLetterTargetArn"`
				}
				raw := attrs[string(types.QueueAttributeNameRedrivePolicy)]
				if raw == "" || json.Unmarshal([]byte(raw), &policy) != nil || policy.DeadLetterTargetArn != dlqARN {
					return nil
				}
				mu.Lock()
				sources = append(sources, u)
				mu.Unlock()
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return sources, nil
}

func (p *PubSub) queueAttributes(ctx context.Context, queueURL string, names ...types.QueueAttributeName) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	out, err := p.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(queueURL), AttributeNames: names})
	if err != nil {
		return nil, fmt.Errorf("read the attributes of %s: %w", queueURL, err)
	}
	return out.Attributes, nil
}

// isUnsupported reports whether err says the API has no such call.
func isUnsupported(err error) bool {
	var apiErr apiError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode() {
	case "InvalidAction", "UnsupportedOperation", "UnknownOperationException":
		return true
	}
	return false
}

// queueGone reports whether err says the queue does not exist.
func queueGone(err error) bool {
	var gone *types.QueueDoesNotExist
	if errors.As(err, &gone) {
		return true
	}
	var apiErr apiError
	return errors.As(err, &apiErr) && strings.HasSuffix(apiErr.ErrorCode(), "NonExistentQueue")
}
