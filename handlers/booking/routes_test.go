package booking_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/config"
	"github.com/eventpipe/eventpipe/handlers/booking"
)

func TestRoute(t *testing.T) {
	t.Parallel()
	rs := booking.Catalog()
	require.Len(t, rs, 1)
	r := rs[0]
	assert.Equal(t, "booking-session-processor", r.Name)
	assert.Equal(t, "booking-session-events.fifo", r.Queue)
	assert.Equal(t, route.Policy{MaxAttempts: 5, Redelivery: route.InProcess, Backoff: booking.DefaultBackoff(),
		OnPermanent: route.FailUntilMax, DeadLetterQueue: "booking-session-events-dlq.fifo"}, r.Policy)
	require.NoError(t, r.Policy.Validate())
	require.NoError(t, r.Validate([]byte(specExample)))
	require.Error(t, r.Validate([]byte(`{"bookingSessionId":"b","type":"x","occurredAt":"2026-11-30T09:14:03.512Z"}`)), "publish refuses a body without eventId")
	assert.Equal(t, "bse_8bceef79fc1399262e2928c8c0c77be30fb658dae54ae940256e391741230353", r.MessageID([]byte(specExample)), "publish uses the body's eventId as message id")
	assert.Empty(t, r.MessageID([]byte(`{`)))
}

// The route's policy fits the shipped topology (what app.buildRoutes checks).
func TestRouteFitsTopology(t *testing.T) {
	t.Parallel()
	data, err := config.TopologyFile("booking")
	require.NoError(t, err)
	top, err := topology.Parse(data)
	require.NoError(t, err)
	r := booking.Catalog()[0]
	q, ok := top.Queue(r.Queue)
	require.True(t, ok, r.Queue)
	assert.True(t, q.FIFO)
	p, err := r.Policy.ForQueue(q)
	require.NoError(t, err)
	assert.Equal(t, r.Policy.DeadLetterQueue, p.DeadLetterQueue, "the topology's DLQ")
	assert.Equal(t, q.MaxReceives, p.MaxAttempts, "max receives 5")
}

func TestHandlerClassifies(t *testing.T) {
	t.Parallel()
	store := booking.NewMemory()
	handle := booking.Handlers{Store: store, Inbox: inbox.NewMemory()}.Routes()[0].Handle
	run := func(uuid, body string) error {
		msg := message.NewMessage(uuid, []byte(body))
		msg.SetContext(context.Background())
		return handle(msg)
	}
	assert.Equal(t, failure.Permanent, failure.Of(run(watermill.NewUUID(), `{"eventId":`)), "malformed body")
	noID := `{"bookingSessionId":"bks_c","type":"step-completed","occurredAt":"2026-11-30T09:14:03.512Z","stepId":"pick-slot"}`
	err := run("bse_8bceef79fc1399262e2928c8c0c77be30fb658dae54ae940256e391741230353", noID)
	assert.Equal(t, failure.Permanent, failure.Of(err), "no eventId: permanent, even when the message id would do")
	assert.ErrorContains(t, err, "eventId missing")
	nullID := `{"eventId":null,"bookingSessionId":"bks_c","type":"step-completed","occurredAt":"2026-11-30T09:14:03.512Z"}`
	assert.Equal(t, failure.Permanent, failure.Of(run(watermill.NewUUID(), nullID)))
	_, ok, err := store.Session(context.Background(), "bks_c")
	require.NoError(t, err)
	assert.False(t, ok, "nothing applied")

	require.NoError(t, run(watermill.NewUUID(), specExample), "a transport id that differs from the body's: the body's is used")
	assert.Equal(t, failure.Duplicate, failure.Of(run("bse_8bceef79fc1399262e2928c8c0c77be30fb658dae54ae940256e391741230353", specExample)), "same eventId → duplicate, acked")
	s, ok, err := store.Session(context.Background(), "bks_1")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, int64(1), s.Events)
}
