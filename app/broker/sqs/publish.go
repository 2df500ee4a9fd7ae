package sqs

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// PublishError reports the messages of one Publish call that SQS did not
// accept; every other message of the call was sent. Callers that track
// messages one by one (the outbox relay) mark the others as published.
type PublishError struct {
	Topic  string
	Total  int
	Failed []FailedMessage
}

// FailedMessage is one message SQS did not accept.
type FailedMessage struct {
	UUID string
	// Code is SQS's error code for the entry (e.g. InvalidParameterValue), or
	// empty when the whole request failed.
	Code string
	// SenderFault is SQS's verdict that sending it again will fail again.
	SenderFault bool
	Err         error
}

// Error names the first few refused messages and why.
func (e *PublishError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "publish %s: %d of %d messages not sent", e.Topic, len(e.Failed), e.Total)
	const shown = 3
	for i, f := range e.Failed {
		if i == shown {
			fmt.Fprintf(&b, "; and %d more", len(e.Failed)-shown)
			break
		}
		fmt.Fprintf(&b, "; %s: %v", f.UUID, f.Err)
	}
	return b.String()
}

// FailedUUIDs names the messages SQS did not accept; it makes *PublishError a
// broker.PartialPublishError.
func (e *PublishError) FailedUUIDs() []string {
	ids := make([]string, len(e.Failed))
	for i, f := range e.Failed {
		ids[i] = f.UUID
	}
	return ids
}

var _ broker.PartialPublishError = (*PublishError)(nil)

// Unwrap returns each failed message's error, so errors.Is finds a context
// cancellation or a transport error.
func (e *PublishError) Unwrap() []error {
	errs := make([]error, len(e.Failed))
	for i, f := range e.Failed {
		errs[i] = f.Err
	}
	return errs
}

// Publish sends msgs to topic's queue (QueueName), ten (or 1 MiB) per
// SendMessageBatch call, in order. A topic whose queue name SQS would refuse
// fails with a *QueueNameError, and every message is checked against SQS's
// rules first (payload limit, attribute count and names, characters): if one
// fails, nothing is sent and the error is a *broker.PayloadTooLargeError or an
// *InvalidMessageError. If SQS refuses some messages, the others are still
// sent and the error is a *PublishError naming the refused ones.
//
// The first message's context bounds the call, each request also by
// Config.RequestTimeout.
func (p *PubSub) Publish(topic string, msgs ...*message.Message) error {
	if p.isClosed() {
		return ErrClosed
	}
	if len(msgs) == 0 {
		return nil
	}
	queue, err := p.names.queue(topic)
	if err != nil {
		return fmt.Errorf("publish %s: %w", topic, err)
	}
	if err := broker.CheckPayloads(msgs); err != nil {
		return err
	}

	entries := make([]types.SendMessageBatchRequestEntry, len(msgs))
	sizes := make([]int, len(msgs))
	for i, msg := range msgs {
		m, err := p.cfg.Marshaler.Marshal(msg)
		if err != nil {
			return fmt.Errorf("publish %s: marshal message %s: %w", topic, msg.UUID, err)
		}
		if sizes[i], err = checkMessage(msg.UUID, m); err != nil {
			return fmt.Errorf("publish %s: %w", topic, err)
		}
		entries[i] = types.SendMessageBatchRequestEntry{
			// The index, not the UUID: entry ids allow only [A-Za-z0-9_-].
			Id:                aws.String(strconv.Itoa(i)),
			MessageBody:       m.Body,
			MessageAttributes: m.MessageAttributes,
		}
		if isFIFO(queue) {
			group, dedup, err := fifoIDs(msg)
			if err != nil {
				return fmt.Errorf("publish %s: %w", topic, err)
			}
			entries[i].MessageGroupId = aws.String(group)
			entries[i].MessageDeduplicationId = aws.String(dedup)
		}
	}

	ctx := msgs[0].Context()
	resolveCtx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	queueURL, err := p.queueURL(resolveCtx, topic, p.cfg.CreateQueues)
	cancel()
	if err != nil {
		return fmt.Errorf("publish %s: %w", topic, err)
	}

	var failed []FailedMessage
	for start := 0; start < len(entries); {
		end, total := start, 0
		for end < len(entries) && end-start < maxBatchSize && total+sizes[end] <= maxMessageBytes {
			total += sizes[end]
			end++
		}
		failed = append(failed, p.sendBatch(ctx, queueURL, entries[start:end], msgs)...)
		start = end
	}
	if len(failed) > 0 {
		return &PublishError{Topic: topic, Total: len(msgs), Failed: failed}
	}
	return nil
}

