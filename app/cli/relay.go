package cli

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/eventpipe/eventpipe/app"
)

func (e *env) relayCmd() *cobra.Command {
	var schema string
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "Publish the outbox to the configured broker until interrupted",
		Long: `relay runs the transactional outbox's relay on its own (serve runs it too): it
publishes the rows of <schema>.outbox to the configured broker, marks them
published and retries an unavailable broker forever (at most a minute apart);
only a row the broker refuses for good (too large, unroutable) is parked, and
'eventpipe outbox requeue' brings it back. It also deletes published rows older
than 7 days. Any number of
relays may run at once. It connects with postgres.dsn (EVENTPIPE_POSTGRES_DSN),
which is required, and the schema must be migrated (eventpipe migrate up).

It wakes on the outbox's NOTIFY channel ("<schema>_outbox") and polls every
10s. SIGINT or SIGTERM end it after the batch in flight; exit 0.`,
		Example: `  EVENTPIPE_BROKER=sqs EVENTPIPE_POSTGRES_DSN=postgres://… eventpipe relay`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.withDB(cmd.Context(), &schema, func(ctx context.Context, pool *pgxpool.Pool) error {
				cfg, err := e.load()
				if err != nil {
					return err
				}
				logger := e.logger(cfg)
				ps, err := app.NewBroker(ctx, cfg, logger)
				if err != nil {
					if ctx.Err() != nil {
						logger.Info("interrupted before the broker answered")
						return nil
					}
					return err
				}
				defer func() { _ = ps.Close() }()
				cfg.Postgres.Schema = schema
				logger.Info("outbox relay started", "schema", schema, "broker", cfg.Broker.Kind)
				err = app.RunOutbox(ctx, cfg, pool, ps, nil, logger)
				logger.Info("outbox relay stopped")
				return err
			})
		},
	}
	cmd.Flags().StringVar(&schema, "schema", "", "schema holding the outbox table (default: postgres.schema, eventpipe)")
	return cmd
}
