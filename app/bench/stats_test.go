package bench

import (
	"strings"
	"testing"
	"time"
)

func TestStats(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := Median(tc.xs); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
	ds := make([]time.Duration, 100)
	for i := range ds {
		ds[i] = time.Duration(100-i) * time.Millisecond
	}
	if got := Percentile(ds, 50); got != 50*time.Millisecond {
		t.Errorf("p50 = %s, want 50ms", got)
	}
	if got := Percentile(ds, 99); got != 99*time.Millisecond {
		t.Errorf("p99 = %s, want 99ms", got)
	}
	if got := FormatRate(1234567.4); got != "1,234,567 msg/s" {
		t.Errorf("FormatRate = %q", got)
	}
	var b strings.Builder
	if err := Render(&b, []Row{{ID: "R1", Scenario: "publish", Ratio: "0.950×"}}); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(b.String()), "\n"); len(lines) != 3 || !strings.Contains(lines[2], "0.950×") {
		t.Errorf("table:\n%s", b.String())
	}
}
