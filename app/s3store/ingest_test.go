package s3store_test

// The document-ingestion flow on its real parts: objects in the emulator's
// S3, S3 event notifications sent to an SQS ingest queue the way S3 sends
// them (a foreign publisher: the raw body, no message attributes), the
// ingest-worker through the one middleware chain reading S3 with this
// adapter, and DocumentIngested through the PostgreSQL outbox and its relay
// to domain-events.

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/s3store"
	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/handlers/disputes"
)

const headerDoc = "---\ntitle: Chargeback policy\nowner: disputes\n---\n# Chargebacks\n"

// s3Record is one record exactly as S3 writes it; encodedKey is the key as
// S3 encodes it (form-URL-encoding: '+' for a space, %XX for the rest).
func s3Record(eventName, bucket, encodedKey, sequencer string) string {
	return `{"eventVersion":"2.1","eventSource":"aws:s3","awsRegion":"us-east-1","eventTime":"2026-11-12T09:14:03.512Z",` +
		`"eventName":"` + eventName + `","userIdentity":{"principalId":"AWS:AIDAJDPLRKLG7UEXAMPLE"},` +
		`"requestParameters":{"sourceIPAddress":"127.0.0.1"},"responseElements":{"x-amz-request-id":"C3D13FE58DE4C810",` +
		`"x-amz-id-2":"FMyUVURIY8/IgAtTv8xRjskZQpcIZ9KG4V5Wp6S7S/JRWeUWerMUE5JgHvANOjpD"},"s3":{"s3SchemaVersion":"1.0",` +
		`"configurationId":"ingest","bucket":{"name":"` + bucket + `","ownerIdentity":{"principalId":"A3NL1KOZZKExample"},` +
		`"arn":"arn:aws:s3:::` + bucket + `"},"object":{"key":"` + encodedKey + `","size":64,` +
		`"eTag":"d41d8cd98f00b204e9800998ecf8427e","sequencer":"` + sequencer + `"}}}`
}

func s3Event(records ...string) string { return `{"Records":[` + strings.Join(records, ",") + `]}` }

type ingestFlow struct {
	sqs      *sqs.Client
	ingestQ  string // URL
	events   <-chan *message.Message
	dead     <-chan *message.Message
	dlqQueue string
}

func newIngestFlow(t *testing.T, bucket string) *ingestFlow {
	t.Helper()
	ps := testbrokers.New(t, "sqs", testbrokers.Scope(t, "sqs"))
	prefix := "ept-" + strings.ToLower(watermill.NewShortUUID()) + "-"
	ingestQ, domainQ := prefix+disputes.IngestQueue, prefix+disputes.DomainEventsQueue
	logger := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		logger = testbrokers.Logger(t)
	}

	pool, schema := dbtest.Schema(t)
	store, err := disputes.NewPostgres(pool, schema, domainQ)
	require.NoError(t, err)
	ib, err := inbox.NewPostgres(pool, schema)
	require.NoError(t, err)
	relay, err := outbox.NewRelay(pool, ps, outbox.RelayConfig{Schema: schema, PollInterval: 200 * time.Millisecond, MinBackoff: 100 * time.Millisecond}, logger)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = relay.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	short := route.Backoff{Initial: 200 * time.Millisecond, Multiplier: 1.5, Max: 400 * time.Millisecond, Jitter: 0.1}
	h := disputes.Handlers{
		Store: store, Inbox: ib, Logger: logger, IngestBackoff: short,
		Objects: &s3store.Objects{Client: emulator(t), Timeout: 10 * time.Second},
		Bucket:  bucket,
	}
	ingest, err := h.Routes().ByQueue(disputes.IngestQueue)
	require.NoError(t, err)
	f := &ingestFlow{dlqQueue: ingestQ + "-dlq"}
	ingest.Queue, ingest.Policy.DeadLetterQueue = ingestQ, f.dlqQueue
	f.events = testbrokers.Subscribe(t, ps, domainQ)
	f.dead = testbrokers.Subscribe(t, ps, f.dlqQueue)
	testbrokers.StartRoutes(t, ps, nil, logger, ingest)

	f.sqs = sqs.New(sqs.Options{
		Region: testenv.SQSRegion, BaseEndpoint: aws.String(testenv.SQSEndpoint(t)),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	u, err := f.sqs.GetQueueUrl(context.Background(), &sqs.GetQueueUrlInput{QueueName: aws.String(ingestQ)})
	require.NoError(t, err)
	f.ingestQ = aws.ToString(u.QueueUrl)
	return f
}

// send sends body to the ingest queue as S3 does: SendMessage with the JSON
// as the body and no message attributes.
func (f *ingestFlow) send(t *testing.T, body string) string {
	t.Helper()
	out, err := f.sqs.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(f.ingestQ), MessageBody: aws.String(body)})
	require.NoError(t, err)
	return aws.ToString(out.MessageId)
}

