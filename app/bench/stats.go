package bench

import (
	"errors"
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
	// Queues, Goroutines and HeapBytes are, when Queues > 0, what keeping
	// Queues subscriptions open cost once their backlog was drained: the
	// goroutines and the live heap (after a GC) above what the process had
	// before it subscribed.
	Queues     int
	Goroutines int
	HeapBytes  int64
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

// ParseTable reads back a table Render wrote (the file EVENTPIPE_BENCH_OUT
// names): every line that starts with "|" after the header and its rule is
// a row; anything else (the title line) is skipped.
func ParseTable(r io.Reader) ([]Row, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	var rows []Row
	header := false
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if len(cells) != 8 {
			return nil, fmt.Errorf("table line has %d cells, want 8: %q", len(cells), line)
		}
		switch {
		case !header:
			if cells[0] != "id" {
				return nil, fmt.Errorf("table header: got %q", line)
			}
			header = true
		case strings.Trim(cells[0], "-") == "":
		default:
			rows = append(rows, Row{ID: cells[0], Scenario: cells[1], Settings: cells[2], Ours: cells[3], Baseline: cells[4], Ratio: cells[5], Target: cells[6], Verdict: cells[7]})
		}
	}
	if !header {
		return nil, errors.New("no table found")
	}
	return rows, nil
}

// FormatBytes prints a byte count in B, KiB or MiB with three significant
// digits.
func FormatBytes(n float64) string {
	sign := ""
	if n < 0 {
		sign, n = "-", -n
	}
	switch {
	case n >= 1<<20:
		return sign + trim3(n/(1<<20)) + " MiB"
	case n >= 1<<10:
		return sign + trim3(n/(1<<10)) + " KiB"
	default:
		return sign + fmt.Sprintf("%.0f B", n)
	}
}

// trim3 prints x with three significant digits (x ≥ 1).
func trim3(x float64) string {
	switch {
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.2f", x)
	}
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
