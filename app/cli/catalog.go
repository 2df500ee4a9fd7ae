package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"

	"github.com/eventpipe/eventpipe/app/schemas"
)

func (e *env) catalogCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "catalog",
		Short: "The specs' message catalogs: one JSON Schema per message type",
		Args:  noArgs,
	}
	cmd.AddCommand(e.catalogSchemasCmd())
	return cmd
}

func (e *env) catalogSchemasCmd() *cobra.Command {
	var (
		out   string
		specs []string
	)
	cmd := &cobra.Command{
		Use:   "schemas --out DIR [--spec NAME]...",
		Short: "Write one JSON Schema per message type, DIR/<spec>/<message type>.json, for other teams",
		Long: `schemas writes the message catalogs' JSON Schemas (draft-07), one file per message type:
the StackUp envelope and payloads, the interviews bodies, the disputes envelope and events and
the S3 event notification, the booking-session event, the join-link event. Each file stands
alone (the shared envelope is inlined) and is the contract as our publishers keep it: unknown
fields are refused. A consumer that follows the specs' rule (ignore unknown fields) drops every
"additionalProperties": false. Rules a schema cannot state (cross-field checks, derived ids, the
StackUp secrets rule) are named in each schema's description and docs/decisions/0030.
Existing files are overwritten; nothing else in DIR is touched.`,
		Example: `  eventpipe catalog schemas --out build/schemas
  eventpipe catalog schemas --out build/schemas --spec stackup`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return usageError{errors.New("--out DIR is required")}
			}
			cat, err := schemas.Load()
			if err != nil {
				return err
			}
			var known []string
			for _, s := range cat.Specs() {
				known = append(known, s.Name)
			}
			for _, s := range specs {
				if !slices.Contains(known, s) {
					return usageError{fmt.Errorf("--spec %q: want one of %v", s, known)}
				}
			}
			n := 0
			for _, m := range cat.Messages() {
				if len(specs) > 0 && !slices.Contains(specs, m.Spec) {
					continue
				}
				data, err := m.JSON()
				if err != nil {
					return err
				}
				dir := filepath.Join(out, m.Spec)
				if err := os.MkdirAll(dir, 0o755); err != nil {
					return fmt.Errorf("catalog schemas: %w", err)
				}
				path := filepath.Join(dir, m.Name+".json")
				if err := os.WriteFile(path, data, 0o644); err != nil {
					return fmt.Errorf("catalog schemas: %w", err)
				}
				if _, err := fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\n", path, m.Title()); err != nil {
					return err
				}
				n++
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "wrote %d schemas to %s\n", n, out)
			return err
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "directory to write the schemas into (required; created if missing)")
	cmd.Flags().StringArrayVar(&specs, "spec", nil, "only this spec's schemas (repeatable): booking, disputes, interviews, joinlink, stackup")
	return cmd
}
