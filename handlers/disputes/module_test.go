package disputes_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/spec"
	"github.com/eventpipe/eventpipe/config"
	"github.com/eventpipe/eventpipe/handlers/disputes"
)

// The ingest-worker's object store is the real adapter whenever
// disputes.s3_bucket is set, the in-memory one only for sample traffic, and
// with neither the ingest-worker is off with a log line saying why; a build
// without the adapter refuses a configured bucket.
func TestModuleWiresTheIngestWorker(t *testing.T) {
	t.Parallel()
	build := func(m spec.Module, mut func(*config.Disputes)) (spec.Parts, string, error) {
		t.Helper()
		cfg := config.Defaults()
		cfg.Disputes.Enabled = true
		cfg.SQS.Region = "eu-west-1"
		mut(&cfg.Disputes)
		var (
			mu   sync.Mutex
			logs strings.Builder
		)
		parts, err := m.Build(context.Background(), spec.Deps{
			Config: cfg, Inbox: inbox.NewMemory(), Getenv: func(string) string { return "" },
			Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil)),
		})
		return parts, logs.String(), err
	}
	hasIngest := func(p spec.Parts) bool {
		_, err := p.Routes.ByQueue(disputes.IngestQueue)
		return err == nil
	}

	var got []disputes.S3Config
	fake := disputes.NewMemoryObjects()
	withS3 := disputes.NewModule(disputes.Adapters{S3: func(_ context.Context, c disputes.S3Config) (disputes.Objects, error) {
		got = append(got, c)
		return fake, nil
	}})

	parts, logs, err := build(withS3, func(c *config.Disputes) {
		c.S3Bucket, c.S3Endpoint, c.S3PathStyle = "kb-docs", "http://127.0.0.1:9324", true
	})
	require.NoError(t, err)
	assert.True(t, hasIngest(parts), "s3_bucket runs the ingest-worker, no sample traffic needed")
	assert.NotContains(t, workerNames(parts), "disputes sample traffic")
	assert.Equal(t, []disputes.S3Config{{Region: "eu-west-1", Endpoint: "http://127.0.0.1:9324", PathStyle: true,
		MaxObjectBytes: 10 << 20, Timeout: config.Defaults().Disputes.S3Timeout}}, got)
	assert.Contains(t, logs, `msg="disputes ingest-worker reads S3" bucket=kb-docs`)

	parts, logs, err = build(withS3, func(c *config.Disputes) { c.S3Bucket, c.SampleTraffic = "kb-docs", true })
	require.NoError(t, err)
	assert.True(t, hasIngest(parts))
	assert.Contains(t, workerNames(parts), "disputes sample traffic", "sample traffic still runs, recording its document directly")
	assert.Contains(t, logs, "sample traffic records its document directly")

	parts, logs, err = build(withS3, func(c *config.Disputes) { c.SampleTraffic = true })
	require.NoError(t, err)
	assert.True(t, hasIngest(parts), "sample traffic: the in-memory store")
	assert.Contains(t, logs, "in-memory object store (disputes.sample_traffic)")
	assert.Len(t, got, 2, "no S3 client without a bucket")

	parts, logs, err = build(withS3, func(*config.Disputes) {})
	require.NoError(t, err)
	assert.False(t, hasIngest(parts), "neither: the ingest-worker is off")
	_, err = parts.Routes.ByQueue(disputes.DomainEventsQueue)
	require.NoError(t, err, "the events-worker runs")
	assert.Contains(t, logs, `level=WARN msg="disputes ingest-worker is off: disputes.s3_bucket is not set, so nothing consumes ingest-queue`)

	_, _, err = build(disputes.Module, func(c *config.Disputes) { c.S3Bucket = "kb-docs" })
	assert.ErrorContains(t, err, "disputes.s3_bucket needs the S3 adapter")
}

func workerNames(p spec.Parts) []string {
	var names []string
	for _, w := range p.Workers {
		names = append(names, w.Name)
	}
	return names
}
