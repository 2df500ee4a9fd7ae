package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/memory"
	"github.com/eventpipe/eventpipe/app/broker/rabbitmq"
	"github.com/eventpipe/eventpipe/app/broker/routing"
	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/outbox"
)

// The errors a broker that is down, closed or slow returns, as the adapters
// wrap them.
var unavailable = []error{
	fmt.Errorf("publish t: %w", rabbitmq.ErrNotConnected),
	fmt.Errorf("publish t: %w", rabbitmq.ErrClosed),
	&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)},
	fmt.Errorf("publish t: message m-0: waiting for the publisher confirm: %w", context.DeadlineExceeded),
	errors.New("something nobody classified"),
	failure.AsTransient(errors.New("throttled"), 0),
}

// A broker down for longer than the old park threshold (10 attempts) parks
// nothing: every row is retried until the broker is back, then published
// (ruling "An unavailable broker is not a poison message").
func TestRelayNeverParksWhileTheBrokerIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.write(t, "t", msgs("m", 2)...)
	const outage = 3 * outbox.DefaultMaxAttempts
	pub := &fakePublisher{fail: func(call int, _ string, _ []*message.Message) error {
		if call < outage {
			return unavailable[call%len(unavailable)]
		}
		return nil
	}}
	r := e.relay(t, pub, fast) // MaxAttempts left at its default

	for i := range outage {
		res, err := r.RelayOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, outbox.BatchResult{Claimed: 2, Failed: 2}, res, "attempt %d", i+1)
		time.Sleep(5 * time.Millisecond) // past the backoff
	}
	s := e.row(t, "m-0")
	assert.False(t, s.Parked, "parked by an outage")
	assert.Equal(t, outage, s.Attempts)

	res, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, outbox.BatchResult{Claimed: 2, Published: 2}, res)
	assert.True(t, e.row(t, "m-1").Published)
}

// However long the outage, a row is retried at least once a minute by
// default.
func TestRelayBackoffIsCappedAtAMinute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.write(t, "t", msgs("m", 1)...)
	_, err := e.pool.Exec(ctx, `UPDATE `+e.q("outbox")+` SET attempts = 40`)
	require.NoError(t, err)
	pub := &fakePublisher{fail: func(int, string, []*message.Message) error { return rabbitmq.ErrNotConnected }}
	res, err := e.relay(t, pub, outbox.RelayConfig{}).RelayOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, outbox.BatchResult{Claimed: 1, Failed: 1}, res)
	assert.Equal(t, 1, e.count(t, `next_attempt_at BETWEEN now() + interval '47 seconds' AND now() + interval '73 seconds'`),
		"next attempt in 1m ± 20 %%")
	assert.False(t, e.row(t, "m-0").Parked)
	assert.Equal(t, time.Minute, outbox.DefaultMaxBackoff)
}

// A permanent refusal — the broker refusing the message itself — parks the
// row at its first failure, and only that row: the other messages of the
// refused call are published.
func TestRelayParksAPermanentRefusalAtOnce(t *testing.T) {
	t.Parallel()
	for name, refusal := range map[string]error{
		"payload too large": fmt.Errorf("publish t: %w", &broker.PayloadTooLargeError{MessageUUID: "bad", Size: broker.MaxPayloadBytes + 1}),
		"unroutable":        &routing.UnroutableError{Exchange: "x", RoutingKey: "nowhere"},
		"marked permanent":  failure.Permanentf("publish t: message bad: %w", errors.New("invalid attribute")),
		"in a route error": &routing.RouteError{Exchange: "x", RoutingKey: "k", Sent: []string{"q1"},
			Failed: map[string]error{"q2": &broker.PayloadTooLargeError{MessageUUID: "bad", Size: broker.MaxPayloadBytes + 1}}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := newEnv(t)
			e.write(t, "t", msgs("ok", 1)...)
			e.write(t, "t", message.NewMessage("bad", []byte(`{}`)))
			e.write(t, "t", msgs("later", 1)...)
			// The whole call fails, as an adapter's check before sending
			// does: nothing of it is confirmed.
			pub := &fakePublisher{fail: func(_ int, _ string, ms []*message.Message) error {
				for _, m := range ms {
					if m.UUID == "bad" {
						return refusal
					}
				}
				return nil
			}}
			res, err := e.relay(t, pub, outbox.RelayConfig{}).RelayOnce(ctx)
			require.NoError(t, err)
			assert.Equal(t, outbox.BatchResult{Claimed: 3, Published: 2, Failed: 1, Parked: 1}, res)
			s := e.row(t, "bad")
			assert.True(t, s.Parked)
			assert.Equal(t, 1, s.Attempts)
			require.NotNil(t, s.LastError)
			assert.Contains(t, *s.LastError, refusal.Error())
			assert.True(t, e.row(t, "ok-0").Published)
			assert.True(t, e.row(t, "later-0").Published)
		})
	}
}

