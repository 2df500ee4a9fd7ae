package auth

import (
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Claims are what MintHS256 signs.
type Claims struct {
	// Subject is "sub", the acting user. Required.
	Subject string
	// Roles is the "roles" claim (AdminRole for the admin endpoints).
	Roles []string
	// Issuer and Audience, when set, are "iss" and "aud": what a verifier
	// with Config.Issuer and Config.Audience requires.
	Issuer, Audience string
	// IssuedAt is "iat" and "nbf". Required.
	IssuedAt time.Time
	// TTL is how long after IssuedAt the token expires ("exp"). More than
	// 0.
	TTL time.Duration
}

// MintHS256 signs c with secret (at least MinSecretLen bytes) as an HS256
// JWT: what `eventpipe admin token`, tests and local scripts use, and what a
// Spring or Node service does with its standard JWT library.
func MintHS256(secret []byte, c Claims) (string, error) {
	switch {
	case len(secret) < MinSecretLen:
		return "", fmt.Errorf("mint token: the secret holds %d bytes, want at least %d", len(secret), MinSecretLen)
	case c.Subject == "":
		return "", errors.New("mint token: a subject is required")
	case c.IssuedAt.IsZero():
		return "", errors.New("mint token: an issue time is required")
	case c.TTL <= 0:
		return "", fmt.Errorf("mint token: the time to live must be more than 0s, got %s", c.TTL)
	}
	rc := jwt.RegisteredClaims{
		Subject:   c.Subject,
		Issuer:    c.Issuer,
		IssuedAt:  jwt.NewNumericDate(c.IssuedAt),
		NotBefore: jwt.NewNumericDate(c.IssuedAt),
		ExpiresAt: jwt.NewNumericDate(c.IssuedAt.Add(c.TTL)),
	}
	if c.Audience != "" {
		rc.Audience = jwt.ClaimStrings{c.Audience}
	}
	return SignHS256(secret, claims{RegisteredClaims: rc, Roles: c.Roles})
}

// SignHS256 signs c, any claims type (typically a struct embedding
// jwt.RegisteredClaims with claims of its own, such as realtime tokens'
// "sessions"), as an HS256 JWT with secret (at least MinSecretLen bytes): the
// one signing path of MintHS256 and the realtime tokens, which a Verifier
// with the same secret checks.
func SignHS256(secret []byte, c jwt.Claims) (string, error) {
	if len(secret) < MinSecretLen {
		return "", fmt.Errorf("mint token: the secret holds %d bytes, want at least %d", len(secret), MinSecretLen)
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
	if err != nil {
		return "", fmt.Errorf("mint token: %w", err)
	}
	return tok, nil
}
