package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/memory"
	"github.com/eventpipe/eventpipe/app/broker/rabbitmq"
	"github.com/eventpipe/eventpipe/app/broker/routing"
	"github.com/eventpipe/eventpipe/app/failure"
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
