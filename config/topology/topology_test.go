package topology_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/topology"
)

// fourteenDays is the DLQ retention of every SQS spec that states one.
const fourteenDays = 14 * 24 * time.Hour

func load(t *testing.T, file string) topology.Topology {
	t.Helper()
	top, err := topology.Load(file)
	require.NoError(t, err, file)
	return top
}

// TestFilesLoad: every spec's file is valid and names its spec.
func TestFilesLoad(t *testing.T) {
	t.Parallel()
	for file, name := range map[string]string{
		"interviews.yaml": "interviews",
		"disputes.yaml":   "disputes",
		"stackup.yaml":    "stackup",
		"booking.yaml":    "booking",
		"joinlink.yaml":   "joinlink",
	} {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, name, load(t, file).Name)
		})
	}
}

// TestStackUpShape: the StackUp RabbitMQ messaging contract, §1 — 4 exchanges
// (3 topic + stackup.dlx direct), 15 work queues, 15 DLQs, 14 single-key
// bindings plus the realtime queue's three wildcard bindings.
func TestStackUpShape(t *testing.T) {
	t.Parallel()
	top := load(t, "stackup.yaml")
	assert.Equal(t, []topology.Exchange{
		{Name: "stackup.core-to-ai", Type: topology.Topic},
		{Name: "stackup.ai-to-core", Type: topology.Topic},
		{Name: "stackup.realtime", Type: topology.Topic},
		{Name: "stackup.dlx", Type: topology.Direct},
	}, top.Exchanges)
	assert.Len(t, top.Queues, 15, "work queues")
	dlqs := 0
	for _, q := range top.Queues {
		if q.DeadLetter != nil {
			dlqs++
		}
	}
	assert.Equal(t, 15, dlqs, "work queues with a DLQ")
	assert.Len(t, top.AllQueues(), 30, "work queues + DLQs")
	assert.Len(t, top.Bindings, 17, "14 work-queue bindings + 3 realtime wildcards")
}

// TestStackUpQueues: every §1 work queue with its exchange, routing key(s) and
// dead-letter arguments (x-dead-letter-exchange=stackup.dlx,
// x-dead-letter-routing-key=dlq.<queue>), and that a message published with each
// key reaches exactly that queue.
func TestStackUpQueues(t *testing.T) {
	t.Parallel()
	top := load(t, "stackup.yaml")
	tests := []struct {
		queue    string
		exchange string
		keys     []string
	}{
		{"ai.analyze.repository", "stackup.core-to-ai", []string{"analyze.repository"}},
		{"ai.analyze.resume", "stackup.core-to-ai", []string{"analyze.resume"}},
		{"ai.analyze.cover_letter", "stackup.core-to-ai", []string{"analyze.cover_letter"}},
		{"ai.analyze.web", "stackup.core-to-ai", []string{"analyze.web"}},
		{"ai.generate.questions", "stackup.core-to-ai", []string{"generate.questions"}},
		{"ai.generate.followup", "stackup.core-to-ai", []string{"generate.followup"}},
		{"ai.generate.feedback", "stackup.core-to-ai", []string{"generate.feedback"}},
		{"ai.analyze.voice", "stackup.core-to-ai", []string{"analyze.voice"}},
		{"ai.generate.tts", "stackup.core-to-ai", []string{"generate.tts"}},
		{"core.callback.analysis", "stackup.ai-to-core", []string{"callback.analysis"}},
		{"core.callback.questions", "stackup.ai-to-core", []string{"callback.questions"}},
		{"core.callback.feedback", "stackup.ai-to-core", []string{"callback.feedback"}},
		{"core.callback.voice", "stackup.ai-to-core", []string{"callback.voice"}},
		{"core.callback.tts", "stackup.ai-to-core", []string{"callback.tts"}},
		{"q.realtime.session.notify", "stackup.realtime", []string{"realtime.session.*", "realtime.user.*", "realtime.document.*"}},
	}
	require.Len(t, tests, len(top.Queues), "the table covers every declared queue")
	for _, tt := range tests {
		t.Run(tt.queue, func(t *testing.T) {
			t.Parallel()
			q, ok := top.Queue(tt.queue)
			require.True(t, ok, "queue %s not declared", tt.queue)
			// §6: classic queues + DLX today; quorum/x-delivery-limit is Phase 2.
			// The AI request queues take one request at a time (eventpipe's
			// choice; the spec gives no prefetch): slow model work must not
			// hold prefetched requests that a crash would charge an attempt.
			batch := 0
			if strings.HasPrefix(tt.queue, "ai.") {
				batch = 1
			}
			assert.Equal(t, topology.Queue{
				Name:      tt.queue,
				Type:      topology.Classic,
				BatchSize: batch,
				DeadLetter: &topology.DeadLetter{
					Queue:      "dlq." + tt.queue,
					Exchange:   "stackup.dlx",
					RoutingKey: "dlq." + tt.queue,
				},
			}, q)
			assert.Equal(t, "dlq."+tt.queue, q.DeadLetter.DeadLetterRoutingKey())
			dlq, ok := top.Queue("dlq." + tt.queue)
			require.True(t, ok, "DLQ of %s not declared", tt.queue)
			assert.Equal(t, topology.Classic, dlq.Type)
			// The DLQ's binding to stackup.dlx is implied by dead_letter (the
			// model binds it), so bindings: holds none and Route cannot see it.
			for _, b := range top.Bindings {
				assert.NotEqual(t, "stackup.dlx", b.Exchange, "DLX bindings are implied by dead_letter, not declared twice")
			}

			var keys []string
			for _, b := range top.Bindings {
				if b.Queue == tt.queue {
					assert.Equal(t, tt.exchange, b.Exchange, "binding %s", b.Pattern)
					keys = append(keys, b.Pattern)
				}
			}
			assert.Equal(t, tt.keys, keys)
			if len(tt.keys) == 1 {
				assert.Equal(t, []string{tt.queue}, top.Route(tt.exchange, tt.keys[0]))
			}
		})
	}
}

