package main

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/bench"
)

// A table as `make bench` writes it becomes a PNG with a line per broker and
// client; the other rows, SC's idle-cost rows included, are left out.
func TestPlotFromTable(t *testing.T) {
	t.Parallel()
	var table strings.Builder
	table.WriteString("\neventpipe benchmarks, quick mode: 3 alternating repetitions per side, medians; go1.26.8, GOMAXPROCS=2, 2026-12-01T16:18:01Z; took 3m55s\n\n")
	require.NoError(t, bench.Render(&table, []bench.Row{
		{ID: "R1", Scenario: "rabbitmq publish", Ours: "5,202 msg/s", Baseline: "5,498 msg/s (amqp091-go)"},
		{ID: "SC", Scenario: "rabbitmq end to end, 1 queue", Ours: "7,341 msg/s", Baseline: "7,862 msg/s (amqp091-go)"},
		{ID: "SC", Scenario: "rabbitmq idle cost, 1 queue subscribed", Ours: "+7 goroutines (7.0/queue), +8.74 KiB heap (8.74 KiB/queue)", Baseline: "+2 goroutines"},
		{ID: "SC", Scenario: "rabbitmq end to end, 100 queues", Ours: "3,634 msg/s", Baseline: "7,702 msg/s (amqp091-go)"},
		{ID: "SC", Scenario: "sqs end to end, 1 queue", Ours: "2,110 msg/s", Baseline: "360 msg/s (watermill-aws defaults)"},
	}))
	rows, err := bench.ParseTable(strings.NewReader(table.String()))
	require.NoError(t, err)
	ss, err := scaleSeries(rows)
	require.NoError(t, err)
	require.Len(t, ss, 4)
	assert.Equal(t, "amqp091-go", ss[1].client)
	assert.Len(t, ss[0].points, 2, "rabbitmq at 1 and 100 queues")
	assert.Equal(t, 3634.0, ss[0].points[1].Y)
	assert.Equal(t, "quick mode, 2026-12-01T16:18:01Z", subtitle(table.String()))

	dir := t.TempDir()
	in, out := filepath.Join(dir, "table.txt"), filepath.Join(dir, "scale.png")
	require.NoError(t, os.WriteFile(in, []byte(table.String()), 0o644))
	require.NoError(t, run(in, out, "a note"))
	f, err := os.Open(out)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	img, err := png.Decode(f)
	require.NoError(t, err)
	assert.Equal(t, 768, img.Bounds().Dx(), "8 in at 96 dpi")
}

func TestNoScaleRows(t *testing.T) {
	t.Parallel()
	_, err := scaleSeries([]bench.Row{{ID: "R1", Scenario: "rabbitmq publish"}})
	assert.ErrorContains(t, err, "no SC throughput rows")
	_, err = parseRate("p50 1.01 ms")
	assert.Error(t, err)
}
