// Package auth verifies the JSON Web Tokens that carry eventpipe's principals
// (decision 0017): who is calling an admin endpoint, the console or a spec's
// admin API, and with which roles. The principal is the token's "sub" (the
// acting user) and its "roles" claim (an array of strings); headers a client
// sets are never the principal.
//
// A Verifier takes one kind of key, chosen when it is built:
//
//   - an HS256 shared secret (Config.Secret), which MintHS256 also signs with
//     (`eventpipe admin token`, tests, a Spring or Node service's standard JWT
//     library), or
//   - a JSON Web Key Set URL (Config.JWKSURL) whose RSA and EC keys verify
//     RS256 and ES256 tokens from an identity provider; the set is fetched at
//     start, again every Config.JWKSRefresh, and at once (at most once a
//     minute) when a token names a key id the set does not hold, so a key
//     rotation needs no restart.
//
// The algorithm is pinned by that choice: HS256 for a secret, RS256 or ES256
// for a key set; "none" and every other algorithm are refused, so an RS256
// public key can never be used as an HMAC secret. Every token must carry
// "exp"; "exp", "nbf" and "iat" are checked with Config.Leeway of clock skew;
// "iss" and "aud" are checked when Config.Issuer and Config.Audience are set.
//
// The package is a leaf: it imports nothing else of eventpipe (the
// composition root translates the admin section of the configuration).
package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// AdminRole is the role admin endpoints require in a token's "roles".
const AdminRole = "admin"

// MinSecretLen is the shortest HS256 secret New and MintHS256 accept (the
// hash's 256 bits, RFC 7518 §3.2).
const MinSecretLen = 32

// MaxTokenLen bounds a token's length; a longer one is refused unparsed.
const MaxTokenLen = 8 << 10

// Defaults of Config's optional fields.
const (
	DefaultJWKSRefresh = time.Hour
	// unknownKIDEvery is how often at most a token with an unknown key id
	// makes the verifier fetch the key set again (a token flood with
	// random key ids must not become a flood of fetches).
	unknownKIDEvery = time.Minute
	// jwksTimeout bounds one fetch of the key set, and what a request
	// waits for a refresh its unknown key id asked for.
	jwksTimeout = 5 * time.Second
)

// Config configures a Verifier. Exactly one of Secret and JWKSURL is set.
type Config struct {
	// Secret is the HS256 shared secret, at least MinSecretLen bytes.
	Secret []byte
	// JWKSURL is the http(s) URL of the JSON Web Key Set verifying RS256
	// and ES256 tokens.
	JWKSURL string
	// JWKSRefresh is how often the key set is fetched again. Default
	// DefaultJWKSRefresh (1h).
	JWKSRefresh time.Duration
	// Issuer, when set, is the "iss" every token must carry.
	Issuer string
	// Audience, when set, must be one of every token's "aud".
	Audience string
	// Leeway is the clock skew tolerated on "exp", "nbf" and "iat". Default
	// 0.
	Leeway time.Duration
	// HTTPClient fetches the key set. Default: a client without a timeout
	// of its own (every fetch is bounded by 5 s).
	HTTPClient *http.Client
	// Logger logs failed key-set fetches. Default: discarded.
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Principal is a verified token's caller.
type Principal struct {
	// Subject is the token's "sub": the acting user's id.
	Subject string
	// Roles is the token's "roles" claim.
	Roles []string
	// ExpiresAt is the token's "exp".
	ExpiresAt time.Time
}

// HasRole reports whether role is one of p's roles.
func (p Principal) HasRole(role string) bool { return slices.Contains(p.Roles, role) }

// ErrSubjectNotUserID is returned by Principal.UserID for a subject that is
// not a positive integer.
var ErrSubjectNotUserID = errors.New("the token's sub is not a user id (a positive integer)")

// UserID is the subject as a numeric user id (a positive integer, such as a
// bigint updated_by column holds), or ErrSubjectNotUserID.
func (p Principal) UserID() (int64, error) {
	id, err := strconv.ParseInt(p.Subject, 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("%w: %q", ErrSubjectNotUserID, p.Subject)
	}
	return id, nil
}

// ErrNoToken is returned by Authenticate for a request without an
// "Authorization: Bearer <token>" header.
var ErrNoToken = errors.New("no bearer token")

// TokenError is a token that was presented and refused. Reason is safe to
// show the caller ("token is expired", "token has invalid issuer"); Err is
// the cause, for logs.
type TokenError struct {
	Reason string
	Err    error
}

func (e *TokenError) Error() string { return "invalid token: " + e.Reason }
func (e *TokenError) Unwrap() error { return e.Err }

// Verifier checks tokens and returns their principals. It is safe for
// concurrent use; Close stops its key-set refreshes.
type Verifier struct {
	parser *jwt.Parser
	key    jwt.Keyfunc
	close  context.CancelFunc
}

// claims is a token's payload as the verifier reads it.
type claims struct {
	jwt.RegisteredClaims
	// Roles must be an array of strings; anything else is a malformed
	// token.
	Roles []string `json:"roles,omitempty"`
}

// claimsWith is claims that keep the raw payload, which VerifyWith decodes
// into the caller's own claims once the signature has been checked.
type claimsWith struct {
	claims
	extra any
	raw   json.RawMessage
}

// UnmarshalJSON decodes the registered claims and "roles", and keeps b.
func (c *claimsWith) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &c.claims); err != nil {
		return err
	}
	if c.extra != nil {
		c.raw = slices.Clone(b)
	}
	return nil
}

