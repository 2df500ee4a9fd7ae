package realtime

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/eventpipe/eventpipe/app/auth"
)

// Claims are what a bearer token lets its holder listen to: the user's own
// channel, and the sessions and documents listed. The Core server, which
// knows who owns what, mints them; this package only checks them.
type Claims struct {
	// UserID is the subject ("sub", a decimal string in the JWT): the only
	// user channel the holder may open.
	UserID int64
	// Sessions and Documents ("sessions", "documents": arrays of numbers)
	// are the session and document channels the holder may open.
	Sessions  []int64
	Documents []int64
	// Expires is when the token stops working ("exp", Unix seconds).
	// Required.
	Expires int64
}

// Allows reports whether the claims cover channel c.
func (c Claims) Allows(ch Channel) bool {
	switch ch.Kind {
	case User:
		return ch.ID == c.UserID
	case Session:
		return slices.Contains(c.Sessions, ch.ID)
	case Document:
		return slices.Contains(c.Documents, ch.ID)
	}
	return false
}

// Verifier checks a bearer token and returns its claims. An error means 401.
type Verifier interface {
	Verify(token string) (Claims, error)
}

// ErrInvalidToken is wrapped by every error of HMACVerifier.Verify.
var ErrInvalidToken = errors.New("invalid token")

// HMACVerifier checks the realtime tokens: JSON Web Tokens (RFC 7519) signed
// with HS256 (RFC 7518 §3.2) and the shared secret, as MintToken or any
// standard JWT library (a Spring or Node Core) makes them. The payload is
//
//	{"sub": "<userId>", "sessions": [<id>, …], "documents": [<id>, …], "exp": <unix seconds>}
//
// The algorithm is pinned to HS256 ("none" and every other one are refused),
// "exp" is required, "nbf" and "iat" are checked when present, "sub" must be
// a positive integer and "sessions"/"documents" arrays of integers; anything
// else is refused. The checks are app/auth's, the admin tokens' verifier
// (decision 0026). Tokens cannot be revoked: keep them short lived (minutes)
// and mint a new one when the page reconnects.
type HMACVerifier struct {
	// Secret is the shared key, at least 32 bytes.
	Secret []byte
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Leeway tolerates clock skew on "exp", "nbf" and "iat". Default 0.
	Leeway time.Duration
}

// MinSecretLen is the shortest secret HMACVerifier and MintToken accept.
const MinSecretLen = auth.MinSecretLen

// ownClaims are the realtime token's claims beyond the registered ones.
type ownClaims struct {
	Sessions  []int64 `json:"sessions,omitempty"`
	Documents []int64 `json:"documents,omitempty"`
}

// tokenClaims are what MintToken signs.
type tokenClaims struct {
	jwt.RegisteredClaims
	ownClaims
}

// Verify implements Verifier.
func (v HMACVerifier) Verify(token string) (Claims, error) {
	if len(v.Secret) < MinSecretLen {
		return Claims{}, fmt.Errorf("%w: verifier has no usable secret", ErrInvalidToken)
	}
	av, err := auth.New(auth.Config{Secret: v.Secret, Leeway: v.Leeway, Now: v.Now})
	if err != nil {
		return Claims{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	var own ownClaims
	p, err := av.VerifyWith(token, &own)
	if err != nil {
		return Claims{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	user, err := p.UserID()
	if err != nil {
		return Claims{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	return Claims{UserID: user, Sessions: own.Sessions, Documents: own.Documents, Expires: p.ExpiresAt.Unix()}, nil
}

// MintToken signs c with secret as an HS256 JWT, for HMACVerifier: the Core
// server's side of the contract (a Spring or Node Core does the same with
// its JWT library), and what `eventpipe realtime token`, tests and the demo
// use.
func MintToken(secret []byte, c Claims) (string, error) {
	if c.UserID <= 0 || c.Expires == 0 {
		return "", errors.New("mint token: subject and expiry are required")
	}
	return auth.SignHS256(secret, tokenClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   strconv.FormatInt(c.UserID, 10),
			ExpiresAt: jwt.NewNumericDate(time.Unix(c.Expires, 0)),
		},
		ownClaims: ownClaims{Sessions: c.Sessions, Documents: c.Documents},
	})
}
