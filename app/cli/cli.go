// Package cli is eventpipe's command line: serve, publish, topology (plan,
// apply, export), migrate (up, down, status), relay, outbox (requeue), dlq
// (peek, redrive), admin (token), version, and the specs' own commands
// (realtime token). Run is the whole program minus the process:
// arguments, output streams and environment are injected, so tests drive it
// in-process.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/app/spec"
	"github.com/eventpipe/eventpipe/config"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitFailure = 1
	// ExitUsage is returned for a bad command line or an invalid configuration.
	ExitUsage = 2
)

// usageError marks errors that exit with ExitUsage.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// env is what every command gets from Run.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	environ        []string
	configPath     string
}

// Run executes the command line args (without the program name) and returns
// the process exit code. ctx ends on SIGINT/SIGTERM.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, environ []string) int {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr, environ: environ}
	root := &cobra.Command{
		Use:   "eventpipe",
		Short: "Run asynchronous-messaging specs on memory, RabbitMQ, SQS or PostgreSQL",
		Long: `eventpipe runs asynchronous-messaging specs on whichever broker its configuration
names: the in-process memory broker (the default), RabbitMQ, Amazon SQS or PostgreSQL.
Handlers never know which broker carries their messages.

Configuration comes from a YAML file (--config, or EVENTPIPE_CONFIG) and from
EVENTPIPE_* environment variables; switch brokers with EVENTPIPE_BROKER.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVarP(&e.configPath, "config", "c", lookup(environ, "EVENTPIPE_CONFIG"),
		"YAML configuration file (env EVENTPIPE_CONFIG); defaults and EVENTPIPE_* variables apply without one")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(e.serveCmd(), e.publishCmd(), e.topologyCmd(), versionCmd())
	root.AddCommand(e.migrateCmd())
	root.AddCommand(e.relayCmd())
	root.AddCommand(e.outboxCmd())
	root.AddCommand(e.dlqCmd())
	root.AddCommand(e.drainCheckCmd())
	root.AddCommand(e.catalogCmd())
	root.AddCommand(e.adminCmd())
	root.AddCommand(e.healthcheckCmd())
	// The specs' own commands (eventpipe realtime token, …).
	root.AddCommand(app.Commands(spec.CommandEnv{
		Load:   e.load,
		Getenv: func(name string) string { return lookup(environ, name) },
		WithDB: func(ctx context.Context, f func(ctx context.Context, pool *pgxpool.Pool, schema string) error) error {
			var schema string
			return e.withDB(ctx, &schema, func(ctx context.Context, pool *pgxpool.Pool) error { return f(ctx, pool, schema) })
		},
	})...)
	deprecationsToStderr(root, stderr)

	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	if errors.Is(err, errDrift) || errors.Is(err, errNotDrained) {
		return ExitFailure
	}
	_, _ = fmt.Fprintln(stderr, "eventpipe:", err)
	var (
		ue  usageError
		sue spec.UsageError
		be  *spec.BuildError
		ve  *config.ValidationError
	)
	// cobra reports an unknown subcommand with an untyped error.
	if errors.As(err, &ue) || errors.As(err, &sue) || errors.As(err, &be) || errors.As(err, &ve) ||
		strings.HasPrefix(err.Error(), "unknown command") {
		return ExitUsage
	}
	return ExitFailure
}

// deprecationsToStderr moves every deprecated flag's notice under root to
// stderr. cobra prints it with Command.Print, on OutOrStderr — stdout once
// Out is set — in front of a command's output, which breaks every consumer
// of JSON lines (dlq peek, topology list). Each such flag is hidden instead,
// and a command given one says so on stderr before it runs.
func deprecationsToStderr(root *cobra.Command, stderr io.Writer) {
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		var notices []*pflag.Flag
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Deprecated != "" {
				notices = append(notices, f)
			}
		})
		if len(notices) == 0 || (c.RunE == nil && c.Run == nil) {
			return
		}
		messages := map[string]string{}
		for _, f := range notices {
			messages[f.Name], f.Deprecated, f.Hidden = f.Deprecated, "", true
		}
		run, runE := c.Run, c.RunE
		c.Run = nil
		c.RunE = func(cmd *cobra.Command, args []string) error {
			for _, f := range notices {
				if f.Changed {
					_, _ = fmt.Fprintf(stderr, "eventpipe: warning: flag --%s has been deprecated, %s\n", f.Name, messages[f.Name])
				}
			}
			if runE != nil {
				return runE(cmd, args)
			}
			run(cmd, args)
			return nil
		}
	}
	walk(root)
}

// load reads the configuration; any problem is a usage error (exit 2). An
// EVENTPIPE_* variable nothing reads is a warning on standard error, with
// the variable it most likely means.
func (e *env) load() (config.Config, error) {
	cfg, err := config.Load(e.configPath, e.environ)
	if err != nil {
		return config.Config{}, usageError{err}
	}
	for _, u := range config.UnknownEnvVars(cfg, e.environ) {
		_, _ = fmt.Fprintf(e.stderr, "eventpipe: warning: %s\n", u)
	}
	return cfg, nil
}

// logger builds the structured logger the configuration asks for.
func (e *env) logger(cfg config.Config) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Log.Level))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(e.stderr, opts))
	}
	return slog.New(slog.NewTextHandler(e.stderr, opts))
}

func lookup(environ []string, key string) string {
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// noArgs refuses positional arguments as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("%s takes no arguments, got %q", cmd.CommandPath(), args)}
	}
	return nil
}
