package interviews_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/handlers/interviews"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSampleTraffic runs what `make run` runs: the embedded broker, the
// memory store, the sample generator.
func TestSampleTraffic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	ps := newBroker(t, "memory")
	store := interviews.NewMemory()
	h := interviews.Handlers{Store: store, Outbox: outbox.AfterCommit{Publisher: ps}, Generator: interviews.SampleGenerator{}, Logger: logger}
	startRoutes(t, ps, logger, h.Routes()...)

	org, err := interviews.SampleTraffic(ctx, store, interviews.NewProducer(ps, logger), logger)
	require.NoError(t, err)
	o, err := store.Organization(ctx, org)
	require.NoError(t, err)
	assert.Equal(t, int64(110), o.AvailableCredits, "120 - 10 consumed by the 10-minute interview")
	assert.Zero(t, o.ReservedCredits)
	entries, err := store.LedgerEntries(ctx, org)
	require.NoError(t, err)
	kinds := map[string]int64{}
	for _, e := range entries {
		kinds[e.Kind] += e.Credits
	}
	assert.Equal(t, map[string]int64{interviews.LedgerSettle: 10, interviews.LedgerRelease: 5 + 15 + 15}, kinds,
		"the duplicate completion changed nothing")
	out := logs.String()
	assert.Contains(t, out, "interviews sample traffic: done")
	// The duplicate may be handled after SampleTraffic returned: the
	// embedded broker keeps no order, and the sample waits for the reports,
	// not for the duplicate.
	assert.Eventually(t, func() bool { return strings.Contains(logs.String(), "interview already settled, nothing to do") },
		10*time.Second, 20*time.Millisecond, "the duplicate completion is acknowledged without effect")
	assert.Contains(t, out, "insufficient evidence")
	assert.Contains(t, out, `long_interview_report=hire`)
	assert.Contains(t, out, `short_interview_report=insufficient_evidence`)
}
