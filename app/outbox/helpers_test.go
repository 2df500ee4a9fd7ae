package outbox_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/dbtx"
	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/outbox"
)

// env is one test's migrated schema.
type env struct {
	pool   *pgxpool.Pool
	schema string
	table  outbox.Table
}

func newEnv(t *testing.T) env {
	t.Helper()
	pool, schema := dbtest.Schema(t)
	return env{pool: pool, schema: schema, table: outbox.Table{Schema: schema}}
}

func (e env) q(name string) string { return pgx.Identifier{e.schema, name}.Sanitize() }

// write commits msgs for topic in one transaction, as a handler does
// (dbtx.InTx: the rows go with the COMMIT).
func (e env) write(t *testing.T, topic string, msgs ...*message.Message) {
	t.Helper()
	require.NoError(t, dbtx.InTx(context.Background(), e.pool, func(ctx context.Context, tx pgx.Tx) error {
		return e.table.Write(ctx, tx, topic, msgs...)
	}))
}

func (e env) count(t *testing.T, where string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+e.q("outbox")+` WHERE `+where, args...).Scan(&n))
	return n
}

// row reads one outbox row's bookkeeping.
type rowState struct {
	Published, Parked bool
	Attempts          int
	LastError         *string
}

func (e env) row(t *testing.T, eventID string) rowState {
	t.Helper()
	var s rowState
	require.NoError(t, e.pool.QueryRow(context.Background(),
		`SELECT published_at IS NOT NULL, parked_at IS NOT NULL, attempts, last_error FROM `+e.q("outbox")+` WHERE event_id = $1`, eventID).
		Scan(&s.Published, &s.Parked, &s.Attempts, &s.LastError))
	return s
}

func (e env) relay(t *testing.T, pub message.Publisher, cfg outbox.RelayConfig) *outbox.Relay {
	t.Helper()
	cfg.Schema = e.schema
	r, err := outbox.NewRelay(e.pool, pub, cfg, nil)
	require.NoError(t, err)
	return r
}

// msgs returns n messages with ids prefix-0 … prefix-(n-1).
func msgs(prefix string, n int) []*message.Message {
	out := make([]*message.Message, n)
	for i := range out {
		out[i] = message.NewMessage(fmt.Sprintf("%s-%d", prefix, i), []byte(fmt.Sprintf(`{"n":%d}`, i)))
	}
	return out
}

// fakePublisher records what it is given and fails when fail says so.
type fakePublisher struct {
	mu    sync.Mutex
	calls []fakeCall
	// fail decides the outcome of one Publish call; nil = success.
	fail  func(call int, topic string, msgs []*message.Message) error
	delay time.Duration
}

type fakeCall struct {
	topic string
	msgs  []*message.Message
}

func (f *fakePublisher) Publish(topic string, msgs ...*message.Message) error {
	if f.delay > 0 {
		time.Sleep(f.delay)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.calls)
	f.calls = append(f.calls, fakeCall{topic: topic, msgs: msgs})
	if f.fail != nil {
		return f.fail(n, topic, msgs)
	}
	return nil
}

func (f *fakePublisher) Close() error { return nil }

// sent returns how often each event id was handed to Publish, failed calls
// included.
func (f *fakePublisher) sent() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for _, c := range f.calls {
		for _, m := range c.msgs {
			out[m.UUID]++
		}
	}
	return out
}

// order returns the ids handed to Publish, in order.
func (f *fakePublisher) order() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		for _, m := range c.msgs {
			out = append(out, m.UUID)
		}
	}
	return out
}

func (f *fakePublisher) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// partialError is a broker.PartialPublishError.
type partialError struct{ failed []string }

func (e partialError) Error() string         { return "refused: " + strings.Join(e.failed, ",") }
func (e partialError) FailedUUIDs() []string { return e.failed }

// failIDs fails exactly the given ids with a partial error.
func failIDs(ids ...string) func(int, string, []*message.Message) error {
	return func(_ int, _ string, msgs []*message.Message) error {
		var bad []string
		for _, m := range msgs {
			if slices.Contains(ids, m.UUID) {
				bad = append(bad, m.UUID)
			}
		}
		if bad == nil {
			return nil
		}
		return partialError{failed: bad}
	}
}

// refuseIDs refuses exactly the given ids permanently (as a broker refusing
// the messages themselves), with a partial error.
func refuseIDs(ids ...string) func(int, string, []*message.Message) error {
	fail := failIDs(ids...)
	return func(call int, topic string, msgs []*message.Message) error {
		return failure.AsPermanent(fail(call, topic, msgs))
	}
}