// sendBatch sends one SendMessageBatch request and returns the messages it
// did not deliver.
func (p *PubSub) sendBatch(ctx context.Context, queueURL string, entries []types.SendMessageBatchRequestEntry, msgs []*message.Message) []FailedMessage {
	msgOf := func(id *string) *message.Message {
		i, err := strconv.Atoi(aws.ToString(id))
		if err != nil || i < 0 || i >= len(msgs) {
			return nil
		}
		return msgs[i]
	}

	ctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	out, err := p.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{
		QueueUrl: aws.String(queueURL),
		Entries:  entries,
	})
	if err != nil {
		failed := make([]FailedMessage, len(entries))
		for i, e := range entries {
			failed[i] = FailedMessage{UUID: msgOf(e.Id).UUID, Err: err}
		}
		return failed
	}

	var failed []FailedMessage
	for _, f := range out.Failed {
		uuid := "(unknown entry " + aws.ToString(f.Id) + ")"
		if m := msgOf(f.Id); m != nil {
			uuid = m.UUID
		}
		failed = append(failed, FailedMessage{
			UUID:        uuid,
			Code:        aws.ToString(f.Code),
			SenderFault: f.SenderFault,
			Err:         fmt.Errorf("%s: %s", aws.ToString(f.Code), aws.ToString(f.Message)),
		})
	}
	// SQS answers for every entry; one it leaves out was not confirmed sent.
	if answered := len(out.Successful) + len(out.Failed); answered < len(entries) {
		seen := make(map[string]bool, answered)
		for _, s := range out.Successful {
			seen[aws.ToString(s.Id)] = true
		}
		for _, f := range out.Failed {
			seen[aws.ToString(f.Id)] = true
		}
		for _, e := range entries {
			if !seen[aws.ToString(e.Id)] {
				failed = append(failed, FailedMessage{UUID: msgOf(e.Id).UUID, Err: errors.New("no result for this entry in SQS's answer")})
			}
		}
	}
	return failed
}

// isFIFO reports whether queue is a FIFO queue: SQS requires the suffix.
func isFIFO(queue string) bool { return strings.HasSuffix(queue, ".fifo") }

// fifoDedupID is what SQS accepts as a MessageDeduplicationId: 1..128
// printable ASCII characters.
var fifoDedupID = regexp.MustCompile(`^[!-~]{1,128}$`)

// fifoIDs returns the message group and deduplication ids of msg for a FIFO
// queue: the group from metadata.GroupIDKey (which a message received from a
// FIFO queue carries), else metadata.OrderingKeyKey (the outbox's
// per-aggregate order); the deduplication id from metadata.DeduplicationIDKey,
// else the message id — the event id, so that a relay publishing an event
// twice within SQS's five-minute window stores it once. A dead letter
// (metadata.DeadLetterKey) keeps the group but gets a deduplication id of its
// own, derived from that one and its dead-letter record
// (metadata.DerivedDeduplicationID): with the original's, SQS would silently
// drop a message dead-lettered a second time within five minutes (redriven,
// failed again) while its original is acked.
func fifoIDs(msg *message.Message) (group, dedup string, err error) {
	group = msg.Metadata.Get(metadata.GroupIDKey)
	if group == "" {
		group = msg.Metadata.Get(metadata.OrderingKeyKey)
	}
	if !fifoDedupID.MatchString(group) {
		return "", "", &InvalidMessageError{MessageUUID: msg.UUID, Reason: fmt.Sprintf("a FIFO queue needs a message group id (metadata %s or %s) of 1..128 printable ASCII characters, got %q", metadata.GroupIDKey, metadata.OrderingKeyKey, group)}
	}
	dedup = metadata.DeduplicationID(msg)
	if record := msg.Metadata.Get(metadata.DeadLetterKey); record != "" {
		// The record names the attempts and the time: every dead-lettering
		// of one message differs, a retried send of one does not.
		dedup = metadata.DerivedDeduplicationID(msg, "dead-letter "+record)
	}
	if !fifoDedupID.MatchString(dedup) {
		return "", "", &InvalidMessageError{MessageUUID: msg.UUID, Reason: fmt.Sprintf("deduplication id %q: want 1..128 printable ASCII characters", dedup)}
	}
	return group, dedup, nil
}