// TestStackUpRealtimeRouting: §5.13 — the single queue q.realtime.session.notify
// binds realtime.session.*, realtime.user.* and realtime.document.*.
func TestStackUpRealtimeRouting(t *testing.T) {
	t.Parallel()
	top := load(t, "stackup.yaml")
	tests := []struct {
		exchange, key string
		want          []string
	}{
		{"stackup.realtime", "realtime.session.notify", []string{"q.realtime.session.notify"}},
		{"stackup.realtime", "realtime.user.notify", []string{"q.realtime.session.notify"}},
		{"stackup.realtime", "realtime.document.notify", []string{"q.realtime.session.notify"}},
		{"stackup.realtime", "realtime.session.x", []string{"q.realtime.session.notify"}},
		// '*' is exactly one word.
		{"stackup.realtime", "realtime.session", nil},
		{"stackup.realtime", "realtime.session.notify.extra", nil},
		{"stackup.realtime", "realtime.other.notify", nil},
		// Keys route only on their own exchange.
		{"stackup.core-to-ai", "realtime.session.notify", nil},
		{"stackup.realtime", "analyze.resume", nil},
		{"stackup.core-to-ai", "callback.analysis", nil},
	}
	for _, tt := range tests {
		t.Run(tt.exchange+"/"+tt.key, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, top.Route(tt.exchange, tt.key))
		})
	}
}

