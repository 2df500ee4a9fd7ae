package joinlink

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/eventpipe/eventpipe/app/jsonfields"
)

// AdminRole is the role every endpoint requires (@Roles('admin')).
const AdminRole = "admin"

// Principal is the authenticated caller.
type Principal struct {
	UserID int64
	// Role is the caller's active role.
	Role string
}

// Authenticator authenticates a request (CombinedAuthGuard's role): false =
// unauthenticated (401).
type Authenticator func(r *http.Request) (Principal, bool)

// Headers of the existing auth scheme (§Security Design: "bearer +
// user/active-role headers").
const (
	UserIDHeader     = "X-User-Id"
	ActiveRoleHeader = "X-Active-Role"
)

// BearerAuth is a stand-in for the existing auth scheme: "Authorization:
// Bearer <token>" must carry token, X-User-Id a positive user id and
// X-Active-Role the role. An empty token authenticates nobody.
func BearerAuth(token string) Authenticator {
	return func(r *http.Request) (Principal, bool) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			return Principal{}, false
		}
		id, err := strconv.ParseInt(r.Header.Get(UserIDHeader), 10, 64)
		if err != nil || id <= 0 {
			return Principal{}, false
		}
		return Principal{UserID: id, Role: r.Header.Get(ActiveRoleHeader)}, true
	}
}

// API is the admin HTTP API (§API Contracts 1): PATCH
// /program-session/{id}/link-generation with {"linkGenerationAt": string |
// null}. Every path requires an authenticated admin (401, then 403).
// Errors are {"success":false,"data":null,"error":{"code","message"}}, never
// with internals; success is {"success":true,"data":{…},"error":null}.
type API struct {
	Service *Service
	Auth    Authenticator
	Logger  *slog.Logger
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
	if a.Auth == nil {
		fail(w, http.StatusUnauthorized, CodeUnauthorized, "authentication required")
		return
	}
	p, ok := a.Auth(r)
	if !ok {
		fail(w, http.StatusUnauthorized, CodeUnauthorized, "authentication required")
		return
	}
	if p.Role != AdminRole {
		fail(w, http.StatusForbidden, CodeForbidden, "admin role required")
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
	sess, err := a.Service.SetLinkGeneration(r.Context(), id, at, p.UserID)
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
