package booking

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventpipe/eventpipe/app/broker/postgres"
)

// Depther counts the messages a queue holds.
type Depther interface {
	// Depth returns how many messages queue holds. A queue that does not
	// exist is an error, never 0: a misspelt name must not pass the gate.
	Depth(ctx context.Context, queue string) (int64, error)
}

// ErrDepthNotSupported: the broker cannot count a queue's messages.
var ErrDepthNotSupported = errors.New("queue depth not supported by this broker")

// DrainReport is what CheckDrained found.
type DrainReport struct {
	Queue       string
	Messages    int64
	DLQ         string
	DLQMessages int64
}

// Drained reports whether both queues are empty.
func (r DrainReport) Drained() bool { return r.Messages == 0 && r.DLQMessages == 0 }

func (r DrainReport) String() string {
	s := fmt.Sprintf("%s: %d", r.Queue, r.Messages)
	if r.DLQ != "" {
		s += fmt.Sprintf(", %s: %d", r.DLQ, r.DLQMessages)
	}
	if r.Drained() {
		return s + " — drained"
	}
	return s + " — not drained"
}

// CheckDrained is the drain-to-zero gate (§"DLQ posture"): before promoting
// a release that changes the message-body schema, queue and its DLQ (dlq;
// "" for none) must hold no message, so no pre-deploy message reaches a
// post-deploy consumer. It reports the counts; promote only when
// report.Drained() and err is nil. Stop the producers first, or the answer
// is stale as soon as it is given.
func CheckDrained(ctx context.Context, d Depther, queue, dlq string) (DrainReport, error) {
	r := DrainReport{Queue: queue, DLQ: dlq}
	var err error
	if r.Messages, err = d.Depth(ctx, queue); err != nil {
		return r, fmt.Errorf("drain gate: %s: %w", queue, err)
	}
	if dlq != "" {
		if r.DLQMessages, err = d.Depth(ctx, dlq); err != nil {
			return r, fmt.Errorf("drain gate: %s: %w", dlq, err)
		}
	}
	return r, nil
}

// SQSAPI is the part of the SQS client SQSDepth uses.
type SQSAPI interface {
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// SQSDepth counts with GetQueueAttributes on the queue's URL:
// ApproximateNumberOfMessages (visible) + …NotVisible (in flight: a
// consumer may still fail and give it back) + …Delayed. The counts are
// approximate (eventually consistent, about a minute): AWS's advice is to
// see zero for several minutes in a row before trusting it.
type SQSDepth struct{ Client SQSAPI }

var sqsDepthAttributes = []types.QueueAttributeName{
	types.QueueAttributeNameApproximateNumberOfMessages,
	types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
	types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
}

// Depth implements Depther.
func (s SQSDepth) Depth(ctx context.Context, queue string) (int64, error) {
	u, err := s.Client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(queue)})
	if err != nil {
		return 0, fmt.Errorf("sqs: queue url: %w", err)
	}
	out, err := s.Client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: u.QueueUrl, AttributeNames: sqsDepthAttributes})
	if err != nil {
		return 0, fmt.Errorf("sqs: queue attributes: %w", err)
	}
	var total int64
	for _, a := range sqsDepthAttributes {
		v, ok := out.Attributes[string(a)]
		if !ok {
			return 0, fmt.Errorf("sqs: %s not returned", a)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("sqs: %s = %q: %w", a, v, err)
		}
		total += n
	}
	return total, nil
}

// PostgresDepth counts the rows of the Postgres broker's queue table
// (Schema.TablePrefix+queue, app/broker/postgres): acked rows are deleted,
// so every row is a message still to handle, in flight or waiting for a
// redelivery.
type PostgresDepth struct {
	Pool *pgxpool.Pool
	// Schema and TablePrefix as the broker's postgres.Config; their
	// defaults when empty.
	Schema      string
	TablePrefix string
}

// Depth implements Depther.
func (p PostgresDepth) Depth(ctx context.Context, queue string) (int64, error) {
	schema, prefix := p.Schema, p.TablePrefix
	if schema == "" {
		schema = postgres.DefaultSchema
	}
	if prefix == "" {
		prefix = postgres.DefaultTablePrefix
	}
	var n int64
	err := p.Pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, prefix + queue}.Sanitize()).Scan(&n)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return 0, fmt.Errorf("postgres broker: queue %s does not exist", queue)
	}
	if err != nil {
		return 0, fmt.Errorf("postgres broker: count %s: %w", queue, err)
	}
	return n, nil
}

// RabbitMQDepth counts with a passive queue declare on URL: the queue's
// ready messages. RabbitMQ does not count messages delivered and not yet
// acknowledged there: stop the consumers before the gate (or read
// `rabbitmqctl list_queues name messages`, which includes them).
type RabbitMQDepth struct{ URL string }

// Depth implements Depther.
func (r RabbitMQDepth) Depth(ctx context.Context, queue string) (int64, error) {
	conn, err := amqp.DialConfig(r.URL, amqp.Config{Dial: amqp.DefaultDial(dialTimeout(ctx))})
	if err != nil {
		return 0, fmt.Errorf("rabbitmq: %w", err)
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("rabbitmq: %w", err)
	}
	defer func() { _ = ch.Close() }()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return 0, fmt.Errorf("rabbitmq: queue %s: %w", queue, err)
	}
	return int64(q.Messages), nil
}

// NoDepth is the embedded broker's Depther: its messages live in the
// process and do not survive a deploy, so there is nothing to drain, and
// nothing to count with. Depth always fails with ErrDepthNotSupported.
type NoDepth struct{ Broker string }

// Depth implements Depther.
func (n NoDepth) Depth(context.Context, string) (int64, error) {
	return 0, fmt.Errorf("%s broker: %w", n.Broker, ErrDepthNotSupported)
}

// dialTimeout is ctx's time left, 30 s without a deadline.
func dialTimeout(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d), time.Millisecond)
	}
	return 30 * time.Second
}
