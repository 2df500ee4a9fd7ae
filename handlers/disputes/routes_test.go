package disputes_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/config"
	"github.com/eventpipe/eventpipe/handlers/disputes"
)

func TestRoute(t *testing.T) {
	t.Parallel()
	rs := disputes.Catalog()
	require.Len(t, rs, 2)
	assert.Len(t, disputes.Handlers{}.Routes(), 1, "no ingest-worker without Objects")
	ingest, err := rs.ByQueue(disputes.IngestQueue)
	require.NoError(t, err)
	assert.Equal(t, route.Policy{MaxAttempts: 3, Redelivery: route.Broker, Backoff: disputes.DefaultIngestBackoff(), OnPermanent: route.FailUntilMax, DeadLetterQueue: "ingest-dlq"}, ingest.Policy)
	require.NoError(t, ingest.Validate([]byte(s3Example)))
	r := rs[0]
	assert.Equal(t, "events-worker", r.Name)
	assert.Equal(t, disputes.DomainEventsQueue, r.Queue)
	assert.Equal(t, route.Policy{MaxAttempts: 5, Redelivery: route.Broker, Backoff: disputes.DefaultBackoff(), OnPermanent: route.FailUntilMax, DeadLetterQueue: "domain-events-dlq"}, r.Policy)
	require.NoError(t, r.Policy.Validate())
	require.NoError(t, r.Validate([]byte(specExample)))
	require.Error(t, r.Validate([]byte(`{"event_id":"x"}`)))

	msg := message.NewMessage(watermill.NewUUID(), []byte(specExample))
	assert.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", r.TraceID(msg), "Route.TraceID reads trace_id")
	assert.Empty(t, r.TraceID(message.NewMessage("x", []byte(`{not json`))))
}

// The route's policy fits the shipped topology (what app.buildRoutes checks).
func TestRouteFitsTopology(t *testing.T) {
	t.Parallel()
	data, err := config.TopologyFile("disputes")
	require.NoError(t, err)
	top, err := topology.Parse(data)
	require.NoError(t, err)
	for _, r := range disputes.Catalog() {
		q, ok := top.Queue(r.Queue)
		require.True(t, ok, r.Queue)
		p, err := r.Policy.ForQueue(q)
		require.NoError(t, err, r.Queue)
		assert.Equal(t, r.Policy.DeadLetterQueue, p.DeadLetterQueue, "the topology's DLQ")
		assert.Equal(t, q.MaxReceives, p.MaxAttempts, "maxReceiveCount: %s", r.Queue)
	}
}

func TestHandlerClassifies(t *testing.T) {
	t.Parallel()
	store := disputes.NewMemory(disputes.MemoryOptions{})
	h := disputes.Handlers{Store: store, Inbox: inbox.NewMemory(), AMLThreshold: 50}
	handle := h.Routes()[0].Handle
	run := func(body string) error {
		msg := message.NewMessage(watermill.NewUUID(), []byte(body))
		msg.SetContext(context.Background())
		return handle(msg)
	}
	assert.Equal(t, failure.Permanent, failure.Of(run(`{"event_id":`)), "malformed envelope")
	assert.Equal(t, failure.Permanent, failure.Of(run(`{"event_id":"e1","event_type":"Nope","event_version":1,"aggregate_type":"x","aggregate_id":"a","occurred_at":"2026-11-12T09:14:03.512Z","payload":{}}`)), "unknown event_type")
	flagged := `{"event_id":"e2","event_type":"TransactionFlagged","event_version":1,"aggregate_type":"transaction","aggregate_id":"t","occurred_at":"2026-11-12T09:14:03.512Z","payload":{"txn_id":"t","risk_score":50,"future":"ignored"}}`
	require.NoError(t, run(flagged))
	assert.Equal(t, failure.Duplicate, failure.Of(run(flagged)), "same event_id → duplicate, acked")
	entries, err := store.ReviewEntries(context.Background(), "t")
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Equal(t, disputes.QueueAML, entries[0].Queue, "configured threshold, inclusive")
	assert.Equal(t, time.Date(2026, 11, 12, 9, 14, 3, 512e6, time.UTC), entries[0].FlaggedAt)

	// The body's event_id is the dedupe key, not the attribute or the UUID.
	other := message.NewMessage(watermill.NewUUID(), []byte(flagged))
	other.Metadata.Set(disputes.EventIDKey, "something-else")
	other.SetContext(context.Background())
	assert.Equal(t, failure.Duplicate, failure.Of(handle(other)))
}
