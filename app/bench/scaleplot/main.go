// Command scaleplot draws the SC rows of a `make bench` table — end-to-end
// throughput against the number of queues one instance consumes, eventpipe
// and the raw client side by side for each broker — as a PNG, both axes
// logarithmic (equal ratios, equal distances):
//
//	EVENTPIPE_BENCH_OUT=/tmp/bench-full.txt make bench
//	go run ./app/bench/scaleplot -in /tmp/bench-full.txt -out docs/bench-scale.png
//
// -note adds a remark to the title (say, that the machine was loaded).
package main

import (
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/eventpipe/eventpipe/app/bench"
)

func main() {
	in := flag.String("in", "", "the table `make bench` wrote (EVENTPIPE_BENCH_OUT)")
	out := flag.String("out", "docs/bench-scale.png", "the PNG to write")
	note := flag.String("note", "", "a remark added to the title, e.g. the machine's load")
	flag.Parse()
	if err := run(*in, *out, *note); err != nil {
		fmt.Fprintln(os.Stderr, "scaleplot:", err)
		os.Exit(1)
	}
}

func run(in, out, note string) error {
	if in == "" {
		return errors.New("-in: the table file is required")
	}
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	rows, err := bench.ParseTable(strings.NewReader(string(data)))
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	ss, err := scaleSeries(rows)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	p, err := newPlot(ss, subtitle(string(data)), note)
	if err != nil {
		return err
	}
	return p.Save(8*vg.Inch, 5*vg.Inch, out)
}

// series is one line of the plot: a broker's client, its rate at each queue
// count.
type series struct {
	broker, client string
	points         plotter.XYs
}

var (
	scaleScenario = regexp.MustCompile(`^(\w+) end to end, (\d+) queues?$`)
	clientName    = regexp.MustCompile(`\(([^()]+)\)$`)
)

// scaleSeries picks the throughput rows of SC (scenario "<broker> end to
// end, N queues") and returns, per broker, eventpipe's series and the
// baseline's, in the order the brokers first appear.
func scaleSeries(rows []bench.Row) ([]series, error) {
	var out []series
	add := func(broker, client string, x, y float64) {
		i := slices.IndexFunc(out, func(s series) bool { return s.broker == broker && s.client == client })
		if i < 0 {
			out = append(out, series{broker: broker, client: client})
			i = len(out) - 1
		}
		out[i].points = append(out[i].points, plotter.XY{X: x, Y: y})
	}
	for _, r := range rows {
		m := scaleScenario.FindStringSubmatch(r.Scenario)
		if r.ID != "SC" || m == nil {
			continue
		}
		queues, _ := strconv.ParseFloat(m[2], 64)
		ours, err := parseRate(r.Ours)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.Scenario, err)
		}
		base, err := parseRate(r.Baseline)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.Scenario, err)
		}
		baseName := "baseline"
		if c := clientName.FindStringSubmatch(r.Baseline); c != nil {
			baseName = c[1]
		}
		add(m[1], "eventpipe", queues, ours)
		add(m[1], baseName, queues, base)
	}
	if len(out) == 0 {
		return nil, errors.New(`no SC throughput rows ("<broker> end to end, N queues"): run make bench with them (EVENTPIPE_BENCH_IDS=SC)`)
	}
	return out, nil
}

// parseRate reads "7,341 msg/s" (and whatever follows).
func parseRate(s string) (float64, error) {
	num, _, ok := strings.Cut(s, " msg/s")
	if !ok {
		return 0, fmt.Errorf("%q is not a rate in msg/s", s)
	}
	return strconv.ParseFloat(strings.ReplaceAll(num, ",", ""), 64)
}

// subtitle is the table's title line ("eventpipe benchmarks, full mode: …")
// up to its first semicolon, and its date; "" without one.
func subtitle(table string) string {
	for line := range strings.Lines(table) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "eventpipe benchmarks, "); ok {
			parts := strings.Split(rest, "; ")
			mode, _, _ := strings.Cut(parts[0], ":")
			if len(parts) >= 2 {
				fields := strings.Split(parts[1], ", ")
				return mode + ", " + fields[len(fields)-1]
			}
			return mode
		}
	}
	return ""
}

// rateTicks marks 1, 2 and 5 of every power of ten, labelled with thousands
// separators.
type rateTicks struct{}

func (rateTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for d := math.Pow(10, math.Floor(math.Log10(lo))); d <= hi; d *= 10 {
		for _, k := range []float64{1, 2, 5} {
			if v := k * d; v >= lo && v <= hi {
				ts = append(ts, plot.Tick{Value: v, Label: thousands(v)})
			}
		}
	}
	return ts
}

// thousands prints v (≥ 1) as an integer with thousands separators.
func thousands(v float64) string {
	s := strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// palette: one colour per broker.
var palette = []color.Color{
	color.RGBA{R: 0xd6, G: 0x5f, B: 0x00, A: 0xff}, // rabbitmq
	color.RGBA{R: 0x1f, G: 0x5f, B: 0xb4, A: 0xff}, // postgres
	color.RGBA{R: 0x2e, G: 0x8b, B: 0x3d, A: 0xff}, // sqs
	color.RGBA{R: 0x80, G: 0x40, B: 0x90, A: 0xff},
}

// newPlot builds the plot: eventpipe solid, the baseline dashed, both with
// their points, one colour per broker; sub and note, when set, are title
// lines of their own.
func newPlot(ss []series, sub, note string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "End-to-end throughput against queues consumed by one instance"
	if sub != "" {
		p.Title.Text += "\n(make bench, SC rows; " + sub + ")"
	}
	if note != "" {
		p.Title.Text += "\n" + note
	}
	p.X.Label.Text = "queues subscribed (messages spread evenly)"
	p.Y.Label.Text = "msg/s (median)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	var xs []float64
	var brokers []string
	ymin, ymax := math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		for _, pt := range s.points {
			if !slices.Contains(xs, pt.X) {
				xs = append(xs, pt.X)
			}
			ymin, ymax = min(ymin, pt.Y), max(ymax, pt.Y)
		}
		if !slices.Contains(brokers, s.broker) {
			brokers = append(brokers, s.broker)
		}
	}
	slices.Sort(xs)
	ticks := make(plot.ConstantTicks, len(xs))
	for i, x := range xs {
		ticks[i] = plot.Tick{Value: x, Label: strconv.FormatFloat(x, 'f', -1, 64)}
	}
	p.X.Tick.Marker = ticks
	// Room below the lowest line for the legend, bottom left.
	p.Y.Min, p.Y.Max = ymin/6, ymax*1.3
	p.Y.Tick.Marker = rateTicks{}
	p.Legend.Top, p.Legend.Left = false, true
	p.Legend.XOffs = vg.Points(8)
	p.Add(plotter.NewGrid())
	for _, s := range ss {
		slices.SortFunc(s.points, func(a, b plotter.XY) int { return int(a.X - b.X) })
		line, points, err := plotter.NewLinePoints(s.points)
		if err != nil {
			return nil, err
		}
		c := palette[slices.Index(brokers, s.broker)%len(palette)]
		line.Color, points.Color = c, c
		line.Width = vg.Points(1.5)
		points.Shape = draw.CircleGlyph{}
		if s.client != "eventpipe" {
			line.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
			points.Shape = draw.BoxGlyph{}
		}
		p.Add(line, points)
		p.Legend.Add(s.broker+": "+s.client, line, points)
	}
	return p, nil
}
