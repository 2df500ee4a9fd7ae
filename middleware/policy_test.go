package middleware_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/msgctx"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/middleware"
)

// recordingPublisher keeps what is published, or fails with fail.
type recordingPublisher struct {
	mu   sync.Mutex
	fail error
	msgs map[string][]*message.Message
}

func (p *recordingPublisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail != nil {
		return p.fail
	}
	if p.msgs == nil {
		p.msgs = map[string][]*message.Message{}
	}
	p.msgs[topic] = append(p.msgs[topic], msgs...)
	return nil
}

func (p *recordingPublisher) Close() error { return nil }

func (p *recordingPublisher) published(topic string) []*message.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.msgs[topic]
}

type policyRun struct {
	calls    int
	attempts []int
	err      error
	dlq      []*message.Message
	metrics  *middleware.Metrics
	msg      *message.Message
}

// runPolicy runs one message through Observe and Policy with handler errors
// taken from errs in turn (nil once they run out).
func runPolicy(t *testing.T, p route.Policy, nackDelay bool, meta map[string]string, errs ...error) policyRun {
	t.Helper()
	pub := &recordingPublisher{}
	m := middleware.NewMetrics(prometheus.NewRegistry())
	var run policyRun
	pol := middleware.Policy{Route: p, Publisher: pub, NackDelay: nackDelay, Logger: slog.New(slog.DiscardHandler), Metrics: m}
	h := middleware.Observe(slog.New(slog.DiscardHandler), m)(pol.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		run.attempts = append(run.attempts, msgctx.Attempt(msg.Context()))
		run.calls++
		if run.calls <= len(errs) {
			return nil, errs[run.calls-1]
		}
		return nil, nil
	}))
	msg := message.NewMessage("msg-1", []byte(`{"n":1}`))
	for k, v := range meta {
		msg.Metadata.Set(k, v)
	}
	msg.SetContext(msgctx.WithTraceID(context.Background(), "trace-1"))
	_, run.err = h(msg)
	run.dlq = pub.published(p.DeadLetterQueue)
	run.metrics = m
	run.msg = msg
	return run
}

func policyFor(redelivery route.Redelivery, onPermanent route.OnPermanent) route.Policy {
	return route.Policy{
		MaxAttempts:     3,
		Redelivery:      redelivery,
		Backoff:         route.Backoff{Initial: time.Millisecond, Multiplier: 2, Max: 4 * time.Millisecond},
		OnPermanent:     onPermanent,
		DeadLetterQueue: "work-dlq",
	}
}

var (
	errTransient = errors.New("database is restarting")
	errPermanent = failure.Permanentf("decode: %w", errors.New("unexpected end of JSON input"))
)

func TestPolicyInProcess(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		onPermanent  route.OnPermanent
		meta         map[string]string
		errs         []error
		wantAttempts []int
		wantDLQClass string // "" = nothing dead-lettered
		wantDropped  float64
	}{
		"transient twice then success": {
			onPermanent: route.DeadLetter, errs: []error{errTransient, errTransient},
			wantAttempts: []int{1, 2, 3},
		},
		"earlier deliveries count": {
			onPermanent: route.DeadLetter, meta: map[string]string{metadata.AttemptKey: "1"}, errs: []error{errTransient},
			wantAttempts: []int{2, 3},
		},
		"transient forever": {
			onPermanent: route.DeadLetter, errs: []error{errTransient, errTransient, errTransient},
			wantAttempts: []int{1, 2, 3}, wantDLQClass: "transient",
		},
		"permanent, drop": {
			onPermanent: route.Drop, errs: []error{errPermanent},
			wantAttempts: []int{1}, wantDropped: 1,
		},
		"permanent, dead-letter": {
			onPermanent: route.DeadLetter, errs: []error{errPermanent},
			wantAttempts: []int{1}, wantDLQClass: "permanent",
		},
		"permanent, fail until max": {
			onPermanent: route.FailUntilMax, errs: []error{errPermanent, errPermanent, errPermanent},
			wantAttempts: []int{1, 2, 3}, wantDLQClass: "permanent",
		},
		"poison: attempts used up by crashed consumers": {
			onPermanent: route.DeadLetter, meta: map[string]string{metadata.AttemptKey: "3"},
			wantAttempts: nil, wantDLQClass: "transient",
		},
		"a publisher's failure times are not a reason to fail": {
			onPermanent: route.DeadLetter, meta: map[string]string{metadata.FirstFailureKey: "garbage"},
			wantAttempts: []int{1},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			run := runPolicy(t, policyFor(route.InProcess, c.onPermanent), false, c.meta, c.errs...)
			require.NoError(t, run.err, "every outcome here is acked")
			assert.Equal(t, c.wantAttempts, run.attempts)
			assert.Equal(t, c.wantDropped, testutil.ToFloat64(run.metrics.Dropped.WithLabelValues("", "")))
			if c.wantDLQClass == "" {
				assert.Empty(t, run.dlq)
				return
			}
			require.Len(t, run.dlq, 1)
			dl := run.dlq[0]
			assert.Equal(t, "msg-1", dl.UUID, "the dead letter keeps the message id")
			assert.JSONEq(t, `{"n":1}`, string(dl.Payload))
			info, ok, err := metadata.DeadLetterOf(dl)
			require.NoError(t, err)
			require.True(t, ok)
			assert.Equal(t, c.wantDLQClass, info.Class)
			assert.NotEmpty(t, info.Reason)
			earlier, _ := strconv.Atoi(c.meta[metadata.AttemptKey])
			assert.Equal(t, earlier+len(c.wantAttempts), info.Attempts)
			assert.Equal(t, "trace-1", info.TraceID)
			assert.Equal(t, "trace-1", dl.Metadata.Get(metadata.TraceIDKey))
			assert.Empty(t, dl.Metadata.Get(metadata.AttemptKey), "the DLQ's adapter sets its own")
			for _, ts := range []time.Time{info.FirstFailureAt, info.LastFailureAt, info.DeadLetteredAt} {
				assert.WithinDuration(t, time.Now(), ts, time.Minute)
			}
			assert.Equal(t, 1.0, testutil.ToFloat64(run.metrics.DeadLettered.WithLabelValues("", "")))
		})
	}
}

