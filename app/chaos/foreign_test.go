package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventpipe/eventpipe/app/broker/postgres"
	epsqs "github.com/eventpipe/eventpipe/app/broker/sqs"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// The harness's foreign clients: what a producer that is not eventpipe uses
// on each broker. Raw amqp091-go on RabbitMQ, the AWS SDK on SQS, and on
// Postgres (which has no client of its own) eventpipe's Postgres broker
// publisher, as the spec's producers would use it.

// foreignMsg is one message a foreign client sends.
type foreignMsg struct {
	// ID is the AMQP message_id and the Postgres message's UUID (SQS assigns
	// its own MessageId).
	ID string
	// Group is the FIFO message group (SQS MessageGroupId, x-group-id on
	// Postgres); "" on a standard queue.
	Group string
	// DedupID is the SQS FIFO MessageDeduplicationId (x-dedup-id on
	// Postgres); "" on a standard queue.
	DedupID string
	Body    []byte
	// Headers travel as AMQP headers, SQS string attributes, Postgres
	// metadata.
	Headers map[string]string
}

// foreignDest is where a foreign message goes.
type foreignDest struct {
	// Exchange and RoutingKey address RabbitMQ; an empty Exchange is the
	// default exchange with Queue as the routing key.
	Exchange, RoutingKey string
	// Queue is the queue (SQS, the Postgres topic, RabbitMQ's default
	// exchange).
	Queue string
}

// foreignPublisher is one producer goroutine's client.
type foreignPublisher interface {
	// publish sends m to to; nil means the broker confirmed it. brokerID is
	// the id the broker gave it (SQS's MessageId), else m.ID.
	publish(ctx context.Context, to foreignDest, m foreignMsg) (brokerID string, err error)
	close()
}

// newForeignPublisher returns the flow's foreign client for its broker; pg
// is the Postgres broker the flow opened (Postgres only).
func newForeignPublisher(r *flowRun, pg *postgres.PubSub) (foreignPublisher, error) {
	switch r.kind {
	case "rabbitmq":
		return &amqpPublisher{url: r.sc.amqpDirect}, nil
	case "sqs":
		return &sqsPublisher{client: sqsClient(r.sc.sqsEndpoint), urls: map[string]string{}}, nil
	case "postgres":
		if pg == nil {
			return nil, errors.New("no Postgres broker opened")
		}
		return &pgPublisher{ps: pg}, nil
	}
	return nil, fmt.Errorf("unknown broker %q", r.kind)
}

// sendConfirmed publishes m, retrying with the same id (bounded) until the
// broker confirms it: a retry of an ambiguous failure is a duplicate the
// consumer must absorb. fail sees every failed attempt.
func sendConfirmed(ctx context.Context, pub foreignPublisher, to foreignDest, m foreignMsg, fail func(error)) (string, bool) {
	for attempt := 0; attempt < 30; attempt++ {
		brokerID, err := pub.publish(ctx, to, m)
		if err == nil {
			return brokerID, true
		}
		fail(err)
		if !sleep(ctx, time.Duration(min(200*(attempt+1), 2000))*time.Millisecond) {
			break
		}
	}
	return "", false
}

// amqpPublisher is raw amqp091-go: mandatory, persistent, confirms awaited
// per message, a return is a failure.
type amqpPublisher struct {
	url     string
	conn    *amqp.Connection
	ch      *amqp.Channel
	returns chan amqp.Return
}

func (p *amqpPublisher) connect() error {
	p.close()
	conn, err := amqp.DialConfig(p.url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		_ = conn.Close()
		return err
	}
	p.conn, p.ch = conn, ch
	p.returns = ch.NotifyReturn(make(chan amqp.Return, 16))
	return nil
}

func (p *amqpPublisher) publish(ctx context.Context, to foreignDest, m foreignMsg) (string, error) {
	if p.ch == nil || p.ch.IsClosed() {
		if err := p.connect(); err != nil {
			return "", err
		}
	}
	exchange, key := to.Exchange, to.RoutingKey
	if exchange == "" {
		key = to.Queue
	}
	var headers amqp.Table
	if len(m.Headers) > 0 {
		headers = amqp.Table{}
		for k, v := range m.Headers {
			headers[k] = v
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, amqp.Publishing{
		ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: m.ID, Timestamp: time.Now(),
		Headers: headers, Body: m.Body,
	})
	if err != nil {
		p.close()
		return "", err
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		p.close()
		return "", err
	}
	// A return comes before the confirm: a mandatory message no queue took.
	select {
	case ret := <-p.returns:
		return "", fmt.Errorf("returned %s: %d %s", ret.MessageId, ret.ReplyCode, ret.ReplyText)
	default:
	}
	if !ok {
		return "", errors.New("nacked by the broker")
	}
	return m.ID, nil
}

func (p *amqpPublisher) close() {
	if p.conn != nil {
		_ = p.conn.Close()
	}
	p.conn, p.ch = nil, nil
}

// sqsPublisher is the AWS SDK: the headers as String attributes, the group
// and deduplication id on a FIFO queue.
type sqsPublisher struct {
	client *awssqs.Client
	urls   map[string]string
}

func (p *sqsPublisher) publish(ctx context.Context, to foreignDest, m foreignMsg) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	u, ok := p.urls[to.Queue]
	if !ok {
		out, err := p.client.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(epsqs.QueueName("", to.Queue))})
		if err != nil {
			return "", fmt.Errorf("queue url %s: %w", to.Queue, err)
		}
		u = aws.ToString(out.QueueUrl)
		p.urls[to.Queue] = u
	}
	in := &awssqs.SendMessageInput{QueueUrl: aws.String(u), MessageBody: aws.String(string(m.Body))}
	if m.Group != "" {
		in.MessageGroupId = aws.String(m.Group)
	}
	if m.DedupID != "" {
		in.MessageDeduplicationId = aws.String(m.DedupID)
	}
	if len(m.Headers) > 0 {
		in.MessageAttributes = map[string]types.MessageAttributeValue{}
		for k, v := range m.Headers {
			in.MessageAttributes[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
		}
	}
	out, err := p.client.SendMessage(ctx, in)
	if err != nil {
		return "", err
	}
	return aws.ToString(out.MessageId), nil
}

func (p *sqsPublisher) close() {}

// pgPublisher is eventpipe's Postgres broker publisher: the id as the
// message UUID, group and dedup id as x-group-id / x-dedup-id.
type pgPublisher struct{ ps *postgres.PubSub }

func (p *pgPublisher) publish(_ context.Context, to foreignDest, m foreignMsg) (string, error) {
	msg := message.NewMessage(m.ID, m.Body)
	for k, v := range m.Headers {
		msg.Metadata.Set(k, v)
	}
	if m.Group != "" {
		msg.Metadata.Set(metadata.GroupIDKey, m.Group)
	}
	if m.DedupID != "" {
		msg.Metadata.Set(metadata.DeduplicationIDKey, m.DedupID)
	}
	return m.ID, p.ps.Publish(to.Queue, msg)
}

func (p *pgPublisher) close() {}
