package internalapi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/eventpipe/eventpipe/app/spec"
)

// Servers returns the internal API's server, built from d's configuration
// and environment with the Postgres store when d has a database, else the
// memory store; none when it is off (stackup.internal_addr empty or the
// variable stackup.internal_api_key_env names unset). A key that is too
// short or a malformed token key is an error: serve refuses to start.
func Servers(d spec.Deps) ([]spec.Server, error) {
	c := d.Config.StackUp
	logger := d.Logger
	if logger == nil {
		logger = slog.Default()
	}
	if c.InternalAddr == "" || d.Getenv == nil {
		return nil, nil
	}
	key := d.Getenv(c.InternalAPIKeyEnv)
	if key == "" {
		logger.Info("stackup internal API off: its key variable is unset", slog.String("variable", c.InternalAPIKeyEnv))
		return nil, nil
	}
	sealer, err := sealerFrom(d.Getenv, c.TokenKeyEnv)
	if err != nil {
		return nil, err
	}
	if sealer == nil {
		logger.Warn("stackup internal API: GitHub token endpoints off (503): the token key variable is unset",
			slog.String("variable", c.TokenKeyEnv))
	}
	store, err := storeFor(d.DB, d.Config.Postgres.Schema)
	if err != nil {
		return nil, err
	}
	api, err := New(Config{Store: store, Sealer: sealer, Dimension: c.EmbeddingDimension, Now: d.Now})
	if err != nil {
		return nil, err
	}
	h, err := Handler(api, key, logger)
	if err != nil {
		return nil, fmt.Errorf("%w ($%s)", err, c.InternalAPIKeyEnv)
	}
	return []spec.Server{{Name: "stackup internal API", Addr: c.InternalAddr, Handler: h}}, nil
}

func storeFor(db *pgxpool.Pool, schema string) (Store, error) {
	if db == nil {
		return NewMemory(), nil
	}
	return NewPostgres(db, schema)
}

// sealerFrom returns the Sealer of the key in the variable named env, nil
// when it is unset.
func sealerFrom(getenv func(string) string, env string) (*Sealer, error) {
	v := getenv(env)
	if v == "" {
		return nil, nil
	}
	key, err := ParseKey(v)
	if err != nil {
		return nil, fmt.Errorf("stackup internal API: $%s: %w", env, err)
	}
	return NewSealer(key)
}

// Commands are the internal API's commands: `eventpipe stackup github-token
// set`.
func Commands(env spec.CommandEnv) []*cobra.Command {
	var (
		user      int64
		fromStdin bool
		expiresIn time.Duration
	)
	set := &cobra.Command{
		Use:   "set",
		Short: "Store a user's GitHub token, encrypted, for the AI server to borrow (what Core's OAuth flow does)",
		Long: `set reads the user's GitHub token from the first line of standard input (never
from the command line, which shell history and ps would keep), encrypts it with
AES-256-GCM under the key in the variable stackup.token_key_env names, and
stores it in postgres.dsn until --expires-in from now, replacing any other.
GET /api/internal/users/{userId}/github-token then lends it until it expires.`,
		Example: `  export EVENTPIPE_STACKUP_TOKEN_KEY=$(openssl rand -base64 32)   # the same as serve's
  printf '%s\n' "$GITHUB_TOKEN" | eventpipe stackup github-token set --user 123 --token-stdin --expires-in 1h`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if user <= 0 {
				return spec.UsageError{Err: errors.New("--user is required (a positive number)")}
			}
			if !fromStdin {
				return spec.UsageError{Err: errors.New("--token-stdin is required: the token is read from standard input")}
			}
			if expiresIn <= 0 {
				return spec.UsageError{Err: errors.New("--expires-in must be more than 0s")}
			}
			cfg, err := env.Load()
			if err != nil {
				return err
			}
			sealer, err := sealerFrom(env.Getenv, cfg.StackUp.TokenKeyEnv)
			if err != nil {
				return spec.UsageError{Err: err}
			}
			if sealer == nil {
				return spec.UsageError{Err: fmt.Errorf("$%s must hold the token key (base64 of %d bytes)", cfg.StackUp.TokenKeyEnv, KeyLen)}
			}
			token, err := readToken(cmd)
			if err != nil {
				return err
			}
			return env.WithDB(cmd.Context(), func(ctx context.Context, pool *pgxpool.Pool, schema string) error {
				store, err := NewPostgres(pool, schema)
				if err != nil {
					return err
				}
				api, err := New(Config{Store: store, Sealer: sealer, Dimension: cfg.StackUp.EmbeddingDimension})
				if err != nil {
					return err
				}
				expires := time.Now().Add(expiresIn).UTC().Truncate(time.Second)
				if err := api.SetGitHubToken(ctx, user, token, expires); err != nil {
					var in *InputError
					if errors.As(err, &in) {
						return spec.UsageError{Err: err}
					}
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "stored the GitHub token of user %d until %s\n", user, expires.Format(time.RFC3339))
				return err
			})
		},
	}
	set.Flags().Int64Var(&user, "user", 0, "user id (required)")
	set.Flags().BoolVar(&fromStdin, "token-stdin", false, "read the token from the first line of standard input (required)")
	set.Flags().DurationVar(&expiresIn, "expires-in", time.Hour, "how long the AI server may borrow the token")
	token := &cobra.Command{Use: "github-token", Short: "Users' GitHub tokens, lent to the AI server by the internal API"}
	token.AddCommand(set)
	root := &cobra.Command{Use: "stackup", Short: "Tools for StackUp Core's internal API (spec section 10)"}
	root.AddCommand(token)
	return []*cobra.Command{root}
}

func readToken(cmd *cobra.Command) (string, error) {
	line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
	if err != nil && line == "" {
		return "", spec.UsageError{Err: errors.New("no token on standard input")}
	}
	token := strings.TrimSpace(line)
	if token == "" {
		return "", spec.UsageError{Err: errors.New("no token on standard input")}
	}
	return token, nil
}
