package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/eventpipe/eventpipe/migrations"
)

// dbConnectTimeout bounds how long migrate and relay wait for PostgreSQL to
// answer their first query: an operator running a command wants an answer.
const dbConnectTimeout = 15 * time.Second

func (e *env) migrateCmd() *cobra.Command {
	var schema string
	cmd := &cobra.Command{
		Use:   "migrate up|down|status",
		Short: "Apply, roll back or list eventpipe's PostgreSQL migrations",
		Long: `migrate manages the tables eventpipe keeps in PostgreSQL (the inbox, the outbox
and the specs' stores) with the SQL migrations embedded in this binary. It
connects with postgres.dsn (EVENTPIPE_POSTGRES_DSN), which is required.

Every table lives in one schema (--schema, default postgres.schema: "eventpipe"), goose's
version table too; "up" creates the schema when it is missing. Several
instances may run "up" at once: they take turns on an advisory lock.`,
		Example: `  EVENTPIPE_POSTGRES_DSN=postgres://postgres@127.0.0.1:5432/app eventpipe migrate up
  eventpipe migrate status
  eventpipe migrate down            # roll back the newest migration
  eventpipe migrate down --to 0     # roll back every migration`,
		// Runs only when no subcommand matched: that is a usage error.
		Args: cobra.ArbitraryArgs,
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Errorf("migrate: unknown subcommand %q; want up, down or status", args[0])}
			}
			return usageError{errors.New("migrate: a subcommand is required: up, down or status")}
		},
	}
	cmd.PersistentFlags().StringVar(&schema, "schema", "", "schema holding eventpipe's tables (default: postgres.schema, eventpipe)")

	up := &cobra.Command{
		Use:   "up",
		Short: "Apply every pending migration",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.withDB(cmd.Context(), &schema, func(ctx context.Context, pool *pgxpool.Pool) error {
				res, err := migrations.Up(ctx, pool, schema)
				printResults(cmd.OutOrStdout(), res)
				if err != nil {
					return err
				}
				return e.printVersion(ctx, cmd.OutOrStdout(), pool, schema, len(res))
			})
		},
	}
	var to int64
	down := &cobra.Command{
		Use:   "down [--to VERSION]",
		Short: "Roll back the newest migration, or every one newer than --to",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to < -1 {
				return usageError{fmt.Errorf("--to %d: want a version, 0 for all", to)}
			}
			return e.withDB(cmd.Context(), &schema, func(ctx context.Context, pool *pgxpool.Pool) error {
				var res []migrations.Result
				var err error
				if to >= 0 {
					res, err = migrations.DownTo(ctx, pool, schema, to)
				} else {
					res, err = migrations.Down(ctx, pool, schema)
				}
				printResults(cmd.OutOrStdout(), res)
				if err != nil {
					return err
				}
				return e.printVersion(ctx, cmd.OutOrStdout(), pool, schema, len(res))
			})
		},
	}
	down.Flags().Int64Var(&to, "to", -1, "roll back every migration newer than this version (0 = all)")
	status := &cobra.Command{
		Use:   "status",
		Short: "List every migration and whether it is applied",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.withDB(cmd.Context(), &schema, func(ctx context.Context, pool *pgxpool.Pool) error {
				st, err := migrations.StatusOf(ctx, pool, schema)
				if err != nil {
					return err
				}
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
				_, _ = fmt.Fprintln(w, "VERSION\tSTATE\tAPPLIED AT\tNAME")
				for _, s := range st {
					state, at := "pending", "-"
					if s.Applied {
						state, at = "applied", s.AppliedAt.UTC().Format(time.RFC3339)
					}
					_, _ = fmt.Fprintf(w, "%d\t%s\t%s\t%s\n", s.Version, state, at, s.Name)
				}
				return w.Flush()
			})
		},
	}
	cmd.AddCommand(up, down, status)
	return cmd
}

// withDB loads the configuration, checks the schema name and connects to
// postgres.dsn; a missing DSN or a bad schema is a usage error (exit 2), an
// unreachable database a failure (exit 1).
func (e *env) withDB(ctx context.Context, schema *string, f func(ctx context.Context, pool *pgxpool.Pool) error) error {
	cfg, err := e.load()
	if err != nil {
		return err
	}
	if *schema == "" {
		*schema = cfg.Postgres.Schema
	}
	if err := migrations.ValidateSchema(*schema); err != nil {
		return usageError{fmt.Errorf("--schema: %w", err)}
	}
	if cfg.Postgres.DSN == "" {
		return usageError{errors.New("postgres.dsn is required (EVENTPIPE_POSTGRES_DSN)")}
	}
	pool, err := pgxpool.New(ctx, cfg.Postgres.DSN)
	if err != nil {
		return usageError{fmt.Errorf("postgres.dsn: %w", err)}
	}
	defer pool.Close()
	pctx, cancel := context.WithTimeout(ctx, dbConnectTimeout)
	err = pool.Ping(pctx)
	cancel()
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	return f(ctx, pool)
}

func printResults(w io.Writer, res []migrations.Result) {
	for _, r := range res {
		_, _ = fmt.Fprintln(w, r.String())
	}
}

// printVersion ends up/down with the schema's state, so that "nothing to do"
// is an explicit line rather than silence.
func (e *env) printVersion(ctx context.Context, w io.Writer, pool *pgxpool.Pool, schema string, changed int) error {
	st, err := migrations.StatusOf(ctx, pool, schema)
	if err != nil {
		return err
	}
	var version int64
	pending := 0
	for _, s := range st {
		if s.Applied {
			version = max(version, s.Version)
		} else {
			pending++
		}
	}
	verb := "now"
	if changed == 0 {
		verb = "already"
	}
	_, err = fmt.Fprintf(w, "schema %s %s at version %d (%d pending)\n", schema, verb, version, pending)
	return err
}