// ingested waits for n DocumentIngested events on domain-events and
// returns their documents as bucket/key.
func (f *ingestFlow) ingested(t *testing.T, n int, within time.Duration) []string {
	t.Helper()
	var got []string
	deadline := time.After(within)
	for len(got) < n {
		select {
		case m := <-f.events:
			m.Ack()
			env, ev, err := disputes.DecodeEvent(m.Payload)
			require.NoError(t, err)
			require.NotNil(t, ev.DocumentIngested, "%s", m.Payload)
			assert.Equal(t, disputes.EventDocumentIngested, env.EventType)
			assert.Equal(t, env.EventID, m.UUID, "the message id is the body's event_id")
			got = append(got, ev.DocumentIngested.Bucket+"/"+ev.DocumentIngested.Key)
		case <-deadline:
			require.Failf(t, "too few DocumentIngested", "%d of %d within %s", len(got), n, within)
		}
	}
	return got
}

// drained waits until the ingest queue holds no message, visible or not:
// every message was acknowledged (handled or dropped) or dead-lettered.
func (f *ingestFlow) drained(t *testing.T, within time.Duration) {
	t.Helper()
	testbrokers.Eventually(t, within, "ingest queue drained", func() bool {
		out, err := f.sqs.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(f.ingestQ),
			AttributeNames: []sqstypes.QueueAttributeName{
				sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			},
		})
		return err == nil && out.Attributes["ApproximateNumberOfMessages"] == "0" && out.Attributes["ApproximateNumberOfMessagesNotVisible"] == "0"
	})
}

func TestIngestFromS3OverSQS(t *testing.T) {
	t.Parallel()
	keys := map[string]string{
		"policies/charge backs (2026).md": headerDoc, // S3 sends policies/charge+backs+%282026%29.md
		"politiques/rétro+facturation.md": headerDoc, // S3 sends politiques/r%C3%A9tro%2Bfacturation.md
		"notes/no-header.txt":             "just text, no header block\n",
	}
	c := emulator(t)
	bucket := newBucket(t, c, keys)
	other := newBucket(t, c, map[string]string{"policies/x.md": headerDoc})

	t.Run("two records, URL-encoded keys", func(t *testing.T) {
		t.Parallel()
		f := newIngestFlow(t, bucket)
		f.send(t, s3Event(
			s3Record("ObjectCreated:Put", bucket, "policies/charge+backs+%282026%29.md", "0062A3F1D7B8C4E001"),
			s3Record("ObjectCreated:CompleteMultipartUpload", bucket, "politiques/r%C3%A9tro%2Bfacturation.md", "0062A3F1D7B8C4E002"),
		))
		assert.ElementsMatch(t, []string{bucket + "/policies/charge backs (2026).md", bucket + "/politiques/rétro+facturation.md"},
			f.ingested(t, 2, 30*time.Second), "the real objects, keys decoded as S3 encodes them")
		f.drained(t, 20*time.Second)
		testbrokers.NoMessage(t, f.dead, time.Second, "dead letter")
	})

	t.Run("test event, other events and other buckets dropped", func(t *testing.T) {
		t.Parallel()
		f := newIngestFlow(t, bucket)
		f.send(t, `{"Service":"Amazon S3","Event":"s3:TestEvent","Time":"2026-11-12T09:14:03.512Z","Bucket":"`+bucket+`","RequestId":"5582815E1AEA5ADF","HostId":"8cLeGAmw098X5cv4Zkwcmo8vvZa3eH3eKxsPzbB9wrR+YstdA6Knx4Ip8EXAMPLE"}`)
		f.send(t, s3Event(s3Record("ObjectCreated:Put", other, "policies/x.md", "01")))
		f.send(t, s3Event(s3Record("ObjectRemoved:Delete", bucket, "policies/charge+backs+%282026%29.md", "02")))
		f.drained(t, 20*time.Second)
		testbrokers.NoMessage(t, f.events, 2*time.Second, "DocumentIngested")
		testbrokers.NoMessage(t, f.dead, time.Second, "dead letter")
	})

	for name, tc := range map[string]struct{ body, reason string }{
		"missing object": {
			body:   s3Event(s3Record("ObjectCreated:Put", bucket, "policies/deleted+since.md", "03")),
			reason: "NoSuchKey",
		},
		"no header block": {
			body:   s3Event(s3Record("ObjectCreated:Put", bucket, "notes/no-header.txt", "04")),
			reason: "document without header block",
		},
		"malformed body": {body: `{"Records":[{"eventName":"ObjectCreated:Put"`, reason: "body is not a JSON object"},
	} {
		t.Run(name+" fails until max, then the DLQ", func(t *testing.T) {
			t.Parallel()
			f := newIngestFlow(t, bucket)
			id := f.send(t, tc.body)
			select {
			case m := <-f.dead:
				m.Ack()
				assert.Equal(t, tc.body, string(m.Payload))
				d, ok, err := metadata.DeadLetterOf(m)
				require.NoError(t, err)
				require.True(t, ok)
				assert.Equal(t, "permanent", d.Class)
				assert.Equal(t, disputes.IngestMaxAttempts, d.Attempts, "fail until maxReceiveCount 3 (§4)")
				assert.Contains(t, d.Reason, tc.reason)
			case <-time.After(60 * time.Second):
				require.FailNow(t, "no dead letter", "message %s", id)
			}
			f.drained(t, 20*time.Second)
			testbrokers.NoMessage(t, f.events, time.Second, "DocumentIngested")
		})
	}
}
