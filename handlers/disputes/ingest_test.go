package disputes_test

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/handlers/disputes"
)

const withHeaderBlock = "---\ntitle: Chargeback policy\nowner: disputes\n---\n# Chargebacks\n"

// An S3 ObjectCreated notification as S3 sends it (AWS docs' example shape).
const s3Example = `{"Records":[{"eventVersion":"2.1","eventSource":"aws:s3","awsRegion":"ap-south-1",
"eventTime":"2026-11-12T09:14:03.512Z","eventName":"ObjectCreated:Put","userIdentity":{"principalId":"AWS:X"},
"requestParameters":{"sourceIPAddress":"10.0.0.1"},"responseElements":{"x-amz-request-id":"R"},
"s3":{"s3SchemaVersion":"1.0","configurationId":"ingest","bucket":{"name":"kb-docs","ownerIdentity":{"principalId":"X"},"arn":"arn:aws:s3:::kb-docs"},
"object":{"key":"policies/charge+backs%282026%29.md","size":1024,"eTag":"d41d8cd98f00b204e9800998ecf8427e","sequencer":"0055AED6DCD90281E5"}}},
{"eventName":"ObjectRemoved:Delete","s3":{"bucket":{"name":"kb-docs"},"object":{"key":"old.md"}}}]}`

func TestDecodeS3Notification(t *testing.T) {
	t.Parallel()
	ev, err := disputes.DecodeS3Notification([]byte(s3Example))
	require.NoError(t, err)
	assert.Equal(t, disputes.S3Event{Records: []disputes.ObjectRef{
		{Bucket: "kb-docs", Key: "policies/charge backs(2026).md", Sequencer: "0055AED6DCD90281E5", EventName: "ObjectCreated:Put"},
		{Bucket: "kb-docs", Key: "old.md", EventName: "ObjectRemoved:Delete"},
	}}, ev, "URL-decoded keys; every record, in order")
	assert.True(t, ev.Records[0].Created())
	assert.False(t, ev.Records[1].Created(), "a removal is not ingested")

	ev, err = disputes.DecodeS3Notification([]byte(`{"Service":"Amazon S3","Event":"s3:TestEvent","Time":"2026-11-12T09:14:03.512Z","Bucket":"kb-docs","RequestId":"R","HostId":"H"}`))
	require.NoError(t, err)
	assert.Equal(t, disputes.S3Event{TestEvent: true, TestBucket: "kb-docs"}, ev, "S3's test event is not a document")

	ev, err = disputes.DecodeS3Notification([]byte(`{"Records":[{"eventName":"ObjectRemoved:Delete","s3":{"bucket":{"name":"b"},"object":{"key":"%zz"}}}]}`))
	require.NoError(t, err, "a record that is not ingested need not decode")
	assert.Equal(t, "%zz", ev.Records[0].Key)

	for name, body := range map[string]string{
		"null": `null`, "no records": `{"Records":[]}`, "not json": `{"Records":`, "array": `[]`,
		"records not a list": `{"Records":{"eventName":"ObjectCreated:Put"}}`,
		"no bucket":          `{"Records":[{"eventName":"ObjectCreated:Put","s3":{"object":{"key":"k"}}}]}`,
		"no key":             `{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"}}}]}`,
		"bad key":            `{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"%zz"}}}]}`,
	} {
		_, err := disputes.DecodeS3Notification([]byte(body))
		require.ErrorIs(t, err, disputes.ErrInvalidEnvelope, name)
	}
	// The error names the field at fault.
	for body, want := range map[string]string{
		`{"Records":[]}`: "field Records: fewer than 1 items",
		`{"Records":[{"eventName":"ObjectCreated:Put","s3":{"object":{"key":"k"}}}]}`:                     "field Records[0].s3.bucket: required",
		`{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":7}}}]}`: "field Records[0].s3.object.key: want null or string, got number",
	} {
		_, err := disputes.DecodeS3Notification([]byte(body))
		assert.ErrorContains(t, err, want, body)
	}

	ev, err = disputes.DecodeS3Notification(disputes.S3Notification("b", "a b+c%.md", time.Now()))
	require.NoError(t, err)
	require.Len(t, ev.Records, 1)
	assert.Equal(t, "a b+c%.md", ev.Records[0].Key, "S3Notification round-trips")
}

func TestHasHeaderBlock(t *testing.T) {
	t.Parallel()
	for doc, want := range map[string]bool{
		"---\ntitle: x\n---\nbody":    true,
		"---\r\ntitle: x\r\n---\r\n":  true,
		"---\n---\nbody":              false, // empty header
		"title: x\n---\n":             false,
		"---\ntitle: x\nno end":       false,
		"":                            false,
		"# Just markdown\n":           false,
		"---\n: no name\n---\n":       false,
		"---\nfoo\nbar: baz\n---\nok": true,
	} {
		assert.Equal(t, want, disputes.HasHeaderBlock([]byte(doc)), "%q", doc)
	}
}

// published records what the store's outbox publishes.
type published struct {
	mu   sync.Mutex
	msgs []*message.Message
}

func (p *published) Publish(_ string, msgs ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.msgs = append(p.msgs, msgs...)
	return nil
}
func (p *published) Close() error { return nil }

func (p *published) ingested(t *testing.T) []disputes.DocumentIngested {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	var docs []disputes.DocumentIngested
	for _, m := range p.msgs {
		env, ev, err := disputes.DecodeEvent(m.Payload)
		require.NoError(t, err)
		require.NotNil(t, ev.DocumentIngested, env.EventType)
		docs = append(docs, *ev.DocumentIngested)
	}
	return docs
}