func TestPolicyDeadLetterCarriesTheHistory(t *testing.T) {
	t.Parallel()
	first := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	run := runPolicy(t, policyFor(route.Broker, route.DeadLetter), true,
		map[string]string{metadata.AttemptKey: "2", metadata.FirstFailureKey: first.Format(time.RFC3339Nano), "x-custom": "kept"},
		errors.New(strings.Repeat("é", middleware.MaxReasonBytes)))
	require.NoError(t, run.err)
	require.Len(t, run.dlq, 1)
	dl := run.dlq[0]
	info, ok, err := metadata.DeadLetterOf(dl)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, 3, info.Attempts)
	assert.Equal(t, first, info.FirstFailureAt)
	assert.Equal(t, "kept", dl.Metadata.Get("x-custom"))
	assert.Empty(t, dl.Metadata.Get(metadata.FirstFailureKey), "in the history, not a key of its own")
	assert.LessOrEqual(t, len(info.Reason), middleware.MaxReasonBytes)
	assert.True(t, strings.HasPrefix(info.Reason, "éé"), "cut on a character boundary: %q", info.Reason[:8])
	assert.NotContains(t, info.Reason, "\uFFFD")
}

func TestPolicyBrokerRedelivery(t *testing.T) {
	t.Parallel()
	t.Run("a failure is nacked with the backoff as the broker's delay", func(t *testing.T) {
		t.Parallel()
		p := policyFor(route.Broker, route.DeadLetter)
		p.Backoff = route.Backoff{Initial: 10 * time.Second, Multiplier: 2, Max: time.Minute}
		run := runPolicy(t, p, true, map[string]string{metadata.AttemptKey: "1"}, errTransient)
		require.ErrorIs(t, run.err, errTransient, "nacked")
		assert.Equal(t, []int{2}, run.attempts, "one attempt per delivery")
		assert.Equal(t, 20*time.Second, metadata.NackDelay(run.msg), "backoff after attempt 2")
		assert.Empty(t, run.msg.Metadata.Get(metadata.ExplicitNackDelayKey), "the broker's own timing wins by default")
		assert.NotEmpty(t, run.msg.Metadata.Get(metadata.FirstFailureKey))
		assert.Empty(t, run.dlq)
	})
	t.Run("an explicit backoff is marked so, for brokers with a timing of their own", func(t *testing.T) {
		t.Parallel()
		p := policyFor(route.Broker, route.DeadLetter)
		p.Backoff = route.Backoff{Initial: 10 * time.Second, Multiplier: 2, Max: time.Minute}
		p.ExplicitBackoff = true
		run := runPolicy(t, p, true, nil, errTransient)
		require.ErrorIs(t, run.err, errTransient)
		assert.Equal(t, 10*time.Second, metadata.NackDelay(run.msg))
		assert.Equal(t, "true", run.msg.Metadata.Get(metadata.ExplicitNackDelayKey))

		p.ExplicitBackoff = false
		run = runPolicy(t, p, true, map[string]string{metadata.ExplicitNackDelayKey: "true"}, errTransient)
		assert.Empty(t, run.msg.Metadata.Get(metadata.ExplicitNackDelayKey), "a mark that came with the message is not the route's")
	})
	t.Run("without a native delay the backoff is waited before the nack", func(t *testing.T) {
		t.Parallel()
		p := policyFor(route.Broker, route.DeadLetter)
		p.Backoff = route.Backoff{Initial: 50 * time.Millisecond, Multiplier: 1, Max: 50 * time.Millisecond}
		start := time.Now()
		run := runPolicy(t, p, false, nil, errTransient)
		require.ErrorIs(t, run.err, errTransient)
		assert.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
		assert.Zero(t, metadata.NackDelay(run.msg))
	})
	t.Run("the last attempt dead-letters", func(t *testing.T) {
		t.Parallel()
		run := runPolicy(t, policyFor(route.Broker, route.DeadLetter), true, map[string]string{metadata.AttemptKey: "2"}, errTransient)
		require.NoError(t, run.err)
		assert.Len(t, run.dlq, 1)
	})
	t.Run("a retry-after longer than the backoff wins", func(t *testing.T) {
		t.Parallel()
		run := runPolicy(t, policyFor(route.Broker, route.DeadLetter), true, nil, failure.AsTransient(errors.New("429"), 7*time.Second))
		assert.Equal(t, 7*time.Second, metadata.NackDelay(run.msg))
	})
}

