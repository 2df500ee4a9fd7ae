package cli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/eventpipe/eventpipe/handlers/realtime"
)

func (e *env) realtimeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "realtime",
		Short: "Tools for the StackUp RealTime SSE server",
	}
	var (
		user      int64
		sessions  []int64
		documents []int64
		ttl       time.Duration
	)
	token := &cobra.Command{
		Use:   "token",
		Short: "Mint a bearer token for the SSE streams (what Core does for a signed-in user)",
		Long: `token prints a bearer token for the realtime SSE streams, signed with the secret in
the environment variable named by realtime.token_secret_env: the user's own
channel, plus the sessions and documents listed, until --ttl from now.`,
		Example: `  eventpipe realtime token --user 1 --session 7 --ttl 15m
  curl -N -H "Authorization: Bearer $(eventpipe realtime token --user 1 --session 7)" \
    http://127.0.0.1:8080/realtime/sessions/7`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if user <= 0 {
				return usageError{errors.New("--user is required")}
			}
			if ttl <= 0 {
				return usageError{errors.New("--ttl must be more than 0s")}
			}
			cfg, err := e.load()
			if err != nil {
				return err
			}
			secret := lookupEnv(e.environ, cfg.Realtime.TokenSecretEnv)
			if len(secret) < realtime.MinSecretLen {
				return usageError{fmt.Errorf("$%s must hold a token secret of at least %d bytes", cfg.Realtime.TokenSecretEnv, realtime.MinSecretLen)}
			}
			tok, err := realtime.MintToken([]byte(secret), realtime.Claims{
				UserID:    user,
				Sessions:  sessions,
				Documents: documents,
				Expires:   time.Now().Add(ttl).Unix(),
			})
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), tok)
			return err
		},
	}
	token.Flags().Int64Var(&user, "user", 0, "user id (the token's subject; required)")
	token.Flags().Int64SliceVar(&sessions, "session", nil, "a session id the user may watch (repeatable)")
	token.Flags().Int64SliceVar(&documents, "document", nil, "a document id the user may watch (repeatable)")
	token.Flags().DurationVar(&ttl, "ttl", 15*time.Minute, "how long the token is valid")
	cmd.AddCommand(token)
	return cmd
}

// lookupEnv reads name from environ (KEY=value lines; the process's
// environment in main).
func lookupEnv(environ []string, name string) string {
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}
