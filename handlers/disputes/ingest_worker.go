package disputes

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/msgctx"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/schemas"
)

// IngestConsumer is the ingest-worker's name in the inbox.
const IngestConsumer = "ingest-worker"

// IngestMaxAttempts is ingest-queue's maxReceiveCount (§3).
const IngestMaxAttempts = 3

// MaxHeaderBytes bounds where a document's header block must end.
const MaxHeaderBytes = 64 << 10

// ErrNoHeaderBlock is wrapped by the permanent error of a document without
// a header block (§4's example of a permanent error).
var ErrNoHeaderBlock = errors.New("document without header block")

// Objects reads the documents S3 notifications point at: the S3 adapter
// (app/s3store, handed in through Adapters) in production, MemoryObjects
// for sample traffic and tests. An error is transient unless marked
// failure.Permanent (the object or bucket does not exist, access is denied,
// the object is too large): a permanent one fails until ingest-queue's
// maxReceiveCount, then ingest-dlq (§4).
type Objects interface {
	Get(ctx context.Context, bucket, key string) ([]byte, error)
}

// ObjectRef is one record of an S3 event notification.
type ObjectRef struct {
	Bucket string
	// Key is URL-decoded ('+' is a space, %XX a byte), as S3 names the
	// object; a record that is not ObjectCreated keeps it as sent when it
	// does not decode.
	Key       string
	Sequencer string
	// EventName is the record's eventName without S3's "s3:" prefix
	// (which S3 leaves out of records, but configurations write), e.g.
	// ObjectCreated:Put.
	EventName string
}

// Created reports whether the record announces a new object
// (ObjectCreated:Put, :Post, :Copy, :CompleteMultipartUpload): the only
// records the ingest-worker reads.
func (r ObjectRef) Created() bool { return strings.HasPrefix(r.EventName, "ObjectCreated:") }

// S3Event is a decoded S3 event notification.
type S3Event struct {
	// TestEvent is S3's "s3:TestEvent", sent once when a bucket's
	// notification configuration is saved; it has no records. TestBucket is
	// the bucket it names.
	TestEvent  bool
	TestBucket string
	// Records are the notification's records in order, whatever their
	// eventName (S3 may put several in one message).
	Records []ObjectRef
}

// DecodeS3Notification decodes an S3 event notification as S3 sends it to
// SQS — Records[].eventName, Records[].s3.bucket.name,
// Records[].s3.object.key (URL-encoded, '+' for a space) and .sequencer, or
// S3's {"Event":"s3:TestEvent",...} — leniently: unknown fields are
// ignored. The notification's schema (open: S3 is the producer) states what
// a record must have: an ObjectCreated record names a bucket and a key that
// decodes. Errors wrap ErrInvalidEnvelope and name the field.
func DecodeS3Notification(body []byte) (S3Event, error) {
	v, err := schemas.Decode(body)
	if err != nil {
		return S3Event{}, invalid("body is not a JSON object: %v", err)
	}
	cat, err := schemas.Default()
	if err != nil {
		return S3Event{}, invalid("schemas: %v", err)
	}
	m, ok := cat.Message("disputes", "S3EventNotification")
	if !ok {
		return S3Event{}, invalid("schemas: no S3EventNotification")
	}
	if err := check(m, v, schemas.Lenient); err != nil {
		return S3Event{}, err
	}
	var n struct {
		Event   any `json:"Event"`
		Bucket  any `json:"Bucket"`
		Records []struct {
			EventName string `json:"eventName"`
			S3        struct {
				Bucket struct {
					Name string `json:"name"`
				} `json:"bucket"`
				Object struct {
					Key       string `json:"key"`
					Sequencer string `json:"sequencer"`
				} `json:"object"`
			} `json:"s3"`
		} `json:"Records"`
	}
	if err := json.Unmarshal(body, &n); err != nil {
		return S3Event{}, invalid("not an S3 event notification: %v", err)
	}
	if n.Event == "s3:TestEvent" {
		bucket, _ := n.Bucket.(string)
		return S3Event{TestEvent: true, TestBucket: bucket}, nil
	}
	ev := S3Event{Records: make([]ObjectRef, 0, len(n.Records))}
	for _, r := range n.Records {
		ref := ObjectRef{Bucket: r.S3.Bucket.Name, Key: r.S3.Object.Key, Sequencer: r.S3.Object.Sequencer,
			EventName: strings.TrimPrefix(r.EventName, "s3:")}
		// An ObjectCreated key is URL-encoded (the schema's pattern);
		// another record keeps its key as sent when it does not decode.
		if key, err := url.QueryUnescape(r.S3.Object.Key); err == nil {
			ref.Key = key
		}
		ev.Records = append(ev.Records, ref)
	}
	return ev, nil
}

