package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStats(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		assert.Equal(t, tc.want, Median(tc.xs), "Median(%v)", tc.xs)
	}
	ds := make([]time.Duration, 100)
	for i := range ds {
		ds[i] = time.Duration(100-i) * time.Millisecond
	}
	assert.Equal(t, 50*time.Millisecond, Percentile(ds, 50), "p50")
	assert.Equal(t, 99*time.Millisecond, Percentile(ds, 99), "p99")
	assert.Equal(t, "1,234,567 msg/s", FormatRate(1234567.4), "FormatRate")
	assert.Equal(t, "512 B", FormatBytes(512), "FormatBytes")
	assert.Equal(t, "1.50 KiB", FormatBytes(1536), "FormatBytes")
	assert.Equal(t, "-12.0 MiB", FormatBytes(-12<<20), "FormatBytes")
	var b strings.Builder
	rows := []Row{{ID: "R1", Scenario: "publish", Ratio: "0.950×"}, {ID: "SC", Scenario: "sqs consume, 15 queues", Ours: "1,200 msg/s", Baseline: "900 msg/s (x)"}}
	require.NoError(t, Render(&b, rows))
	if lines := strings.Split(strings.TrimSpace(b.String()), "\n"); assert.Len(t, lines, 4, "table:\n%s", b.String()) {
		assert.Contains(t, lines[2], "0.950×", "table:\n%s", b.String())
	}
	back, err := ParseTable(strings.NewReader("\neventpipe benchmarks, quick mode …\n\n" + b.String()))
	require.NoError(t, err)
	assert.Equal(t, rows, back, "ParseTable reads back what Render wrote")
	_, err = ParseTable(strings.NewReader("no table here\n"))
	assert.Error(t, err)
}
