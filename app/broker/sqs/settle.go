package sqs

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// A failed delete of an acked message is tried again: left alone, the message
// is delivered a second time and, on a FIFO queue, holds up its group until
// its visibility timeout runs out. The retries are short and few (about
// 0.1 + 0.2 + 0.4 s), inside the settler, so a failing SQS slows the
// subscription's intake instead of piling up retries; and none is sent once
// the message may be visible again, when the receipt handle may belong to
// another consumer's delivery.
const (
	deleteAttempts     = 4
	deleteRetryInitial = 100 * time.Millisecond
)

// deleteFailure is one message a delete call did not delete.
type deleteFailure struct {
	r   settleRequest
	err error
	// stale: SQS no longer takes the receipt handle (the visibility timeout
	// ran out, the message was received again). Redelivery is expected.
	stale bool
	// final: sending the same delete again cannot succeed.
	final bool
}

// deleteMessages deletes acked messages, retrying what fails for another
// reason than a stale receipt handle; see deleteAttempts.
func (s *subscription) deleteMessages(rs []settleRequest) {
	wait := deleteRetryInitial
	for attempt := 1; len(rs) > 0; attempt++ {
		var retry []settleRequest
		for _, f := range s.deleteOnce(rs) {
			fields := s.fields(watermill.LogFields{"message_id": f.r.messageID, "attempt": attempt})
			switch {
			case f.stale:
				s.p.logger.Info("SQS no longer takes the receipt handle of an acked message (its visibility timeout ran out); it will be delivered again",
					fields.Add(watermill.LogFields{"error": f.err.Error()}))
			case f.final, attempt == deleteAttempts, !f.r.visibleAt.IsZero() && !time.Now().Add(wait).Before(f.r.visibleAt):
				s.p.logger.Error("Cannot delete acked SQS message; it will be delivered again", f.err, fields)
			default:
				retry = append(retry, f.r)
			}
		}
		if len(retry) == 0 {
			return
		}
		for _, r := range retry {
			s.p.logger.Info("Cannot delete acked SQS message, retrying",
				s.fields(watermill.LogFields{"message_id": r.messageID, "attempt": attempt, "retry_in": wait.String()}))
		}
		// ±20 %, so that settlers failing together do not retry together.
		time.Sleep(time.Duration(float64(wait) * (0.8 + 0.4*rand.Float64())))
		wait *= 2
		rs = retry
	}
}

// deleteOnce sends one DeleteMessageBatch for rs and returns what it did not
// delete.
func (s *subscription) deleteOnce(rs []settleRequest) []deleteFailure {
	entries := make([]types.DeleteMessageBatchRequestEntry, len(rs))
	for i, r := range rs {
		entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(r.receiptHandle)}
	}
	ctx, cancel := s.settleContext()
	defer cancel()
	out, err := s.p.client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(s.queueURL), Entries: entries})
	if err != nil {
		// The SDK has retried what it judges transient; a few more short
		// tries cost little next to a duplicate delivery.
		var apiErr apiError
		stale := errors.As(err, &apiErr) && staleReceipt(apiErr.ErrorCode(), apiErr.ErrorMessage())
		failed := make([]deleteFailure, len(rs))
		for i, r := range rs {
			failed[i] = deleteFailure{r: r, err: err, stale: stale}
		}
		return failed
	}
	var failed []deleteFailure
	answered := make(map[int]bool, len(rs))
	for _, r := range out.Successful {
		if i, err := strconv.Atoi(aws.ToString(r.Id)); err == nil {
			answered[i] = true
		}
	}
	for _, f := range out.Failed {
		i, err := strconv.Atoi(aws.ToString(f.Id))
		if err != nil || i < 0 || i >= len(rs) {
			s.p.logger.Error("SQS answered a delete for an entry it was not sent", fmt.Errorf("%s: %s", aws.ToString(f.Code), aws.ToString(f.Message)), s.fields(nil))
			continue
		}
		answered[i] = true
		code, msg := aws.ToString(f.Code), aws.ToString(f.Message)
		failed = append(failed, deleteFailure{
			r:     rs[i],
			err:   fmt.Errorf("%s: %s", code, msg),
			stale: staleReceipt(code, msg),
			// SQS's own verdict: the same request would fail again.
			final: f.SenderFault,
		})
	}
	// SQS answers for every entry; one it leaves out was not confirmed
	// deleted.
	for i, r := range rs {
		if !answered[i] {
			failed = append(failed, deleteFailure{r: r, err: errors.New("no result for this entry in SQS's answer")})
		}
	}
	return failed
}

// apiError is what smithy.APIError, the SDK's error for an answer SQS gave,
// has that we read.
type apiError interface {
	ErrorCode() string
	ErrorMessage() string
}

// staleReceipt reports whether SQS refused a receipt handle for being no
// longer valid: ReceiptHandleIsInvalid, or (real SQS, for a handle whose
// visibility timeout ran out) InvalidParameterValue "The receipt handle has
// expired".
func staleReceipt(code, message string) bool {
	if strings.HasSuffix(code, "ReceiptHandleIsInvalid") {
		return true
	}
	return strings.HasSuffix(code, "InvalidParameterValue") && strings.Contains(strings.ToLower(message), "receipt handle")
}