// ValidateS3Notification is the check `eventpipe publish` runs for
// ingest-queue. S3 is the producer, not us, so it is the decoder's check.
func ValidateS3Notification(body []byte) error {
	_, err := DecodeS3Notification(body)
	return err
}

// HasHeaderBlock reports whether doc starts with a header block: a "---"
// line, at least one "name: value" line, and a closing "---" line, within
// MaxHeaderBytes. The spec names the rule (§4: "document without header
// block" is permanent) but not the format; this front-matter shape is ours.
func HasHeaderBlock(doc []byte) bool {
	if len(doc) > MaxHeaderBytes {
		doc = doc[:MaxHeaderBytes]
	}
	sc := bufio.NewScanner(bytes.NewReader(doc))
	sc.Buffer(make([]byte, 0, 4096), MaxHeaderBytes)
	if !sc.Scan() || strings.TrimSpace(sc.Text()) != "---" {
		return false
	}
	fields := 0
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "---" {
			return fields > 0
		}
		if name, _, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) != "" {
			fields++
		}
	}
	return false
}

// handleIngest is the ingest-worker: each ObjectCreated record of the
// configured bucket names a document which, checked for its header block,
// is recorded with its DocumentIngested event (through the outbox on
// Postgres), once per (bucket, key, sequencer). S3's test event, records of
// other events and records of other buckets are dropped with a log line; a
// body that is not an S3 notification is permanent.
func (h Handlers) handleIngest(msg *message.Message) error {
	ctx := msg.Context()
	log := msgctx.Logger(ctx, h.Logger, msg)
	ev, err := DecodeS3Notification(msg.Payload)
	if err != nil {
		log.ErrorContext(ctx, "S3 notification rejected", slog.Any("error", err))
		return failure.AsPermanent(err)
	}
	if ev.TestEvent {
		log.InfoContext(ctx, "S3 test event dropped (sent when a bucket notification is configured)", slog.String("bucket", ev.TestBucket))
		return nil
	}
	for _, ref := range ev.Records {
		attrs := []any{slog.String("bucket", ref.Bucket), slog.String("key", ref.Key), slog.String("event_name", ref.EventName)}
		switch {
		case !ref.Created():
			log.InfoContext(ctx, "S3 event dropped: only ObjectCreated events are ingested", attrs...)
			continue
		case h.Bucket != "" && ref.Bucket != h.Bucket:
			log.WarnContext(ctx, "S3 event dropped: not the configured bucket", append(attrs, slog.String("configured_bucket", h.Bucket))...)
			continue
		}
		if err := h.ingest(ctx, log, ref); err != nil {
			return err
		}
	}
	return nil
}