// ingestWorker is the ingest-worker's handler on a memory store, objects and
// inbox, for bucket; its log lines go to logs.
func ingestWorker(t *testing.T, objects disputes.Objects, bucket string) (handle func(body string) error, pub *published, logs *strings.Builder) {
	t.Helper()
	pub, logs = &published{}, &strings.Builder{}
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, logs}, nil))
	h := disputes.Handlers{
		Store:   disputes.NewMemory(disputes.MemoryOptions{Outbox: outbox.AfterCommit{Publisher: pub}}),
		Inbox:   inbox.NewMemory(),
		Logger:  logger,
		Objects: objects,
		Bucket:  bucket,
	}
	ingest, err := h.Routes().ByQueue(disputes.IngestQueue)
	require.NoError(t, err)
	return func(body string) error {
		return ingest.Handle(message.NewMessage(watermill.NewUUID(), []byte(body)))
	}, pub, logs
}

// logged asserts that one line of logs has msg, then attrs.
func logged(t *testing.T, logs fmt.Stringer, msg, attrs string) {
	t.Helper()
	for _, line := range strings.Split(logs.String(), "\n") {
		if i := strings.Index(line, msg); i >= 0 && strings.Contains(line[i:], attrs) {
			return
		}
	}
	assert.Failf(t, "not logged", "%s … %s in\n%s", msg, attrs, logs)
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// s3Record is one record as S3 writes it (key URL-encoded by the caller).
func s3Record(eventName, bucket, encodedKey, sequencer string) string {
	return `{"eventVersion":"2.1","eventSource":"aws:s3","awsRegion":"us-east-1","eventTime":"2026-11-12T09:14:03.512Z",
"eventName":"` + eventName + `","userIdentity":{"principalId":"AWS:X"},"requestParameters":{"sourceIPAddress":"10.0.0.1"},
"responseElements":{"x-amz-request-id":"R","x-amz-id-2":"I"},"s3":{"s3SchemaVersion":"1.0","configurationId":"ingest",
"bucket":{"name":"` + bucket + `","ownerIdentity":{"principalId":"X"},"arn":"arn:aws:s3:::` + bucket + `"},
"object":{"key":"` + encodedKey + `","size":64,"eTag":"e","sequencer":"` + sequencer + `"}}}`
}

func TestIngestWorkerReadsWhatS3Sends(t *testing.T) {
	t.Parallel()
	objects := disputes.NewMemoryObjects()
	objects.Put("kb-docs", "policies/charge backs (2026).md", []byte(withHeaderBlock))
	objects.Put("kb-docs", "faq/a+b.md", []byte(withHeaderBlock))
	objects.Put("other", "x.md", []byte(withHeaderBlock))
	handle, pub, logs := ingestWorker(t, objects, "kb-docs")

	body := `{"Records":[` + s3Record("ObjectCreated:Put", "kb-docs", "policies/charge+backs+%282026%29.md", "01") + `,` +
		s3Record("ObjectCreated:CompleteMultipartUpload", "kb-docs", "faq/a%2Bb.md", "02") + `,` +
		s3Record("ObjectRemoved:Delete", "kb-docs", "old.md", "03") + `,` +
		s3Record("ObjectCreated:Copy", "other", "x.md", "04") + `]}`
	require.NoError(t, handle(body))
	assert.Equal(t, []disputes.DocumentIngested{
		{Bucket: "kb-docs", Key: "policies/charge backs (2026).md"}, {Bucket: "kb-docs", Key: "faq/a+b.md"},
	}, pub.ingested(t), "two ObjectCreated records of the bucket, keys decoded ('+' a space, %2B a plus)")
	logged(t, logs, `level=INFO msg="S3 event dropped: only ObjectCreated events are ingested"`, `bucket=kb-docs key=old.md event_name=ObjectRemoved:Delete`)
	logged(t, logs, `level=WARN msg="S3 event dropped: not the configured bucket"`, `bucket=other key=x.md event_name=ObjectCreated:Copy configured_bucket=kb-docs`)

	require.NoError(t, handle(body), "redelivered: each record once")
	assert.Len(t, pub.ingested(t), 2)

	require.NoError(t, handle(`{"Service":"Amazon S3","Event":"s3:TestEvent","Time":"2026-11-12T09:14:03.512Z","Bucket":"kb-docs","RequestId":"R","HostId":"H"}`))
	logged(t, logs, `msg="S3 test event dropped (sent when a bucket notification is configured)"`, `bucket=kb-docs`)
	assert.Len(t, pub.ingested(t), 2)
}

func TestIngestWorkerPermanentFailures(t *testing.T) {
	t.Parallel()
	objects := disputes.NewMemoryObjects()
	objects.Put("kb-docs", "notes.txt", []byte("just text\n"))
	handle, pub, _ := ingestWorker(t, objects, "kb-docs")
	for name, body := range map[string]string{
		"malformed body":  `{"Records":`,
		"not S3":          `{"event_id":"evt_1"}`,
		"missing object":  `{"Records":[` + s3Record("ObjectCreated:Put", "kb-docs", "gone.md", "01") + `]}`,
		"no header block": `{"Records":[` + s3Record("ObjectCreated:Put", "kb-docs", "notes.txt", "02") + `]}`,
	} {
		err := handle(body)
		require.Error(t, err, name)
		assert.Equal(t, failure.Permanent, failure.Of(err), "%s: %v", name, err)
	}
	assert.Empty(t, pub.ingested(t))
}
