package app

import (
	"fmt"
	"log/slog"

	"github.com/eventpipe/eventpipe/app/auth"
	"github.com/eventpipe/eventpipe/config"
)

// newVerifier is the verifier of the admin endpoints' JWTs the admin section
// configures (decision 0017): HS256 with the secret in the variable
// admin.token_secret_env names, or RS256/ES256 with the key set at
// admin.token_jwks_url. Neither is nil, nil: the token-protected endpoints
// stay off. Both, or a secret shorter than auth.MinSecretLen, is a
// *config.ValidationError: a leftover development secret must not open a
// second way in next to the identity provider's keys.
func newVerifier(cfg config.Config, getenv func(string) string, logger *slog.Logger) (*auth.Verifier, error) {
	a := cfg.Admin
	var secret string
	if a.TokenSecretEnv != "" {
		secret = getenv(a.TokenSecretEnv)
	}
	invalid := func(path, source, format string, args ...any) error {
		return &config.ValidationError{Problems: []config.Problem{{Path: path, Message: fmt.Sprintf(format, args...), Source: source}}}
	}
	switch {
	case secret == "" && a.TokenJWKSURL == "":
		return nil, nil
	case secret != "" && a.TokenJWKSURL != "":
		return nil, invalid("admin.token_jwks_url", "",
			"set together with an HS256 secret in $%s (admin.token_secret_env): admin tokens are verified one way, unset one of them", a.TokenSecretEnv)
	case secret != "" && len(secret) < auth.MinSecretLen:
		return nil, invalid("admin.token_secret_env", a.TokenSecretEnv,
			"$%s holds %d bytes; an HS256 secret needs at least %d (e.g. openssl rand -hex 32)", a.TokenSecretEnv, len(secret), auth.MinSecretLen)
	}
	c := auth.Config{
		JWKSURL:     a.TokenJWKSURL,
		JWKSRefresh: a.TokenJWKSRefresh,
		Issuer:      a.TokenIssuer,
		Audience:    a.TokenAudience,
		Leeway:      a.TokenLeeway,
		Logger:      logger,
	}
	how := []any{slog.String("jwks_url", a.TokenJWKSURL)}
	if secret != "" {
		c.Secret = []byte(secret)
		how = []any{slog.String("hs256_secret_env", a.TokenSecretEnv)}
	}
	v, err := auth.New(c)
	if err != nil {
		return nil, err
	}
	logger.Info("admin JWTs verified", append(how, slog.String("issuer", a.TokenIssuer), slog.String("audience", a.TokenAudience))...)
	return v, nil
}