// ingest reads and records one ObjectCreated record's document in the
// inbox's transaction.
func (h Handlers) ingest(ctx context.Context, log *slog.Logger, ref ObjectRef) error {
	// A re-upload has a new sequencer; a redelivered notification not.
	id := ref.Bucket + "/" + ref.Key + "@" + ref.Sequencer
	err := h.Inbox.Process(ctx, IngestConsumer, id, func(ctx context.Context) error {
		doc, err := h.Objects.Get(ctx, ref.Bucket, ref.Key)
		if err != nil {
			return fmt.Errorf("get s3://%s/%s: %w", ref.Bucket, ref.Key, err)
		}
		if !HasHeaderBlock(doc) {
			return failure.Permanentf("s3://%s/%s: %w", ref.Bucket, ref.Key, ErrNoHeaderBlock)
		}
		eventID, err := h.Store.RecordDocument(ctx, Document{Bucket: ref.Bucket, Key: ref.Key})
		if errors.Is(err, ErrExists) {
			log.InfoContext(ctx, "document already ingested", slog.String("bucket", ref.Bucket), slog.String("key", ref.Key))
			return nil
		}
		if err != nil {
			return err
		}
		log.InfoContext(ctx, "document ingested", slog.String("bucket", ref.Bucket), slog.String("key", ref.Key), slog.String("event_id", eventID))
		return nil
	})
	switch {
	case failure.Of(err) == failure.Duplicate:
		log.InfoContext(ctx, "duplicate S3 notification record, skipped", slog.String("bucket", ref.Bucket), slog.String("key", ref.Key))
		return nil
	case err != nil:
		if failure.Of(err) == failure.Permanent {
			log.ErrorContext(ctx, "document rejected", slog.String("bucket", ref.Bucket), slog.String("key", ref.Key), slog.Any("error", err))
		}
		return err
	}
	return nil
}

// DefaultIngestBackoff is ingest-queue's wait between attempts: its
// transient failures are the model API's rate limits (§4: "OpenAI 429"),
// which last tens of seconds, so 30 s then 60 s — a Retry-After the API
// sends wins when longer — well under the 360 s visibility timeout.
func DefaultIngestBackoff() route.Backoff {
	return route.Backoff{Initial: 30 * time.Second, Multiplier: 2, Max: 2 * time.Minute, Jitter: 0.2}
}

// IngestPolicy is ingest-queue's policy: three attempts by broker
// redelivery (maxReceiveCount 3), permanent errors failing until then (§4),
// then ingest-dlq.
func (h Handlers) IngestPolicy() route.Policy {
	b := h.IngestBackoff
	if b == (route.Backoff{}) {
		b = DefaultIngestBackoff()
	}
	return route.Policy{
		MaxAttempts: IngestMaxAttempts, Redelivery: route.Broker, Backoff: b,
		OnPermanent: route.FailUntilMax, DeadLetterQueue: IngestDLQ,
	}
}

// SampleBucket is the bucket of the sample traffic's document (MemoryObjects).
const SampleBucket = "sample-kb"

// MemoryObjects is an in-memory Objects: the sample traffic's and the
// tests' double, never what a production configuration gets.
type MemoryObjects struct {
	mu   sync.Mutex
	objs map[[2]string][]byte
}

// NewMemoryObjects returns an empty MemoryObjects.
func NewMemoryObjects() *MemoryObjects { return &MemoryObjects{objs: map[[2]string][]byte{}} }

// Put stores an object.
func (m *MemoryObjects) Put(bucket, key string, body []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objs[[2]string{bucket, key}] = body
}

// Get implements Objects; a missing object is a permanent error.
func (m *MemoryObjects) Get(_ context.Context, bucket, key string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.objs[[2]string{bucket, key}]
	if !ok {
		return nil, failure.Permanentf("s3://%s/%s: no such object", bucket, key)
	}
	return b, nil
}

// S3Notification returns the body S3 sends for an object created in bucket
// under key (the standard event notification shape, key URL-encoded), for
// samples and tests.
func S3Notification(bucket, key string, at time.Time) []byte {
	type obj struct {
		Key       string `json:"key"`
		Sequencer string `json:"sequencer"`
	}
	type rec struct {
		EventVersion string `json:"eventVersion"`
		EventSource  string `json:"eventSource"`
		EventTime    string `json:"eventTime"`
		EventName    string `json:"eventName"`
		S3           struct {
			Bucket struct {
				Name string `json:"name"`
			} `json:"bucket"`
			Object obj `json:"object"`
		} `json:"s3"`
	}
	r := rec{EventVersion: "2.1", EventSource: "aws:s3", EventTime: at.UTC().Format(occurredAtLayout), EventName: "ObjectCreated:Put"}
	r.S3.Bucket.Name = bucket
	r.S3.Object = obj{Key: url.QueryEscape(key), Sequencer: fmt.Sprintf("%016X", at.UnixNano())}
	b, _ := json.Marshal(struct {
		Records []rec `json:"Records"`
	}{[]rec{r}})
	return b
}