// TestSQSQueues: every stated value of the SQS specs' queues, compared whole so
// that an unstated value sneaking in fails too.
func TestSQSQueues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file string
		want topology.Queue
	}{
		// The interviews SQS report-queues spec, §1: visibility 180 s, batch 10,
		// 3 receives, DLQ retention 14 days.
		{"interviews.yaml", topology.Queue{
			Name:              "interview-completed",
			VisibilityTimeout: 180 * time.Second,
			BatchSize:         10,
			MaxReceives:       3,
			DeadLetter:        &topology.DeadLetter{Queue: "interview-completed-dlq", Retention: fourteenDays},
		}},
		// §2: visibility 1800 s, batch 1, 3 receives, DLQ retention 14 days.
		{"interviews.yaml", topology.Queue{
			Name:              "report-generate",
			VisibilityTimeout: 1800 * time.Second,
			BatchSize:         1,
			MaxReceives:       3,
			DeadLetter:        &topology.DeadLetter{Queue: "report-generate-dlq", Retention: fourteenDays},
		}},
		// The disputes outbox domain-events spec, §3 queue table, ingest-queue
		// column.
		{"disputes.yaml", topology.Queue{
			Name:              "ingest-queue",
			VisibilityTimeout: 360 * time.Second,
			ReceiveWait:       20 * time.Second,
			Encryption:        "sse-sqs",
			BatchSize:         5,
			MaxReceives:       3,
			DeadLetter:        &topology.DeadLetter{Queue: "ingest-dlq", Retention: fourteenDays},
			// S3's event notifications arrive here (the ingest-worker's
			// source); the bucket is the deployment's setting.
			S3Notifications: &topology.S3Notifications{From: "disputes.s3_bucket"},
		}},
		// §3 queue table, domain-events column.
		{"disputes.yaml", topology.Queue{
			Name:              "domain-events",
			VisibilityTimeout: 60 * time.Second,
			ReceiveWait:       20 * time.Second,
			Encryption:        "sse-sqs",
			BatchSize:         10,
			MaxReceives:       5,
			DeadLetter:        &topology.DeadLetter{Queue: "domain-events-dlq", Retention: fourteenDays},
		}},
		// The booking session FIFO pipeline spec, "SQS dedup": FIFO with
		// producer-set dedup ids (no content-based dedup). Max receives 5 is
		// eventpipe's rule: "DLQ posture" gives no count. The 60 s visibility
		// is eventpipe's too (the spec gives none): the delivery's lease must
		// outlive the in-process retries that hold a session.
		{"booking.yaml", topology.Queue{
			Name:              "booking-session-events.fifo",
			FIFO:              true,
			VisibilityTimeout: 60 * time.Second,
			MaxReceives:       5,
			DeadLetter:        &topology.DeadLetter{Queue: "booking-session-events-dlq.fifo"},
		}},
		// The join-link scheduled-generation spec, dec-07: no DLQ by design.
		{"joinlink.yaml", topology.Queue{Name: "join-link-generation"}},
	}
	for _, tt := range tests {
		t.Run(tt.want.Name, func(t *testing.T) {
			t.Parallel()
			top := load(t, tt.file)
			q, ok := top.Queue(tt.want.Name)
			require.True(t, ok, "queue %s not in %s", tt.want.Name, tt.file)
			assert.Equal(t, tt.want, q)
			if tt.want.DeadLetter == nil {
				return
			}
			// The DLQ is declared with the source's FIFO-ness and encryption
			// and the spec's retention.
			dlq, ok := top.Queue(tt.want.DeadLetter.Queue)
			require.True(t, ok, "DLQ %s not declared", tt.want.DeadLetter.Queue)
			assert.Equal(t, topology.Queue{
				Name:       tt.want.DeadLetter.Queue,
				FIFO:       tt.want.FIFO,
				Encryption: tt.want.Encryption,
				Retention:  tt.want.DeadLetter.Retention,
			}, dlq)
		})
	}
}

// TestSQSSpecsShape: the SQS specs declare exactly their queues and DLQs, and no
// exchanges or bindings (their producers send straight to a queue).
func TestSQSSpecsShape(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file   string
		queues []string // declared queues, then DLQs
	}{
		{"interviews.yaml", []string{"interview-completed", "report-generate", "interview-completed-dlq", "report-generate-dlq"}},
		{"disputes.yaml", []string{"ingest-queue", "domain-events", "ingest-dlq", "domain-events-dlq"}},
		{"booking.yaml", []string{"booking-session-events.fifo", "booking-session-events-dlq.fifo"}},
		{"joinlink.yaml", []string{"join-link-generation"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			top := load(t, tt.file)
			var names []string
			for _, q := range top.AllQueues() {
				names = append(names, q.Name)
			}
			assert.Equal(t, tt.queues, names)
			assert.Empty(t, top.Exchanges)
			assert.Empty(t, top.Bindings)
		})
	}
}

// TestJoinLinkHasNoDeadLetter: dec-07 "No DLQ; SQS retry + cron are the net".
func TestJoinLinkHasNoDeadLetter(t *testing.T) {
	t.Parallel()
	for _, q := range load(t, "joinlink.yaml").Queues {
		assert.Nil(t, q.DeadLetter, q.Name)
		assert.Zero(t, q.MaxReceives, q.Name)
	}
}
