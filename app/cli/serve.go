package cli

import (
	"fmt"
	"log/slog"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/config"
)

func (e *env) serveCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "Consume the configured routes until interrupted",
		Long: `serve connects to the configured broker (retrying with backoff while it is
unreachable), consumes every enabled route and serves the admin endpoints
(/healthz, /readyz, /metrics) on admin.addr. With no route enabled it warns and
says how to enable one.

On SIGINT or SIGTERM it stops taking new messages, lets in-flight ones finish
(up to serve.shutdown_timeout) and exits 0.

` + configHelp(),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := e.load()
			if err != nil {
				return err
			}
			logger := e.logger(cfg)
			warnNoRoute(logger, cfg)
			svc, err := app.New(cmd.Context(), cfg, logger)
			if err != nil {
				if cmd.Context().Err() != nil {
					// Interrupted while still connecting: a clean stop.
					logger.Info("interrupted before the broker answered")
					return nil
				}
				return err
			}
			return svc.Run(cmd.Context())
		},
	}
}

// warnNoRoute warns when cfg enables neither the demo nor a spec: serve would
// consume nothing, which is rarely what was meant.
func warnNoRoute(logger *slog.Logger, cfg config.Config) {
	if len(app.EnabledSpecs(cfg)) > 0 {
		return
	}
	vars := map[string]string{}
	for _, v := range config.EnvVars() {
		vars[v.Path] = v.Name
	}
	var switches []string
	for _, name := range app.SpecNames() {
		if v, ok := vars[name+".enabled"]; ok {
			switches = append(switches, v+"=true")
		}
	}
	logger.Warn("no route is enabled: serve consumes nothing and serves only the admin endpoints; "+
		"enable the demo or a spec with one of these variables (or <name>.enabled: true in --config), "+
		"or run a preset: eventpipe serve --config config/examples/rabbitmq.yaml (every spec), make run (all of them on the memory broker with sample traffic)",
		slog.String("enable", strings.Join(switches, " ")))
}

// configHelp lists every key serve reads with its variable and default
// (config.EnvVars, the source of the README's table too), and the variables
// read besides them.
func configHelp() string {
	var b strings.Builder
	b.WriteString(`Configuration: the defaults, then the YAML file (--config or EVENTPIPE_CONFIG), then
these EVENTPIPE_* variables; the README describes every key.

`)
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(w, "  KEY\tVARIABLE\tDEFAULT")
	for _, v := range config.EnvVars() {
		name := v.Name
		if v.Alias != "" {
			name += " (or " + v.Alias + ")"
		}
		def := v.Default
		if def == "" {
			def = `""`
		}
		_, _ = fmt.Fprintf(w, "  %s\t%s\t%s\n", v.Path, name, def)
	}
	_ = w.Flush()
	b.WriteString(`
Also read: the secrets the *_env keys name (EVENTPIPE_ADMIN_TOKEN_SECRET,
EVENTPIPE_REALTIME_TOKEN_SECRET, OPENAI_API_KEY, EVENTPIPE_JOINLINK_BULK_REGISTER_TOKEN
by default), the AWS SDK's own variables (AWS_REGION, AWS_ENDPOINT_URL_SQS,
AWS_PROFILE, AWS_ACCESS_KEY_ID, …), OpenTelemetry's (OTEL_SERVICE_NAME,
OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_*, OTEL_TRACES_SAMPLER)
and the join-link spec's ENABLE_JOIN_LINK_* and AWS_SCHEDULER_* variables.`)
	return b.String()
}