// New builds a verifier from c. With a JWKSURL it fetches the key set once
// before it returns; a set that cannot be fetched yet is logged and fetched
// again with the next token or refresh (tokens are refused until then), so
// an identity provider's outage does not stop eventpipe from starting.
func New(c Config) (*Verifier, error) {
	var problems []error
	if (len(c.Secret) > 0) == (c.JWKSURL != "") {
		problems = append(problems, errors.New("set exactly one of an HS256 secret and a JWKS URL"))
	}
	if len(c.Secret) > 0 && len(c.Secret) < MinSecretLen {
		problems = append(problems, fmt.Errorf("the HS256 secret holds %d bytes, want at least %d", len(c.Secret), MinSecretLen))
	}
	if c.JWKSURL != "" {
		if u, err := url.Parse(c.JWKSURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			problems = append(problems, fmt.Errorf("JWKS URL %q is not an http(s) URL", c.JWKSURL))
		}
	}
	if c.Leeway < 0 {
		problems = append(problems, fmt.Errorf("leeway %s is negative", c.Leeway))
	}
	if c.JWKSRefresh < 0 {
		problems = append(problems, fmt.Errorf("JWKS refresh %s is negative", c.JWKSRefresh))
	}
	if err := errors.Join(problems...); err != nil {
		return nil, fmt.Errorf("token verifier: %w", err)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	opts := []jwt.ParserOption{
		jwt.WithLeeway(c.Leeway),
		jwt.WithTimeFunc(c.Now),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		// One token, one spelling: base64url with non-zero padding bits
		// (a second spelling of the same signature) is malformed.
		jwt.WithStrictDecoding(),
	}
	if c.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(c.Issuer))
	}
	if c.Audience != "" {
		opts = append(opts, jwt.WithAudience(c.Audience))
	}
	v := &Verifier{close: func() {}}
	if len(c.Secret) > 0 {
		secret := slices.Clone(c.Secret)
		v.parser = jwt.NewParser(append(opts, jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}))...)
		v.key = func(t *jwt.Token) (any, error) {
			if t.Method != jwt.SigningMethodHS256 { // WithValidMethods already refused it
				return nil, fmt.Errorf("unexpected signing method %s", t.Method.Alg())
			}
			return secret, nil
		}
		return v, nil
	}
	kf, closeKF, err := newJWKS(c)
	if err != nil {
		return nil, err
	}
	v.parser = jwt.NewParser(append(opts, jwt.WithValidMethods([]string{jwt.SigningMethodRS256.Alg(), jwt.SigningMethodES256.Alg()}))...)
	v.key, v.close = kf, closeKF
	return v, nil
}

