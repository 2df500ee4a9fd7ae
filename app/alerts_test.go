package app_test

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/app/testbrokers"
	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/config"
)

// docs/alerts.yml is valid Prometheus rules (Prometheus' own parser, PromQL
// and templates included), has the alerts the specs ask for, and every metric
// it names is served by a running service's /metrics — the queue gauges with
// a sample per declared queue and DLQ.
func TestAlertRulesNameServedMetrics(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "docs", "alerts.yml"))
	require.NoError(t, err)
	groups, errs := rulefmt.Parse(raw, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	require.Empty(t, errs)
	names := map[string]bool{}
	alerts := map[string]bool{}
	p := parser.NewParser(parser.Options{})
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = true
			expr, err := p.ParseExpr(r.Expr)
			require.NoError(t, err, r.Alert)
			parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
				if vs, ok := n.(*parser.VectorSelector); ok {
					names[vs.Name] = true
				}
				return nil
			})
		}
	}
	for _, want := range []string{"EventpipeDeadLetters", "EventpipeOutboxLag", "EventpipeOutboxParked", "EventpipeJoinLinkFailedStuck"} {
		assert.True(t, alerts[want], "alert %s", want)
	}

	cfg := config.Defaults()
	cfg.Broker.Kind = config.KindPostgres
	cfg.Postgres.DSN = testenv.PostgresDSN(t)
	cfg.Postgres.Schema = testbrokers.Scope(t, "postgres")
	cfg.Admin.Addr = "127.0.0.1:0"
	cfg.StackUp.Enabled = true
	cfg.StackUp.Roles = "core,ai-worker"
	cfg.StackUp.Processors = "sample"
	cfg.JoinLink.Enabled = true
	cfg.JoinLink.BulkRegisterURL = "http://127.0.0.1:1/bulk-register" // never called
	cfg.Serve.ConnectTimeout = 30 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	svc, err := app.New(ctx, cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	// The queues' tables and the relay's gauges come once serve runs; the
	// counts are asked again every few seconds.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, body := get(t, "http://"+svc.AdminAddr()+"/metrics")
		assert.Equal(c, http.StatusOK, code)
		for name := range names {
			assert.True(c, regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(name)+`[{ ]`).MatchString(body), "metric %s of docs/alerts.yml is not served", name)
		}
		assert.True(c, strings.Contains(body, `eventpipe_queue_dead_letter_messages{dead_letter_queue="dlq.ai.analyze.resume",messaging_destination_name="ai.analyze.resume",messaging_system="postgresql"} 0`))
		assert.True(c, strings.Contains(body, `eventpipe_queue_in_flight_messages{messaging_destination_name="ai.analyze.resume",messaging_system="postgresql"} 0`))
	}, 30*time.Second, 200*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
}
