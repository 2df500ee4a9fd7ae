package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/eventpipe/eventpipe/app/auth"
)

func (e *env) adminCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Tools for the admin endpoints (admin JWTs)",
		// Runs only when no subcommand matched: that is a usage error.
		Args: cobra.ArbitraryArgs,
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Errorf("admin: unknown subcommand %q; want token", args[0])}
			}
			return usageError{errors.New("admin: a subcommand is required: token")}
		},
	}
	var (
		sub   string
		roles []string
		ttl   time.Duration
	)
	token := &cobra.Command{
		Use:   "token --sub ID [--role ROLE]... [--ttl 15m]",
		Short: "Mint an HS256 JWT for the admin endpoints (local use and tests)",
		Long: `token prints a JWT for the token-protected admin endpoints (the join-link admin
API), signed HS256 with the secret in the environment variable named by
admin.token_secret_env (default EVENTPIPE_ADMIN_TOKEN_SECRET, at least 32
bytes), the same secret serve verifies with. The token's sub is --sub (the
acting user: a positive integer for the join-link API, whose updated_by it
becomes), its roles claim the --role values ("admin" for the admin endpoints),
its iss and aud admin.token_issuer and admin.token_audience when they are set,
and it expires --ttl from now.

Where serve verifies tokens from an identity provider's key set
(admin.token_jwks_url), tokens come from that provider; this command refuses.`,
		Example: `  export EVENTPIPE_ADMIN_TOKEN_SECRET=$(openssl rand -hex 32)   # serve needs the same
  eventpipe admin token --sub 42 --role admin --ttl 15m
  curl -X PATCH localhost:9090/program-session/1/link-generation \
    -H "Authorization: Bearer $(eventpipe admin token --sub 42 --role admin)" \
    -d '{"linkGenerationAt":"2030-01-01T09:00:00Z"}'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if sub == "" {
				return usageError{errors.New("admin token: --sub is required (the acting user's id)")}
			}
			if ttl <= 0 {
				return usageError{fmt.Errorf("admin token: --ttl must be more than 0s, got %s", ttl)}
			}
			cfg, err := e.load()
			if err != nil {
				return err
			}
			a := cfg.Admin
			if a.TokenJWKSURL != "" {
				return usageError{errors.New("admin token: admin.token_jwks_url is set, so serve verifies RS256/ES256 tokens from that key set, not HS256 ones: get a token from the identity provider")}
			}
			if a.TokenSecretEnv == "" {
				return usageError{errors.New("admin token: admin.token_secret_env names no variable to take the secret from")}
			}
			secret := lookup(e.environ, a.TokenSecretEnv)
			if len(secret) < auth.MinSecretLen {
				return usageError{fmt.Errorf("admin token: $%s must hold the HS256 secret serve verifies with, at least %d bytes (e.g. openssl rand -hex 32)", a.TokenSecretEnv, auth.MinSecretLen)}
			}
			tok, err := auth.MintHS256([]byte(secret), auth.Claims{
				Subject:  sub,
				Roles:    roles,
				Issuer:   a.TokenIssuer,
				Audience: a.TokenAudience,
				IssuedAt: time.Now(),
				TTL:      ttl,
			})
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), tok)
			return err
		},
	}
	token.Flags().StringVar(&sub, "sub", "", "the token's subject: the acting user's id (required)")
	token.Flags().StringSliceVar(&roles, "role", nil, `a role in the token's roles claim (repeatable; "admin" for the admin endpoints)`)
	token.Flags().DurationVar(&ttl, "ttl", 15*time.Minute, "how long the token is valid")
	cmd.AddCommand(token)
	return cmd
}
