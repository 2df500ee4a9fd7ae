package joinlink

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/eventpipe/eventpipe/app/auth"
	"github.com/eventpipe/eventpipe/app/jsonfields"
)

// Authenticator verifies a request's bearer JWT and returns its principal
// (CombinedAuthGuard's role): auth.ErrNoToken or a *auth.TokenError is a 401.
// *auth.Verifier is the one implementation.
type Authenticator interface {
	Authenticate(r *http.Request) (auth.Principal, error)
}

// API is the admin HTTP API (§API Contracts 1): PATCH
// /program-session/{id}/link-generation with {"linkGenerationAt": string |
// null}. Every path requires "Authorization: Bearer <JWT>" (401 without a
// valid one) whose roles hold auth.AdminRole (403 otherwise); the acting user
// — updated_by — is the token's sub, which must be a positive integer (403
// otherwise). Headers a client sets (X-User-Id, X-Active-Role) are never the
// principal (decision 0017). Errors are
// {"success":false,"data":null,"error":{"code","message"}}, never with
// internals; success is {"success":true,"data":{…},"error":null}.
type API struct {
	Service *Service
	// Auth verifies the callers' tokens; nil refuses every request (401).
	Auth   Authenticator
	Logger *slog.Logger
}

// Error codes of the envelope.
const (
	CodeUnauthorized = "UNAUTHORIZED"
	CodeForbidden    = "FORBIDDEN"
	CodeNotFound     = "NOT_FOUND"
	CodeBadRequest   = "BAD_REQUEST"
	CodeConflict     = "CONFLICT"
	CodeInternal     = "INTERNAL_ERROR"
)

// LinkGenerationResponse is iface-02.
type LinkGenerationResponse struct {
	ID                   int64   `json:"id"`
	LinkGenerationAt     *string `json:"linkGenerationAt"`
	LinkGenerationStatus Status  `json:"linkGenerationStatus"`
}

type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type envelope struct {
	Success bool      `json:"success"`
	Data    any       `json:"data"`
	Error   *apiError `json:"error"`
}

const maxBodyBytes = 64 << 10

func (a *API) logger() *slog.Logger {
	if a.Logger != nil {
		return a.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func writeJSON(w http.ResponseWriter, status int, v envelope) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, envelope{Error: &apiError{Code: code, Message: msg}})
}

// ServeHTTP implements http.Handler.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	actor, ok := a.authorize(w, r)
	if !ok {
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/program-session/")
	idStr, ok2 := strings.CutSuffix(rest, "/link-generation")
	if !ok || !ok2 || strings.Contains(idStr, "/") {
		fail(w, http.StatusNotFound, CodeNotFound, "not found")
		return
	}
	if r.Method != http.MethodPatch {
		w.Header().Set("Allow", http.MethodPatch)
		fail(w, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "use PATCH")
		return
	}
	id, err := strconv.ParseInt(idStr, 10, 64)
	if err != nil || id <= 0 {
		fail(w, http.StatusNotFound, CodeNotFound, "program session not found")
		return
	}
	at, msg := parseSetLinkGeneration(r)
	if msg != "" {
		fail(w, http.StatusBadRequest, CodeBadRequest, msg)
		return
	}
	sess, err := a.Service.SetLinkGeneration(r.Context(), id, at, actor)
	switch {
	case errors.Is(err, ErrInvalidTime):
		fail(w, http.StatusBadRequest, CodeBadRequest, ErrInvalidTime.Error())
		return
	case errors.Is(err, ErrNotFound):
		fail(w, http.StatusNotFound, CodeNotFound, "program session not found")
		return
	case errors.Is(err, ErrInProgress):
		fail(w, http.StatusConflict, CodeConflict, "link generation is in progress for this session")
		return
	case err != nil:
		a.logger().ErrorContext(r.Context(), "set link generation failed", slog.Int64("program_session_id", id), slog.Any("error", err))
		fail(w, http.StatusInternalServerError, CodeInternal, "internal error")
		return
	}
	resp := LinkGenerationResponse{ID: sess.ID, LinkGenerationStatus: sess.Status}
	if sess.LinkGenerationAt != nil {
		s := sess.LinkGenerationAt.UTC().Format(timestampLayout)
		resp.LinkGenerationAt = &s
	}
	writeJSON(w, http.StatusOK, envelope{Success: true, Data: resp})
}

// authorize answers 401 or 403 unless the request carries an admin's valid
// token, and returns the acting user's id.
func (a *API) authorize(w http.ResponseWriter, r *http.Request) (int64, bool) {
	if a.Auth == nil {
		fail(w, http.StatusUnauthorized, CodeUnauthorized, "authentication required")
		return 0, false
	}
	p, err := a.Auth.Authenticate(r)
	var te *auth.TokenError
	switch {
	case errors.Is(err, auth.ErrNoToken):
		fail(w, http.StatusUnauthorized, CodeUnauthorized, "authentication required: send an Authorization: Bearer JWT")
		return 0, false
	case errors.As(err, &te):
		a.logger().DebugContext(r.Context(), "admin API token refused", slog.String("reason", te.Reason), slog.Any("error", te.Err))
		fail(w, http.StatusUnauthorized, CodeUnauthorized, te.Error())
		return 0, false
	case err != nil:
		a.logger().WarnContext(r.Context(), "admin API authentication failed", slog.Any("error", err))
		fail(w, http.StatusUnauthorized, CodeUnauthorized, "authentication required")
		return 0, false
	}
	if !p.HasRole(auth.AdminRole) {
		fail(w, http.StatusForbidden, CodeForbidden, "admin role required")
		return 0, false
	}
	// updated_by is a bigint: a subject that is no user id cannot be
	// stamped, so the caller may not write.
	actor, err := p.UserID()
	if err != nil {
		fail(w, http.StatusForbidden, CodeForbidden, "the token's sub must be the acting user's id, a positive integer")
		return 0, false
	}
	return actor, true
}

// parseSetLinkGeneration reads SetLinkGenerationDto: linkGenerationAt is
// required, null or an ISO-8601 (RFC 3339) UTC time. Futureness is the
// service's check. It returns a message for a 400.
func parseSetLinkGeneration(r *http.Request) (*time.Time, string) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil || len(body) > maxBodyBytes {
		return nil, "request body unreadable or too large"
	}
	fields, err := object(body, "body")
	if err != nil {
		return nil, "request body must be a JSON object"
	}
	raw, ok := fields["linkGenerationAt"]
	if !ok {
		return nil, "linkGenerationAt is required (a future ISO-8601 UTC time, or null)"
	}
	if jsonfields.IsNull(raw) {
		return nil, ""
	}
	var s string
	if err := json.Unmarshal(bytes.TrimSpace(raw), &s); err != nil {
		return nil, "linkGenerationAt must be a string or null"
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return nil, "linkGenerationAt is not an ISO-8601 time"
	}
	if _, off := t.Zone(); off != 0 {
		return nil, "linkGenerationAt must be in UTC"
	}
	t = t.UTC()
	return &t, ""
}
