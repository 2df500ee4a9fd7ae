package rabbitmq

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// A nack's delay (metadata.NackDelayKey, the retry middleware's backoff) is
// kept by the broker, not by a sleeping consumer: the counted copy of a nacked
// message (attempts.go) goes to a delay queue of its queue, which holds it for
// the delay and dead-letters it back to the queue through the default
// exchange. The consumer acks the original at once and takes the next
// message: a failing message's wait never holds its queue (eventpipe's rule;
// a sleeping consumer held a queue of poison messages for minutes).
//
// Delay queues have a queue-wide TTL, one queue per delay bucket, so that a
// long delay never holds back a short one at the queue's head (RabbitMQ
// expires messages at the head only). A delay is rounded up to its bucket:
// up to about a third longer than asked, never shorter. They are declared on
// first use, durable, with no consumer: "<queue>.eventpipe-delay-<seconds>s",
// of their queue's type: a quorum queue's retries wait in quorum queues,
// replicated like the queue itself (RabbitMQ 3.10 and later expire and
// dead-letter quorum queues' messages by x-message-ttl as classic queues do).
// A queue whose type changed keeps its old delay queues, which RabbitMQ will
// not redeclare with another type: the counted copy then fails and the nack
// falls back to a plain requeue, without the delay, until they are deleted.

// delayBuckets are the delay queues' TTLs, in seconds.
var delayBuckets = []int{1, 2, 3, 5, 8, 13, 20, 30, 45, 60, 90, 120, 180, 300, 450, 600, 900, 1200, 1800, 2700, 3600}

// delayBucket is the bucket of d: the shortest one not shorter than d, the
// longest for anything longer.
func delayBucket(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	if i, _ := slices.BinarySearch(delayBuckets, s); i < len(delayBuckets) {
		return delayBuckets[i]
	}
	return delayBuckets[len(delayBuckets)-1]
}

// delayQueueName is queue's delay queue for a bucket of seconds.
func delayQueueName(queue string, seconds int) string {
	return queue + ".eventpipe-delay-" + strconv.Itoa(seconds) + "s"
}

// delayQueue returns the name of queue's delay queue for d, declaring it on
// first use (after a reconnect, again) with the type qt of queue.
func (p *PubSub) delayQueue(ctx context.Context, pc *pubChannel, queue string, qt QueueType, d time.Duration) (string, error) {
	seconds := delayBucket(d)
	name := delayQueueName(queue, seconds)
	if _, ok := p.declared.Load(name); ok {
		return name, nil
	}
	args := amqp.Table{
		"x-message-ttl":             int64(seconds) * 1000,
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": queue,
	}
	if qt == QueueQuorum {
		args["x-queue-type"] = string(QueueQuorum)
	}
	_, err := pc.ch.QueueDeclare(name, true, false, false, false, args)
	if err != nil {
		pc.dirty = true // a failed declare closes the channel
		return "", fmt.Errorf("declare delay queue %s: %w", name, err)
	}
	p.declared.Store(name, true)
	return name, ctx.Err()
}

// NacksWithDelay reports that a nack honours metadata.NackDelayKey: the
// counted copy waits in a delay queue, so the middleware nacks at once
// instead of sleeping with the delivery held.
func (p *PubSub) NacksWithDelay() bool { return true }
