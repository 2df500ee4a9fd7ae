package cli

import (
	"github.com/spf13/cobra"

	"github.com/eventpipe/eventpipe/app"
)

func (e *env) serveCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "Consume the configured routes until interrupted",
		Long: `serve connects to the configured broker (retrying with backoff while it is
unreachable), consumes every enabled route and serves the admin endpoints
(/healthz, /readyz, /metrics) on admin.addr.

On SIGINT or SIGTERM it stops taking new messages, lets in-flight ones finish
(up to serve.shutdown_timeout) and exits 0.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := e.load()
			if err != nil {
				return err
			}
			logger := e.logger(cfg)
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