// A row over the payload limit (written before the limit, or by hand) is
// refused by the real broker and parked at once.
func TestRelayParksAnOversizeRowOnTheMemoryBroker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.write(t, "t", message.NewMessage("huge", []byte(`{}`)))
	_, err := e.pool.Exec(ctx, `UPDATE `+e.q("outbox")+` SET payload = $1`, make([]byte, broker.MaxPayloadBytes+1))
	require.NoError(t, err)
	ps, err := memory.New(memory.Config{}, nil)
	require.NoError(t, err)
	defer func() { _ = ps.Close() }()

	res, err := e.relay(t, ps, outbox.RelayConfig{}).RelayOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, outbox.BatchResult{Claimed: 1, Failed: 1, Parked: 1}, res)
	s := e.row(t, "huge")
	require.NotNil(t, s.LastError)
	assert.Contains(t, *s.LastError, "exceeds the 1048576-byte limit")
}

// MaxAttempts above 1 gives a permanently refused row that many tries before
// it is parked; transient failures count as tries, but never park.
func TestRelayMaxAttemptsBoundsPermanentRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.write(t, "t", message.NewMessage("bad", []byte(`{}`)))
	var permanent bool
	pub := &fakePublisher{fail: func(int, string, []*message.Message) error {
		if permanent {
			return failure.Permanentf("refused")
		}
		return rabbitmq.ErrNotConnected
	}}
	cfg := fast
	cfg.MaxAttempts = 3
	r := e.relay(t, pub, cfg)
	for range 2 {
		res, err := r.RelayOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, outbox.BatchResult{Claimed: 1, Failed: 1}, res)
		time.Sleep(5 * time.Millisecond)
	}
	permanent = true
	res, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, outbox.BatchResult{Claimed: 1, Failed: 1, Parked: 1}, res, "third try, first refusal: parked")
}

func TestPublishErrorClasses(t *testing.T) {
	t.Parallel()
	tooLarge := &broker.PayloadTooLargeError{MessageUUID: "m", Size: broker.MaxPayloadBytes + 1}
	for _, err := range unavailable {
		assert.False(t, outbox.Permanent(err), "%v", err)
	}
	for name, c := range map[string]struct {
		err  error
		want bool
	}{
		"payload too large, wrapped":   {fmt.Errorf("publish t: %w", tooLarge), true},
		"unroutable":                   {&routing.UnroutableError{Exchange: "x", RoutingKey: "k"}, true},
		"marked permanent":             {failure.AsPermanent(errors.New("bad attribute")), true},
		"partial, marked permanent":    {failure.AsPermanent(partialError{failed: []string{"m"}}), true},
		"one queue of a route refused": {&routing.RouteError{Failed: map[string]error{"q1": rabbitmq.ErrNotConnected, "q2": tooLarge}}, true},
		"every queue of a route down":  {&routing.RouteError{Failed: map[string]error{"q1": rabbitmq.ErrNotConnected}}, false},
		"joined with an outage":        {errors.Join(rabbitmq.ErrNotConnected, tooLarge), true},
		"reclassified transient":       {failure.AsTransient(tooLarge, 0), false},
		"partial, unclassified":        {partialError{failed: []string{"m"}}, false},
		"nil":                          {nil, false},
	} {
		assert.Equal(t, c.want, outbox.Permanent(c.err), name)
	}
}