func TestPolicyWithoutDeadLetterQueueDropsWithAMetric(t *testing.T) {
	t.Parallel()
	p := policyFor(route.InProcess, route.DeadLetter)
	p.DeadLetterQueue = ""
	run := runPolicy(t, p, false, nil, errPermanent)
	require.NoError(t, run.err)
	assert.Equal(t, 1.0, testutil.ToFloat64(run.metrics.Dropped.WithLabelValues("", "")))
}

func TestBackoffWait(t *testing.T) {
	t.Parallel()
	b := route.Backoff{Initial: time.Second, Multiplier: 2, Max: 5 * time.Second}
	var got []time.Duration
	for a := 0; a <= 5; a++ {
		got = append(got, b.Wait(a))
	}
	assert.Equal(t, []time.Duration{time.Second, time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}, got)
}

func TestPolicyDeadLettersOversizedPayloads(t *testing.T) {
	t.Parallel()
	pub := &recordingPublisher{}
	called := false
	pol := middleware.Policy{Route: policyFor(route.InProcess, route.FailUntilMax), Publisher: pub, Logger: slog.New(slog.DiscardHandler)}
	msg := message.NewMessage("big", make([]byte, broker.MaxPayloadBytes+1))
	_, err := pol.Middleware(func(*message.Message) ([]*message.Message, error) {
		called = true
		return nil, nil
	})(msg)
	require.NoError(t, err)
	assert.False(t, called, "no handler sees it")
	dl := pub.published("work-dlq")
	require.Len(t, dl, 1)
	info, ok, err := metadata.DeadLetterOf(dl[0])
	require.NoError(t, err)
	require.True(t, ok)
	assert.Contains(t, info.Reason, "exceeds")
	assert.Equal(t, "permanent", info.Class)
	assert.NoError(t, broker.CheckPayloads(dl), "a dead letter may carry what arrived")
}

// A message delivered MaxAttempts times without an outcome is dead-lettered
// without running its handler, unless its effect committed (its inbox
// marker, Policy.Seen): then its last attempt did the work and only the
// settlement was lost, so it is acknowledged as a duplicate. When the inbox
// cannot say, it is neither: the error nacks it and it comes back.
func TestPolicyCrashLoopedMessageThatWasProcessedIsAcked(t *testing.T) {
	t.Parallel()
	errDown := errors.New("inbox: connection refused")
	cases := []struct {
		name       string
		seen       func(context.Context, []byte) (bool, error)
		deadLetter bool
		duplicate  bool
		wantErr    error
	}{
		{name: "no inbox", seen: nil, deadLetter: true},
		{name: "not processed", seen: func(context.Context, []byte) (bool, error) { return false, nil }, deadLetter: true},
		{name: "processed", seen: func(context.Context, []byte) (bool, error) { return true, nil }, duplicate: true},
		{name: "inbox down", seen: func(context.Context, []byte) (bool, error) { return false, errDown }, wantErr: errDown},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pub := &recordingPublisher{}
			pol := middleware.Policy{Route: policyFor(route.Broker, route.FailUntilMax), Publisher: pub, Logger: slog.New(slog.DiscardHandler), Seen: c.seen}
			msg := message.NewMessage("msg-1", []byte(`{"id":"r-1"}`))
			msg.Metadata.Set(metadata.AttemptKey, "3")
			msg.SetContext(context.Background())
			called := false
			_, err := pol.Middleware(func(*message.Message) ([]*message.Message, error) {
				called = true
				return nil, nil
			})(msg)
			assert.False(t, called, "the handler does not run a fourth time")
			assert.Equal(t, c.deadLetter, len(pub.published("work-dlq")) == 1, "dead-lettered")
			switch {
			case c.duplicate:
				assert.Equal(t, failure.Duplicate, failure.Of(err), "acknowledged as a duplicate: %v", err)
			case c.wantErr != nil:
				require.ErrorIs(t, err, c.wantErr)
				assert.NotEqual(t, failure.Duplicate, failure.Of(err))
			default:
				assert.NoError(t, err)
			}
		})
	}
}
