package postgres_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/postgres"
)

// settleTracer records the actions of every settlement statement a
// subscription sends, on its own or in a batch with a claim.
type settleTracer struct {
	// delay, when set, is added to every statement's round trip: a slow
	// database.
	delay time.Duration

	mu sync.Mutex
	// statements holds each settlement's actions, and whether it went in a
	// batch (with a claim).
	statements []settleStatement
}

type settleStatement struct {
	actions []string
	batched bool
}

func (s *settleTracer) record(sql string, args []any, batched bool) {
	if !strings.HasPrefix(strings.TrimSpace(sql), "WITH s AS") || len(args) < 3 {
		return
	}
	actions, _ := args[2].([]string)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.statements = append(s.statements, settleStatement{actions: actions, batched: batched})
}

func (s *settleTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	time.Sleep(s.delay)
	s.record(d.SQL, d.Args, false)
	return ctx
}

func (s *settleTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (s *settleTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	time.Sleep(s.delay)
	return ctx
}

func (s *settleTracer) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	s.record(d.SQL, d.Args, true)
}

func (s *settleTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// acks are the settlements that carried acks.
func (s *settleTracer) acks() []settleStatement { return s.carrying("ack") }

// carrying are the settlements that carried action.
func (s *settleTracer) carrying(action string) []settleStatement {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []settleStatement
	for _, st := range s.statements {
		if slices.Contains(st.actions, action) {
			out = append(out, st)
		}
	}
	return out
}

// The acks of handlers running at once (broker.WithConcurrency) are applied
// together, in one statement sent with the claim loop's next claim. One loop:
// with two, each settles the rows it claimed, and how the six rows split
// between their claims is a race.
func TestConcurrentAcksSettleInOneStatement(t *testing.T) {
	t.Parallel()
	const n = 6
	cfg := testConfig(t)
	cfg.Workers = 1
	ps := newPubSub(t, cfg)
	tracer := &settleTracer{}
	postgres.TraceConsuming(t, ps, tracer)
	topic := brokertest.Topic(t)
	for range n {
		require.NoError(t, ps.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("x"))))
	}

	ctx, cancel := context.WithCancel(broker.WithConcurrency(context.Background(), n))
	defer cancel()
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)
	var held []*message.Message
	for range n {
		held = append(held, brokertest.Next(t, msgs, 10*time.Second))
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, m := range held {
		wg.Go(func() {
			<-start
			m.Ack()
		})
	}
	close(start)
	wg.Wait()
	assert.Eventually(t, func() bool { return rowsLeft(t, cfg, topic) == 0 }, 10*time.Second, 20*time.Millisecond, "acked: deleted")

	acks := tracer.acks()
	require.Len(t, acks, 1, "settlements carrying acks: %+v", acks)
	assert.Equal(t, []string{"ack", "ack", "ack", "ack", "ack", "ack"}, acks[0].actions)
	assert.True(t, acks[0].batched, "sent with the next claim")
}

// A database whose round trips take longer than the lease slack (a tenth
// of the ack deadline) — a checkpoint, publishers saturating its commits —
// still gets its claimed messages handed out, without a renewal before
// each: the lease a claim comes back with is young enough for the
// heartbeat. Seen before: every claim came back "too old" and was renewed
// before its first message, each renewal as slow again, so the
// subscription renewed and never delivered (the Postgres end-to-end
// benchmark's slow runs).
func TestSlowRoundTripsStillDeliver(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 5} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t)
			cfg.AckDeadline = time.Second
			ps := newPubSub(t, cfg)
			tracer := &settleTracer{delay: 150 * time.Millisecond} // > the slack, 100 ms
			postgres.TraceConsuming(t, ps, tracer)
			topic := brokertest.Topic(t)
			for range 5 {
				require.NoError(t, ps.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("x"))))
			}
			ctx, cancel := context.WithCancel(broker.WithConcurrency(context.Background(), n))
			defer cancel()
			msgs, err := ps.Subscribe(ctx, topic)
			require.NoError(t, err)
			for range 5 {
				require.True(t, brokertest.Next(t, msgs, 10*time.Second).Ack())
			}
			assert.Empty(t, tracer.carrying("renew"), "renewals with handlers that ack at once")
		})
	}
}