// With strict order, a parked row holds back the later rows of its key — and
// says so: an ERROR line naming the row, its queue, key and reason, and the
// gauges of parked and held rows.
func TestAParkedRowHoldsItsKeyVisibly(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newEnv(t)
	for _, id := range []string{"k-1", "k-2", "l-1"} {
		m := message.NewMessage(id, []byte(`{}`))
		m.Metadata.Set(outbox.OrderingKeyMetadata, strings.ToUpper(id[:1]))
		m.Metadata.Set(metadata.TraceIDKey, "trace-"+id)
		e.write(t, "ordered", m)
	}
	var accept atomic.Bool
	pub := &fakePublisher{fail: func(_ int, _ string, ms []*message.Message) error {
		for _, m := range ms {
			if m.UUID == "k-1" && !accept.Load() {
				return fmt.Errorf("publish ordered: %w", &broker.PayloadTooLargeError{MessageUUID: "k-1", Size: 2 << 20})
			}
		}
		return nil
	}}
	reg := prometheus.NewRegistry()
	var logs syncBuffer
	cfg := fast
	cfg.Schema, cfg.StrictOrderTopics, cfg.PollInterval, cfg.Registerer = e.schema, []string{"ordered"}, 20*time.Millisecond, reg
	r, err := outbox.NewRelay(e.pool, pub, cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	defer func() { stop(); require.NoError(t, <-done) }()

	require.Eventually(t, func() bool { return e.row(t, "k-1").Parked && e.row(t, "l-1").Published }, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		return gauge(t, reg, "eventpipe_outbox_parked") == 1 && gauge(t, reg, "eventpipe_outbox_held") == 1
	}, 10*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // several polls
	assert.Zero(t, pub.sent()["k-2"], "held behind k-1")
	assert.False(t, e.row(t, "k-2").Published)
	assert.Equal(t, 1, e.row(t, "k-1").Attempts, "parked at its first refusal")

	line := logs.line(t, "level=ERROR")
	for _, want := range []string{"outbox message parked", "message_id=k-1", "trace_id=trace-k-1", "queue=ordered", "ordering_key=K",
		"reason=\"publish ordered: message k-1: payload of 2097152 bytes exceeds", "holds_key=true", "requeue=\"eventpipe outbox requeue --id k-1\""} {
		assert.Contains(t, line, want)
	}

	// The broker accepts it now (a larger limit, a claim check): requeued,
	// it goes out, then the row it held.
	accept.Store(true)
	n, err := e.table.Requeue(ctx, e.pool, outbox.RequeueFilter{EventIDs: []string{"k-1"}})
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
	require.Eventually(t, func() bool { return e.row(t, "k-2").Published }, 10*time.Second, 10*time.Millisecond)
	assert.True(t, e.row(t, "k-1").Published)
	order := pub.order()
	assert.Equal(t, []string{"k-1", "k-2"}, order[len(order)-2:], "in key order")
	require.Eventually(t, func() bool {
		return gauge(t, reg, "eventpipe_outbox_parked") == 0 && gauge(t, reg, "eventpipe_outbox_held") == 0
	}, 10*time.Second, 10*time.Millisecond)
}

// syncBuffer is a log destination the relay's goroutine and the test share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// line returns the only line containing s.
func (b *syncBuffer) line(t *testing.T, s string) string {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var found []string
	for _, l := range strings.Split(b.buf.String(), "\n") {
		if strings.Contains(l, s) {
			found = append(found, l)
		}
	}
	require.Len(t, found, 1, "lines with %q in:\n%s", s, b.buf.String())
	return found[0]
}
