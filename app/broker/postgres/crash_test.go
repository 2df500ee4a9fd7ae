package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/broker/brokertest"
	"github.com/eventpipe/eventpipe/app/broker/postgres"
	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/testenv"
)

// crashChildEnv holds the crash child's orders (a crashOrders as JSON).
const crashChildEnv = "EVENTPIPE_TEST_PG_CRASH_CHILD"

// crashOrders tell the child process which queue to consume and how.
type crashOrders struct {
	DSN, Schema, AppName, Topic string
	AckDeadline                 time.Duration
	// Hold, when above 0, is how many messages the child takes at once
	// (broker.WithConcurrency) before it says it has them; its batch size
	// is then Hold too.
	Hold int
}

// crashed is what a killed consumer saw of the message it held.
type crashed struct {
	uuid, attempt string
	// reported is when the child said it had the message: its claim came
	// before.
	reported time.Time
}

// crashConsumer runs a consumer of topic in a child process (this test
// binary again, as TestCrashChild), waits until the child holds a message,
// and kills it with SIGKILL: no ack, no nack, no Close, no rollback sent.
func crashConsumer(t *testing.T, cfg postgres.Config, topic string) crashed {
	t.Helper()
	return crashConsumerHolding(t, cfg, topic, 0)[0]
}

// crashConsumerHolding is crashConsumer with a child that takes hold
// messages at once (0: one, as a Watermill subscriber does) and is killed
// while it holds them all, unsettled.
func crashConsumerHolding(t *testing.T, cfg postgres.Config, topic string, hold int) []crashed {
	t.Helper()
	orders, err := json.Marshal(crashOrders{
		DSN: cfg.DSN, Schema: cfg.Schema, AppName: cfg.ApplicationName, Topic: topic, AckDeadline: cfg.AckDeadline,
		Hold: hold,
	})
	require.NoError(t, err)
	rest := testenv.KillChildAt(t, "TestCrashChild", "DELIVERED ", crashChildEnv+"="+string(orders))
	now := time.Now()
	fields := strings.Fields(rest)
	require.Len(t, fields, 2*max(hold, 1), "the child's line: %q", rest)
	var cs []crashed
	for i := 0; i < len(fields); i += 2 {
		cs = append(cs, crashed{uuid: fields[i], attempt: fields[i+1], reported: now})
	}
	return cs
}

// TestCrashChild is the consumer crashConsumer kills. Run any other way it
// skips, saying so.
func TestCrashChild(t *testing.T) {
	raw := os.Getenv(crashChildEnv)
	if raw == "" {
		t.Skipf("not a test on its own: the child process crashConsumer starts (with %s set) and kills", crashChildEnv)
	}
	var o crashOrders
	require.NoError(t, json.Unmarshal([]byte(raw), &o))
	ctx := context.Background()
	if o.Hold > 0 {
		ctx = broker.WithConcurrency(ctx, o.Hold)
	}
	ps, err := postgres.New(ctx, postgres.Config{
		DSN: o.DSN, Schema: o.Schema, ApplicationName: o.AppName, AckDeadline: o.AckDeadline,
		AutoInitializeSchema: true, MaxConns: 2, PollInterval: 50 * time.Millisecond,
		BatchSize: o.Hold,
	}, nil)
	require.NoError(t, err)
	msgs, err := ps.Subscribe(ctx, o.Topic)
	require.NoError(t, err)
	var line strings.Builder
	for range max(o.Hold, 1) {
		m := <-msgs
		fmt.Fprintf(&line, " %s %s", m.UUID, m.Metadata.Get(metadata.AttemptKey))
	}
	fmt.Printf("DELIVERED%s\n", line.String())
	time.Sleep(10 * time.Minute) // until SIGKILL
}

