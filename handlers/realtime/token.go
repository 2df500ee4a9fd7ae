package realtime

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Claims are what a bearer token lets its holder listen to: the user's own
// channel, and the sessions and documents listed. The Core server, which
// knows who owns what, mints them; this package only checks them.
type Claims struct {
	// UserID is the subject: the only user channel the holder may open.
	UserID int64 `json:"sub"`
	// Sessions and Documents are the session and document channels the
	// holder may open.
	Sessions  []int64 `json:"sessions,omitempty"`
	Documents []int64 `json:"documents,omitempty"`
	// Expires is when the token stops working (Unix seconds). Required.
	Expires int64 `json:"exp"`
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

// HMACVerifier checks tokens minted by MintToken with the same secret. The
// token is two base64url (unpadded) parts joined by a dot:
//
//	base64url(JSON claims) "." base64url(HMAC-SHA256(secret, first part))
//
// There is no header and no algorithm choice (nothing to downgrade); a token
// is rejected if the MAC differs, the claims do not decode, the subject is
// not positive, or it has expired. Tokens cannot be revoked: keep them short
// lived (minutes) and mint a new one when the page reconnects.
type HMACVerifier struct {
	// Secret is the shared key, at least 32 bytes.
	Secret []byte
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Leeway tolerates clock skew on the expiry. Default 0.
	Leeway time.Duration
}

// b64 is unpadded base64url that refuses non-zero padding bits, so that one
// token has one spelling.
var b64 = base64.RawURLEncoding.Strict()

// MinSecretLen is the shortest secret HMACVerifier and MintToken accept.
const MinSecretLen = 32

// Verify implements Verifier.
func (v HMACVerifier) Verify(token string) (Claims, error) {
	if len(v.Secret) < MinSecretLen {
		return Claims{}, fmt.Errorf("%w: verifier has no usable secret", ErrInvalidToken)
	}
	body, sig, ok := strings.Cut(token, ".")
	if !ok || body == "" || sig == "" {
		return Claims{}, fmt.Errorf("%w: want <claims>.<signature>", ErrInvalidToken)
	}
	got, err := b64.DecodeString(sig)
	if err != nil || !hmac.Equal(got, sign(v.Secret, body)) {
		return Claims{}, fmt.Errorf("%w: bad signature", ErrInvalidToken)
	}
	raw, err := b64.DecodeString(body)
	if err != nil {
		return Claims{}, fmt.Errorf("%w: claims: %w", ErrInvalidToken, err)
	}
	var c Claims
	if err := json.Unmarshal(raw, &c); err != nil {
		return Claims{}, fmt.Errorf("%w: claims: %w", ErrInvalidToken, err)
	}
	if c.UserID <= 0 {
		return Claims{}, fmt.Errorf("%w: no subject", ErrInvalidToken)
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	if c.Expires == 0 || now().Add(-v.Leeway).Unix() >= c.Expires {
		return Claims{}, fmt.Errorf("%w: expired", ErrInvalidToken)
	}
	return c, nil
}

// MintToken signs c with secret, for HMACVerifier: the Core server's side of
// the contract, and the helper tests and the demo use.
func MintToken(secret []byte, c Claims) (string, error) {
	if len(secret) < MinSecretLen {
		return "", fmt.Errorf("mint token: secret shorter than %d bytes", MinSecretLen)
	}
	if c.UserID <= 0 || c.Expires == 0 {
		return "", errors.New("mint token: subject and expiry are required")
	}
	raw, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("mint token: %w", err)
	}
	body := b64.EncodeToString(raw)
	return body + "." + b64.EncodeToString(sign(secret, body)), nil
}

func sign(secret []byte, body string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(body))
	return m.Sum(nil)
}
