package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Sample is one repetition of one side of a pair.
type Sample struct {
	// Messages handled (published, consumed, relayed …) in Elapsed.
	Messages int
	Elapsed  time.Duration
	// Latencies, publish to handler, when the scenario measures them.
	Latencies []time.Duration
	// Calls counts API requests (SQS) made during the repetition.
	Calls int64
}

// Rate is messages per second.
func (s Sample) Rate() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Messages) / s.Elapsed.Seconds()
}

// CallsPerMessage is Calls / Messages.
func (s Sample) CallsPerMessage() float64 {
	if s.Messages == 0 {
		return 0
	}
	return float64(s.Calls) / float64(s.Messages)
}

// Median of xs (the mean of the two middle values for an even count); 0 for
// none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// Percentile returns the p-th percentile (0 < p ≤ 100) of ds by the
// nearest-rank method; 0 for none.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(float64(len(s))*p/100+0.999999) - 1
	return s[min(max(rank, 0), len(s)-1)]
}

// Row is one line of the table.
type Row struct {
	ID       string
	Scenario string
	Settings string
	Ours     string // eventpipe's figure
	Baseline string // the figure it is compared with, naming the baseline
	Ratio    string
	Target   string
	Verdict  string
}

// Render writes rows as a Markdown table.
func Render(w io.Writer, rows []Row) error {
	header := []string{"id", "scenario", "settings", "eventpipe", "baseline", "ratio", "target", "verdict"}
	cells := make([][]string, 0, len(rows)+1)
	cells = append(cells, header)
	for _, r := range rows {
		cells = append(cells, []string{r.ID, r.Scenario, r.Settings, r.Ours, r.Baseline, r.Ratio, r.Target, r.Verdict})
	}
	width := make([]int, len(header))
	for _, row := range cells {
		for i, c := range row {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	var b strings.Builder
	line := func(row []string) {
		b.WriteString("|")
		for i, c := range row {
			fmt.Fprintf(&b, " %s%s |", c, strings.Repeat(" ", width[i]-len([]rune(c))))
		}
		b.WriteString("\n")
	}
	line(cells[0])
	b.WriteString("|")
	for _, wd := range width {
		b.WriteString(strings.Repeat("-", wd+2) + "|")
	}
	b.WriteString("\n")
	for _, row := range cells[1:] {
		line(row)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// FormatRate prints msg/s with a thousands separator.
func FormatRate(r float64) string {
	return group(int64(r+0.5)) + " msg/s"
}

// FormatLatency prints a latency in ms with two significant decimals.
func FormatLatency(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case ms >= 100:
		return fmt.Sprintf("%.0f ms", ms)
	case ms >= 10:
		return fmt.Sprintf("%.1f ms", ms)
	default:
		return fmt.Sprintf("%.2f ms", ms)
	}
}

func group(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + group(-n)
	}
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}
