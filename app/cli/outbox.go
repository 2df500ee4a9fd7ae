package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/eventpipe/eventpipe/app/outbox"
)

func (e *env) outboxCmd() *cobra.Command {
	var schema string
	cmd := &cobra.Command{
		Use:   "outbox requeue",
		Short: "Bring parked transactional-outbox rows back to the relay",
		Long: `outbox works on the transactional outbox's table, <schema>.outbox. It connects
with postgres.dsn (EVENTPIPE_POSTGRES_DSN), which is required.

The relay retries a row for as long as the broker is unavailable; it parks a
row only when the broker refuses the message itself (a payload over the limit,
a routing key no queue is bound for). A parked row is logged at ERROR, counted
by eventpipe_outbox_parked and, under strict order, holds back the later rows
of its ordering key (eventpipe_outbox_held) until it is requeued.`,
		// Runs only when no subcommand matched: that is a usage error.
		Args: cobra.ArbitraryArgs,
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Errorf("outbox: unknown subcommand %q; want requeue", args[0])}
			}
			return usageError{errors.New("outbox: a subcommand is required: requeue")}
		},
	}
	cmd.PersistentFlags().StringVar(&schema, "schema", "", "schema holding the outbox table (default: postgres.schema, eventpipe)")

	var filter outbox.RequeueFilter
	requeue := &cobra.Command{
		Use:   "requeue (--all | --id ID...) [--topic T]",
		Short: "Un-park outbox rows so that the relay publishes them again",
		Long: `requeue un-parks the parked rows it selects — every one (--all) or those with
the given event ids (--id, repeatable: the message_id of the relay's "outbox
message parked" line), of one topic only with --topic — and prints how many.
Each is due at once with its attempts reset; the running relays are woken.
Requeue after the cause of the refusal was dealt with: a row the broker still
refuses is parked again at its next try.`,
		Example: `  eventpipe outbox requeue --id evt_01JD3K5Z8Q3W6X2N4P7R9T1V0B
  eventpipe outbox requeue --all --topic domain-events`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if filter.All == (len(filter.EventIDs) > 0) {
				return usageError{errors.New("outbox requeue: give --all or at least one --id (not both)")}
			}
			return e.withDB(cmd.Context(), &schema, func(ctx context.Context, pool *pgxpool.Pool) error {
				n, err := outbox.Table{Schema: schema}.Requeue(ctx, pool, filter)
				if n > 0 || err == nil {
					if _, werr := fmt.Fprintf(cmd.OutOrStdout(), "requeued %d parked outbox row(s) in %s.outbox\n", n, schema); werr != nil {
						return werr
					}
				}
				return err
			})
		},
	}
	requeue.Flags().BoolVar(&filter.All, "all", false, "requeue every parked row (of --topic, when given)")
	requeue.Flags().StringArrayVar(&filter.EventIDs, "id", nil, "event id of a parked row to requeue (repeatable)")
	requeue.Flags().StringVar(&filter.Topic, "topic", "", "requeue only the rows of this topic")
	cmd.AddCommand(requeue)
	return cmd
}
