package disputes_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/auth"
	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/app/spec"
	"github.com/eventpipe/eventpipe/app/testbrokers"
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

// The module as serve runs it, on the embedded broker with the memory store
// and on the Postgres broker with the Postgres store, outbox and relay: its
// API server (disputes.api_addr) takes POST /v1/disputes twice with one key,
// its events-worker applies the one DisputeRaised, its reminder sweep fires
// the reminder and its reversal worker calls disputes.reversal_url once with
// the configured token.
func TestModuleEndToEnd(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"memory", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			rs := newReversalServer(t)
			cfg := config.Defaults()
			cfg.Disputes.Enabled = true
			cfg.Disputes.APIAddr = "127.0.0.1:0"
			cfg.Disputes.ReversalURL = rs.URL + "/v1/reversals"
			cfg.Disputes.ReversalTokenEnv = "PAYMENTS_TOKEN"
			cfg.Disputes.ReversalInterval, cfg.Disputes.ReminderSweepInterval = 100*time.Millisecond, 100*time.Millisecond
			var logs logBuffer
			logger := logs.logger()
			ps := testbrokers.New(t, kind, testbrokers.Scope(t, kind))
			d := spec.Deps{
				Config: cfg, Publisher: ps, Broker: ps, Logger: logger, Registerer: prometheus.NewRegistry(),
				Getenv: func(name string) string {
					if name == "PAYMENTS_TOKEN" {
						return "tok-from-env"
					}
					return ""
				},
			}
			if kind == "memory" {
				d.Inbox, d.Outbox = inbox.NewMemory(), outbox.AfterCommit{Publisher: ps}
			} else {
				pool, schema := dbtest.Schema(t)
				d.Config.Postgres.Schema, d.DB = schema, pool
				ib, err := inbox.NewPostgres(pool, schema)
				require.NoError(t, err)
				d.Inbox, d.Outbox = ib, outbox.TxWriter{Table: outbox.Table{Schema: schema}}
				relay, err := outbox.NewRelay(pool, ps, outbox.RelayConfig{Schema: schema, PollInterval: 100 * time.Millisecond, MinBackoff: 100 * time.Millisecond}, logger)
				require.NoError(t, err)
				runInBackground(t, relay.Run)
				init, ok := ps.(message.SubscribeInitializer)
				require.True(t, ok)
				require.NoError(t, init.SubscribeInitialize(disputes.DomainEventsQueue))
			}
			parts, err := disputes.Module.Build(context.Background(), d)
			require.NoError(t, err)
			require.Len(t, parts.Servers, 1)
			api := parts.Servers[0]
			assert.Equal(t, disputes.APIServer, api.Name)
			assert.Equal(t, "127.0.0.1:0", api.Addr)
			assert.True(t, api.Intake, "serve's drain stops taking disputes first")
			assert.Contains(t, logs.String(), "disputes API serves without authentication")
			assert.ElementsMatch(t, []string{"disputes reminder sweep", "disputes reversal worker"}, workerNames(parts))
			testbrokers.StartRoutes(t, ps, nil, logger, parts.Routes...)
			for _, w := range parts.Workers {
				runInBackground(t, w.Run)
			}
			srv := httptest.NewServer(api.Handler)
			t.Cleanup(srv.Close)

			due := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano) // the reminder (a day before) is due at once
			body := `{"txn_id":"txn_e2e","reason_code":"failed_but_debited","rail":"upi","tat_due_at":"` + due + `"}`
			first := post(t, srv, disputes.DisputesPath, body, disputes.IdempotencyKeyHeader, "e2e-1")
			require.Equal(t, http.StatusCreated, first.status, first.body)
			again := post(t, srv, disputes.DisputesPath, body, disputes.IdempotencyKeyHeader, "e2e-1")
			assert.Equal(t, first.body, again.body)
			var dr disputes.DisputeResponse
			require.NoError(t, json.Unmarshal([]byte(first.body), &dr))

			require.Eventually(t, func() bool {
				return strings.Contains(logs.String(), `msg="dispute reminder due" dispute_id=`+dr.ID) &&
					strings.Contains(logs.String(), `msg="dispute auto-reversed" dispute_id=`+dr.ID)
			}, 30*time.Second, 50*time.Millisecond, "reminder fired and dispute reversed")
			calls := rs.calls()
			require.Len(t, calls, 1)
			assert.Equal(t, "Bearer tok-from-env", calls[0].auth)
			assert.Equal(t, disputes.ReversalIdempotencyKey(dr.ID), calls[0].key)
			assert.Equal(t, 1, strings.Count(logs.String(), `msg="dispute TAT timer started"`), "one effect for two requests")
			assert.Equal(t, 1, strings.Count(logs.String(), `msg="dispute reminder due"`))
		})
	}
}

// runInBackground runs f until the test ends.
func runInBackground(t *testing.T, f func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = f(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// Without reversal_url the reversal worker is off with a warning (eligible
// disputes wait, pending), unless sample traffic asks for the logging
// stand-in; with a verifier the API requires a token; api_addr "" turns the
// API off.
func TestModuleReversalsAndAPIWiring(t *testing.T) {
	t.Parallel()
	build := func(mut func(*config.Config), verifier *auth.Verifier) (spec.Parts, string) {
		t.Helper()
		cfg := config.Defaults()
		cfg.Disputes.Enabled = true
		mut(&cfg)
		var logs logBuffer
		parts, err := disputes.Module.Build(context.Background(), spec.Deps{
			Config: cfg, Inbox: inbox.NewMemory(), Getenv: func(string) string { return "" }, Logger: logs.logger(), Verifier: verifier,
		})
		require.NoError(t, err)
		return parts, logs.String()
	}
	parts, logs := build(func(*config.Config) {}, nil)
	assert.NotContains(t, workerNames(parts), "disputes reversal worker")
	assert.Contains(t, logs, `level=WARN msg="disputes auto-reversal is off: disputes.reversal_url is not set`)
	require.Len(t, parts.Servers, 1)
	assert.Equal(t, "127.0.0.1:8082", parts.Servers[0].Addr, "the default address")

	parts, logs = build(func(c *config.Config) { c.Disputes.SampleTraffic = true }, nil)
	assert.Contains(t, workerNames(parts), "disputes reversal worker")
	assert.Contains(t, logs, "disputes auto-reversal uses the logging stand-in (disputes.sample_traffic)")

	parts, _ = build(func(c *config.Config) { c.Disputes.APIAddr = "" }, nil)
	assert.Empty(t, parts.Servers, "api_addr empty: off")

	v, err := auth.New(auth.Config{Secret: []byte("disputes-module-test-secret-32-bytes")})
	require.NoError(t, err)
	t.Cleanup(v.Close)
	parts, logs = build(func(*config.Config) {}, v)
	assert.NotContains(t, logs, "without authentication")
	srv := httptest.NewServer(parts.Servers[0].Handler)
	t.Cleanup(srv.Close)
	r := post(t, srv, disputes.DisputesPath, `{"txn_id":"t","reason_code":"r"}`, disputes.IdempotencyKeyHeader, "k")
	assert.Equal(t, http.StatusUnauthorized, r.status, "the verifier guards the API")
}