// newJWKS is the key set at c.JWKSURL, refreshed until the returned func is
// called.
func newJWKS(c Config) (jwt.Keyfunc, context.CancelFunc, error) {
	logger := c.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	refresh := c.JWKSRefresh
	if refresh == 0 {
		refresh = DefaultJWKSRefresh
	}
	ctx, cancel := context.WithCancel(context.Background())
	kf, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{c.JWKSURL}, keyfunc.Override{
		Client:          c.HTTPClient,
		HTTPTimeout:     jwksTimeout,
		RefreshInterval: refresh,
		// A request waits at most this long for a refresh its unknown key
		// id asked for; within a minute of the last one it fails at once.
		RateLimitWaitMax:  jwksTimeout,
		RefreshUnknownKID: rate.NewLimiter(rate.Every(unknownKIDEvery), 1),
		RefreshErrorHandlerFunc: func(u string) func(context.Context, error) {
			return func(ctx context.Context, err error) {
				logger.WarnContext(ctx, "token key set fetch failed; tokens signed by keys not yet fetched are refused",
					slog.String("url", u), slog.Any("error", err))
			}
		},
	})
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("token verifier: JWKS %s: %w", c.JWKSURL, err)
	}
	return kf.Keyfunc, cancel, nil
}

// Close stops the key-set refreshes. The verifier still verifies with the
// keys it holds.
func (v *Verifier) Close() { v.close() }

// Verify checks token and returns its principal, or a *TokenError.
func (v *Verifier) Verify(token string) (Principal, error) {
	return v.VerifyWith(token, nil)
}

// VerifyWith checks token as Verify does and also decodes its payload into
// extra, a pointer to a struct of the caller's own claims (realtime tokens'
// "sessions" and "documents"), when extra is not nil. A payload that does not
// decode into extra is a malformed token; extra is written only when the
// token is valid.
func (v *Verifier) VerifyWith(token string, extra any) (Principal, error) {
	if len(token) > MaxTokenLen {
		return Principal{}, &TokenError{Reason: "token is too long", Err: fmt.Errorf("%d bytes, more than %d", len(token), MaxTokenLen)}
	}
	c := claimsWith{extra: extra}
	if _, err := v.parser.ParseWithClaims(token, &c, v.key); err != nil {
		return Principal{}, &TokenError{Reason: reason(err), Err: err}
	}
	if extra != nil {
		if err := json.Unmarshal(c.raw, extra); err != nil {
			return Principal{}, &TokenError{Reason: jwt.ErrTokenMalformed.Error(), Err: err}
		}
	}
	if c.Subject == "" {
		return Principal{}, &TokenError{Reason: "token has no sub", Err: jwt.ErrTokenRequiredClaimMissing}
	}
	return Principal{Subject: c.Subject, Roles: c.Roles, ExpiresAt: c.ExpiresAt.UTC()}, nil
}

// Authenticate verifies the request's "Authorization: Bearer <token>":
// ErrNoToken without one, a *TokenError for a refused one.
func (v *Verifier) Authenticate(r *http.Request) (Principal, error) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return Principal{}, ErrNoToken
	}
	return v.Verify(token)
}

// reason is the caller-safe reason of a parse error, most specific first.
func reason(err error) string {
	for _, e := range []error{
		jwt.ErrTokenMalformed,
		jwt.ErrTokenSignatureInvalid, // also an algorithm outside the pinned set
		jwt.ErrTokenUnverifiable,     // no key (an unknown key id), no algorithm
		jwt.ErrTokenExpired,
		jwt.ErrTokenNotValidYet,
		jwt.ErrTokenUsedBeforeIssued,
		jwt.ErrTokenInvalidIssuer,
		jwt.ErrTokenInvalidAudience,
	} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	if errors.Is(err, jwt.ErrTokenRequiredClaimMissing) {
		// exp always, iss and aud when they are checked; the parser names
		// the claim only in its message.
		for _, name := range []string{"exp", "iss", "aud"} {
			if strings.Contains(err.Error(), name+" claim is required") {
				return "token has no " + name
			}
		}
		return jwt.ErrTokenRequiredClaimMissing.Error()
	}
	return "token is invalid"
}
