package interviews

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/eventpipe/eventpipe/app/dbtx"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/app/spec"
)

// commands are `eventpipe interviews report retry`.
func commands(env spec.CommandEnv) []*cobra.Command {
	root := &cobra.Command{Use: "interviews", Short: "Operator actions of the interviews spec"}
	report := &cobra.Command{Use: "report", Short: "Interview reports"}
	var interviewID string
	retry := &cobra.Command{
		Use:   "retry --interview ID",
		Short: "Generate a FAILED report again: reset its attempts and re-publish report.generate",
		Long: `retry takes a report that ended FAILED (its generation failed at every attempt, or
its request reached report-generate-dlq) and asks for it again, as the spec's
"production retries should re-publish" says: in one transaction the report goes
back to NOT_STARTED with its attempt count and last error cleared, and a new
report.generate request is written to the outbox, which the running relay
(serve's, or eventpipe relay) publishes. Any other status is refused, exit 1.
It needs postgres.dsn: the embedded mode keeps nothing to retry.`,
		Example: `  eventpipe interviews report retry --interview 64f1c2a9e4b0a1b2c3d4e5f6`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !IsObjectID(interviewID) {
				return spec.UsageError{Err: fmt.Errorf("--interview %q: want the interview's ObjectId (24 hex digits)", interviewID)}
			}
			return env.WithDB(cmd.Context(), func(ctx context.Context, pool *pgxpool.Pool, schema string) error {
				store, err := NewPostgres(pool, schema)
				if err != nil {
					return err
				}
				var was Report
				err = dbtx.InTx(ctx, pool, func(ctx context.Context, _ pgx.Tx) error {
					was, err = RetryReport(ctx, store, outbox.TxWriter{Table: outbox.Table{Schema: schema}}, ReportGenerateQueue, interviewID)
					return err
				})
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "report of interview %s re-queued (was FAILED after %d attempt(s): %s)\n",
					interviewID, was.AttemptCount, was.LastError)
				return err
			})
		},
	}
	retry.Flags().StringVar(&interviewID, "interview", "", "the interview whose report to retry (required)")
	report.AddCommand(retry)
	root.AddCommand(report)
	return []*cobra.Command{root}
}
