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
	var b strings.Builder
	require.NoError(t, Render(&b, []Row{{ID: "R1", Scenario: "publish", Ratio: "0.950×"}}))
	if lines := strings.Split(strings.TrimSpace(b.String()), "\n"); assert.Len(t, lines, 3, "table:\n%s", b.String()) {
		assert.Contains(t, lines[2], "0.950×", "table:\n%s", b.String())
	}
}