// A consumer killed while it holds a message has used an attempt: the claim
// counted it. Nobody gets the message while the dead consumer's claim lasts
// (the ack deadline); then the next subscriber gets it with x-attempt 1.
func TestCrashedDeliveryIsCounted(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.AckDeadline = 2 * time.Second
	ps := newPubSub(t, cfg)
	topic := brokertest.Topic(t)
	sent := message.NewMessage(watermill.NewUUID(), []byte("kills its consumer"))
	require.NoError(t, ps.Publish(topic, sent))

	c := crashConsumer(t, cfg, topic)
	require.Equal(t, sent.UUID, c.uuid)
	assert.Equal(t, "0", c.attempt, "a first delivery")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := ps.QueueStats(ctx, topic)
	require.NoError(t, err)
	if time.Since(c.reported) < cfg.AckDeadline-500*time.Millisecond {
		assert.Equal(t, int64(1), s.InFlight, "the dead consumer's claim holds until its deadline: %s", s)
		assert.Zero(t, s.Ready, s.String())
	}

	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)
	m := brokertest.Next(t, msgs, 20*time.Second)
	waited := time.Since(c.reported)
	require.True(t, m.Ack())
	assert.Equal(t, sent.UUID, m.UUID)
	assert.Equal(t, "1", m.Metadata.Get(metadata.AttemptKey), "the crashed delivery counts")
	assert.GreaterOrEqual(t, waited, cfg.AckDeadline-250*time.Millisecond, "delivered again while the dead consumer's claim lasted")
}

// A message that kills its consumer every time is counted every time, and
// the count is one number with the nacks: three crashes, then a nack.
func TestRepeatedCrashesAreCounted(t *testing.T) {
	t.Parallel()
	const crashes = 3
	cfg := testConfig(t)
	cfg.AckDeadline = time.Second
	cfg.RedeliveryDelay = 50 * time.Millisecond
	ps := newPubSub(t, cfg)
	topic := brokertest.Topic(t)
	sent := message.NewMessage(watermill.NewUUID(), []byte("poison"))
	require.NoError(t, ps.Publish(topic, sent))

	var seen []string
	for range crashes {
		c := crashConsumer(t, cfg, topic)
		require.Equal(t, sent.UUID, c.uuid)
		seen = append(seen, c.attempt)
	}
	assert.Equal(t, []string{"0", "1", "2"}, seen, "x-attempt of each crashed delivery")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)
	m := brokertest.Next(t, msgs, 20*time.Second)
	assert.Equal(t, "3", m.Metadata.Get(metadata.AttemptKey), "after %d crashes", crashes)
	assert.NotContains(t, m.Metadata, metadata.FirstFailureKey, "a crash is not a nack: no failure time")
	require.True(t, m.Nack())
	m = brokertest.Next(t, msgs, 20*time.Second)
	assert.Equal(t, "4", m.Metadata.Get(metadata.AttemptKey), "then a nack")
	assert.Contains(t, m.Metadata, metadata.FirstFailureKey)
	require.True(t, m.Ack())
	// The subscription applies the ack after it has seen it.
	assert.Eventually(t, func() bool { return rowsLeft(t, cfg, topic) == 0 }, 5*time.Second, 20*time.Millisecond, "acked: deleted")
}

// A consumer killed while it holds several messages at once
// (broker.WithConcurrency) has used an attempt of each: the next subscriber
// gets every one of them, after the dead consumer's claim, with x-attempt 1.
func TestCrashWithSeveralHandedOutRedeliversThemAllCounted(t *testing.T) {
	t.Parallel()
	const hold = 4
	cfg := testConfig(t)
	cfg.AckDeadline = 2 * time.Second
	ps := newPubSub(t, cfg)
	topic := brokertest.Topic(t)
	sent := map[string]bool{}
	for i := range hold {
		m := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprint("held ", i)))
		sent[m.UUID] = true
		require.NoError(t, ps.Publish(topic, m))
	}

	cs := crashConsumerHolding(t, cfg, topic, hold)
	held := map[string]bool{}
	for _, c := range cs {
		assert.True(t, sent[c.uuid], "the child got %s, which was not sent", c.uuid)
		assert.Equal(t, "0", c.attempt, "a first delivery of %s", c.uuid)
		held[c.uuid] = true
	}
	require.Len(t, held, hold, "the child held %d different messages at once", hold)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	msgs, err := ps.Subscribe(ctx, topic)
	require.NoError(t, err)
	again := map[string]string{}
	for range hold {
		m := brokertest.Next(t, msgs, 20*time.Second)
		again[m.UUID] = m.Metadata.Get(metadata.AttemptKey)
		require.True(t, m.Ack())
	}
	waited := time.Since(cs[0].reported)
	for id := range sent {
		assert.Equal(t, "1", again[id], "message %s: its crashed delivery counts", id)
	}
	assert.GreaterOrEqual(t, waited, cfg.AckDeadline-250*time.Millisecond, "delivered again while the dead consumer's claim lasted")
}
