package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// DeadLetterView is what `eventpipe dlq peek` shows of one dead letter.
type DeadLetterView struct {
	ID   string `json:"id"`
	Size int    `json:"size"`
	// History is nil for a message the broker dead-lettered on its own (a
	// redrive policy or delivery limit), which carries none.
	History  *metadata.DeadLetter `json:"history,omitempty"`
	Metadata map[string]string    `json:"metadata"`
}

// PeekDeadLetters returns up to max messages of the dead-letter queue dlq
// without removing them: each is given back at once after it is read. It
// stops at max, when a message comes round a second time, or when none
// arrives for idle.
func PeekDeadLetters(ctx context.Context, sub message.Subscriber, dlq string, max int, idle time.Duration) ([]DeadLetterView, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	msgs, err := sub.Subscribe(ctx, dlq)
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", dlq, err)
	}
	seen := map[string]bool{}
	var views []DeadLetterView
	for len(views) < max {
		msg, err := next(ctx, msgs, idle)
		if err != nil || msg == nil {
			return views, err
		}
		// Read before it is given back: giving back adds the redelivery
		// request to its metadata.
		view := DeadLetterView{ID: msg.UUID, Size: len(msg.Payload), Metadata: maps.Clone(map[string]string(msg.Metadata))}
		giveBack(msg)
		if seen[msg.UUID] {
			break
		}
		seen[msg.UUID] = true
		if info, ok, err := metadata.DeadLetterOf(msg); err == nil && ok {
			view.History = &info
			delete(view.Metadata, metadata.DeadLetterKey)
		}
		views = append(views, view)
	}
	return views, nil
}

// Redriven is one dead letter sent back by RedriveDeadLetters.
type Redriven struct {
	ID string `json:"id"`
	To string `json:"to"`
}

// RedriveDeadLetters moves up to max messages (0 = all) of the dead-letter
// queue dlq back to a queue: to, or else the source queue each one's history
// names, or else — for a message the broker dead-lettered on its own (an SQS
// redrive policy), which has no history of ours — the one queue the broker
// says dead-letters into dlq (broker.DeadLetterSourcer, asked at most once).
// The copy keeps the message id (the consumer's inbox still knows it), body
// and metadata (with a FIFO message's group), without the dead-letter history
// and attempt count, and gets a deduplication id of its own, derived from the
// dead letter's (metadata.DerivedDeduplicationID): on an SQS FIFO queue the
// original's would make SQS drop a copy redriven within five minutes of the
// original, while the dead letter is deleted. The dead letter is acked only
// after the copy is published. It stops when none arrives for idle, and at the
// first message it cannot place (no history, no source the broker names, and
// no to), which it leaves in the queue.
func RedriveDeadLetters(ctx context.Context, sub message.Subscriber, pub message.Publisher, dlq, to string, max int, idle time.Duration) ([]Redriven, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	msgs, err := sub.Subscribe(ctx, dlq)
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", dlq, err)
	}
	brokerSource := sync.OnceValues(func() (string, error) { return deadLetterSource(ctx, sub, dlq) })
	var done []Redriven
	for max == 0 || len(done) < max {
		msg, err := next(ctx, msgs, idle)
		if err != nil || msg == nil {
			return done, err
		}
		target := to
		if target == "" {
			info, ok, err := metadata.DeadLetterOf(msg)
			if err == nil && ok && info.SourceQueue != "" {
				target = info.SourceQueue
			} else if target, err = brokerSource(); err != nil {
				giveBack(msg)
				return done, fmt.Errorf("message %s has no dead-letter history naming its source queue, and %w: redrive it with --to", msg.UUID, err)
			}
		}
		again := message.NewMessage(msg.UUID, msg.Payload)
		for k, v := range msg.Metadata {
			switch k {
			case metadata.DeadLetterKey, metadata.AttemptKey, metadata.FirstFailureKey, metadata.NackDelayKey, metadata.ExplicitNackDelayKey:
			default:
				again.Metadata.Set(k, v)
			}
		}
		// The history tells one dead-lettering of the message from the next;
		// the same dead letter redriven twice (its ack lost) gets the same
		// id, so the source queue still drops the second copy.
		again.Metadata.Set(metadata.DeduplicationIDKey, metadata.DerivedDeduplicationID(msg, "redrive "+msg.Metadata.Get(metadata.DeadLetterKey)))
		again.SetContext(ctx)
		if err := pub.Publish(target, again); err != nil {
			giveBack(msg)
			return done, fmt.Errorf("redrive %s to %s: %w", msg.UUID, target, err)
		}
		msg.Ack()
		done = append(done, Redriven{ID: msg.UUID, To: target})
	}
	return done, nil
}

// deadLetterSource is the one queue the broker says dead-letters into dlq.
func deadLetterSource(ctx context.Context, sub message.Subscriber, dlq string) (string, error) {
	sourcer, ok := sub.(broker.DeadLetterSourcer)
	if !ok {
		return "", errors.New("the broker cannot name the queue that dead-letters here")
	}
	sources, err := sourcer.DeadLetterSources(ctx, dlq)
	switch {
	case err != nil:
		return "", fmt.Errorf("the broker could not name its source: %w", err)
	case len(sources) == 0:
		return "", fmt.Errorf("no queue's redrive policy targets %s", dlq)
	case len(sources) > 1:
		return "", fmt.Errorf("several queues dead-letter to %s (%s)", dlq, strings.Join(sources, ", "))
	}
	return sources[0], nil
}

// giveBack nacks msg asking for its redelivery at once, explicitly: a peek or
// a redrive that stops must leave the dead letter where the next command
// finds it, not hidden for the queue's visibility timeout (a plain nack on
// SQS leaves the visibility as it is).
func giveBack(msg *message.Message) {
	msg.Metadata.Set(metadata.NackDelayKey, "0s")
	msg.Metadata.Set(metadata.ExplicitNackDelayKey, "true")
	msg.Nack()
}

// next waits up to idle for a message; nil when none came.
func next(ctx context.Context, msgs <-chan *message.Message, idle time.Duration) (*message.Message, error) {
	t := time.NewTimer(idle)
	defer t.Stop()
	select {
	case msg, ok := <-msgs:
		if !ok {
			return nil, errors.New("subscription closed")
		}
		return msg, nil
	case <-t.C:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
