package disputes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/eventpipe/eventpipe/app/auth"
	"github.com/eventpipe/eventpipe/app/jsonfields"
	"github.com/eventpipe/eventpipe/app/msgctx"
)

// Paths of the API. The spec names POST /v1/disputes (§1: mcp-gateway →
// core-api, with an idempotency key); flag_transaction_for_review's path is
// eventpipe's.
const (
	DisputesPath = "/v1/disputes"
	// FlagPath is the ServeMux pattern of flag_transaction_for_review.
	FlagPath = "/v1/transactions/{txn_id}/flag"
)

// Headers of the API.
const (
	// IdempotencyKeyHeader names the request's idempotency key: required by
	// POST /v1/disputes, honoured by the flag when sent.
	IdempotencyKeyHeader = "Idempotency-Key"
	// ReplayedHeader is "true" on a response replayed for a repeated key.
	ReplayedHeader = "Idempotent-Replayed"
)

// MaxRequestBytes bounds a request body; larger is a 413.
const MaxRequestBytes = 64 << 10

// MaxIdempotencyKeyLength bounds an Idempotency-Key (visible ASCII).
const MaxIdempotencyKeyLength = 255

// Authenticator verifies a request's bearer JWT (decision 0017):
// auth.ErrNoToken or a *auth.TokenError is a 401. *auth.Verifier is the one
// implementation.
type Authenticator interface {
	Authenticate(r *http.Request) (auth.Principal, error)
}

// API is the producers' HTTP API, core-api's side of §1:
//
//	POST /v1/disputes                       raise_dispute
//	Idempotency-Key: <1..255 visible ASCII>  (required)
//	{"txn_id": "txn_…", "reason_code": "failed_but_debited", "rail": "UPI", "tat_due_at": "2026-11-14T09:14:03.512Z"}
//	201 DisputeResponse
//
//	POST /v1/transactions/{txn_id}/flag     flag_transaction_for_review
//	Idempotency-Key: …                       (optional, honoured the same way)
//	{"risk_score": 91, "reason": "velocity"}
//	201 FlagResponse
//
// Each writes its business row and its outbox row in one transaction (the
// store's), and with a key the key's row too: the same key with the same
// request answers the first response again (Idempotent-Replayed: true) and
// writes nothing; with another request it is a 422. txn_id, reason_code
// are required, rail and tat_due_at (RFC 3339, or null) optional; risk_score
// a number 0–100, reason optional; unknown fields are refused (strict, as
// every producer of ours). Errors are {"error": "…"} naming the field, never
// internals: 400 (malformed, invalid, a missing or bad Idempotency-Key), 401,
// 404, 405, 413 (body over MaxRequestBytes), 422, 500.
//
// With Auth set, every request needs a valid bearer JWT (401 otherwise; any
// roles: the caller is a service, mcp-gateway); the token's sub is logged as
// the actor. With Auth nil the API is open (decision 0022).
type API struct {
	Store Store
	// Auth verifies callers' tokens; nil serves without authentication.
	Auth   Authenticator
	Logger *slog.Logger
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// DisputeResponse is POST /v1/disputes' 201 body: the dispute as stored and
// its DisputeRaised event.
type DisputeResponse struct {
	ID         string  `json:"id"`
	TxnID      string  `json:"txn_id"`
	ReasonCode string  `json:"reason_code"`
	Rail       string  `json:"rail"`
	TATDueAt   *string `json:"tat_due_at"`
	RaisedAt   string  `json:"raised_at"`
	EventID    string  `json:"event_id"`
}

// FlagResponse is the flag's 201 body: the flag as stored and its
// TransactionFlagged event (the review entry follows asynchronously).
type FlagResponse struct {
	TxnID     string  `json:"txn_id"`
	RiskScore float64 `json:"risk_score"`
	Reason    string  `json:"reason"`
	FlaggedAt string  `json:"flagged_at"`
	EventID   string  `json:"event_id"`
}

func (a *API) logger() *slog.Logger {
	if a.Logger != nil {
		return a.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func (a *API) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// Handler serves the API's routes; every other path is a 404, another
// method a 405, each in the error envelope.
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+DisputesPath, a.raiseDispute)
	mux.HandleFunc("POST "+FlagPath, a.flagTransaction)
	for _, p := range []string{DisputesPath, FlagPath} {
		mux.HandleFunc(p, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Allow", http.MethodPost)
			fail(w, http.StatusMethodNotAllowed, "use POST")
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fail(w, http.StatusNotFound, "not found: POST "+DisputesPath+" or POST "+FlagPath)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		actor, ok := a.authenticate(w, r)
		if !ok {
			return
		}
		ctx := r.Context()
		if id := traceparentID(r.Header.Get("traceparent")); id != "" {
			ctx = msgctx.WithTraceID(ctx, id) // §2: the event carries the request's trace
		}
		mux.ServeHTTP(w, r.WithContext(context.WithValue(ctx, actorKey{}, actor)))
	})
}

type actorKey struct{}

func actorOf(ctx context.Context) string {
	s, _ := ctx.Value(actorKey{}).(string)
	return s
}

// authenticate answers 401 unless Auth is nil or the request carries a valid
// token; it returns the token's sub.
func (a *API) authenticate(w http.ResponseWriter, r *http.Request) (string, bool) {
	if a.Auth == nil {
		return "", true
	}
	p, err := a.Auth.Authenticate(r)
	if err == nil {
		return p.Subject, true
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="eventpipe"`)
	var te *auth.TokenError
	switch {
	case errors.Is(err, auth.ErrNoToken):
		fail(w, http.StatusUnauthorized, "authentication required: send an Authorization: Bearer JWT")
	case errors.As(err, &te):
		a.logger().DebugContext(r.Context(), "disputes API token refused", slog.String("reason", te.Reason), slog.Any("error", te.Err))
		fail(w, http.StatusUnauthorized, te.Error())
	default:
		a.logger().WarnContext(r.Context(), "disputes API authentication failed", slog.Any("error", err))
		fail(w, http.StatusUnauthorized, "authentication required")
	}
	return "", false
}

func (a *API) raiseDispute(w http.ResponseWriter, r *http.Request) {
	key, ok := idempotencyKey(w, r, true)
	if !ok {
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	d, err := parseDisputeRequest(body)
	if err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx := r.Context()
	log := a.logger().With(slog.String("txn_id", d.TxnID), slog.String("actor", actorOf(ctx)))
	var out DisputeResponse
	resp, replayed, err := a.Store.Idempotent(ctx, IdempotencyKey{Key: key, RequestHash: requestHash("raise_dispute", d.TxnID, d.ReasonCode, d.Rail, d.TATDueAt)},
		func(ctx context.Context) (StoredResponse, error) {
			now := a.now().UTC().Truncate(time.Millisecond)
			d := d
			d.ID, d.RaisedAt = NewID("dsp", now), now
			eventID, err := a.Store.RaiseDispute(ctx, d)
			if err != nil && !isNotPublished(err) {
				return StoredResponse{}, err
			}
			out = DisputeResponse{ID: d.ID, TxnID: d.TxnID, ReasonCode: d.ReasonCode, Rail: d.Rail,
				RaisedAt: d.RaisedAt.Format(occurredAtLayout), EventID: eventID}
			if d.TATDueAt != nil {
				s := d.TATDueAt.UTC().Format(occurredAtLayout)
				out.TATDueAt = &s
			}
			return created(out)
		})
	if (err == nil || isNotPublished(err)) && !replayed {
		log.InfoContext(ctx, "dispute raised", slog.String("dispute_id", out.ID), slog.String("event_id", out.EventID))
	}
	a.answer(w, r, log, resp, replayed, err)
}

func (a *API) flagTransaction(w http.ResponseWriter, r *http.Request) {
	key, ok := idempotencyKey(w, r, false)
	if !ok {
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	f, err := parseFlagRequest(r.PathValue("txn_id"), body)
	if err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx := r.Context()
	log := a.logger().With(slog.String("txn_id", f.TxnID), slog.String("actor", actorOf(ctx)))
	var eventID string
	write := func(ctx context.Context) (StoredResponse, error) {
		f := f
		f.FlaggedAt = a.now().UTC().Truncate(time.Millisecond)
		var err error
		if eventID, err = a.Store.FlagTransaction(ctx, f); err != nil && !isNotPublished(err) {
			return StoredResponse{}, err
		}
		return created(FlagResponse{TxnID: f.TxnID, RiskScore: f.RiskScore, Reason: f.Reason,
			FlaggedAt: f.FlaggedAt.Format(occurredAtLayout), EventID: eventID})
	}
	var (
		resp     StoredResponse
		replayed bool
	)
	if key == "" {
		resp, err = write(ctx)
	} else {
		resp, replayed, err = a.Store.Idempotent(ctx, IdempotencyKey{Key: key, RequestHash: requestHash("flag_transaction_for_review", f.TxnID, f.RiskScore, f.Reason)}, write)
	}
	if (err == nil || isNotPublished(err)) && !replayed {
		log.InfoContext(ctx, "transaction flagged for review", slog.Float64("risk_score", f.RiskScore), slog.String("event_id", eventID))
	}
	a.answer(w, r, log, resp, replayed, err)
}

// answer writes a stored (or replayed) response, or the error's status.
func (a *API) answer(w http.ResponseWriter, r *http.Request, log *slog.Logger, resp StoredResponse, replayed bool, err error) {
	switch {
	case errors.Is(err, ErrKeyReused):
		fail(w, http.StatusUnprocessableEntity, "the "+IdempotencyKeyHeader+" was already used with a different request")
		return
	case isNotPublished(err):
		// The embedded mode only: the change is committed (a repeat of the
		// key replays this answer), its event was not published.
		log.ErrorContext(r.Context(), "committed, event not published (embedded mode: no outbox table)", slog.Any("error", err))
	case err != nil:
		log.ErrorContext(r.Context(), "disputes API request failed", slog.String("path", r.URL.Path), slog.Any("error", err))
		fail(w, http.StatusInternalServerError, "internal error; see the service's log")
		return
	}
	if replayed {
		w.Header().Set(ReplayedHeader, "true")
		log.InfoContext(r.Context(), "idempotent request replayed", slog.String("path", r.URL.Path))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

func created(v any) (StoredResponse, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return StoredResponse{}, err
	}
	return StoredResponse{Status: http.StatusCreated, Body: append(b, '\n')}, nil
}

func fail(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// idempotencyKey reads the Idempotency-Key header (answering 400 when it is
// required and missing, or malformed); "" when absent and optional.
func idempotencyKey(w http.ResponseWriter, r *http.Request, required bool) (string, bool) {
	vals := r.Header.Values(IdempotencyKeyHeader)
	switch {
	case len(vals) == 0 && !required:
		return "", true
	case len(vals) == 0:
		fail(w, http.StatusBadRequest, IdempotencyKeyHeader+" header is required (a unique value per dispute, reused on retries)")
		return "", false
	case len(vals) > 1:
		fail(w, http.StatusBadRequest, "one "+IdempotencyKeyHeader+" header, please")
		return "", false
	}
	k := vals[0]
	if k == "" || len(k) > MaxIdempotencyKeyLength || strings.IndexFunc(k, func(c rune) bool { return c < 0x20 || c > 0x7e }) >= 0 {
		fail(w, http.StatusBadRequest, fmt.Sprintf("%s must be 1..%d visible ASCII characters", IdempotencyKeyHeader, MaxIdempotencyKeyLength))
		return "", false
	}
	return k, true
}

// readBody reads at most MaxRequestBytes (413 beyond).
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
		fail(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", MaxRequestBytes))
		return nil, false
	}
	if err != nil {
		fail(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return nil, false
	}
	return body, true
}

// errInvalidRequest is wrapped by every request validation error.
var errInvalidRequest = errors.New("invalid request")

func badRequest(err error) error { return fmt.Errorf("%w: %w", errInvalidRequest, err) }

// apiString reads an optional or required string of at most MaxIDLength bytes.
func apiString(fields map[string]json.RawMessage, key string, required bool) (string, error) {
	s, err := jsonfields.String(fields, key, required)
	if err != nil {
		return "", badRequest(err)
	}
	if len(s) > MaxIDLength {
		return "", badRequest(fmt.Errorf("%s longer than %d bytes", key, MaxIDLength))
	}
	return s, nil
}

// parseDisputeRequest decodes raise_dispute's body strictly.
func parseDisputeRequest(body []byte) (Dispute, error) {
	fields, err := jsonfields.Object(body, "body")
	if err != nil {
		return Dispute{}, badRequest(err)
	}
	if k, ok := jsonfields.Unknown(fields, "txn_id", "reason_code", "rail", "tat_due_at"); ok {
		return Dispute{}, badRequest(fmt.Errorf("unknown field %q", jsonfields.Truncate(k, 64)))
	}
	var d Dispute
	if d.TxnID, err = apiString(fields, "txn_id", true); err != nil {
		return Dispute{}, err
	}
	if d.ReasonCode, err = apiString(fields, "reason_code", true); err != nil {
		return Dispute{}, err
	}
	if d.Rail, err = apiString(fields, "rail", false); err != nil {
		return Dispute{}, err
	}
	if raw, ok := fields["tat_due_at"]; ok && !jsonfields.IsNull(raw) {
		s, err := jsonfields.String(fields, "tat_due_at", true)
		if err != nil {
			return Dispute{}, badRequest(err)
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return Dispute{}, badRequest(fmt.Errorf("tat_due_at %q is not an RFC 3339 time", jsonfields.Truncate(s, 64)))
		}
		t = t.UTC().Truncate(time.Millisecond)
		d.TATDueAt = &t
	}
	return d, nil
}

// parseFlagRequest decodes flag_transaction_for_review's body strictly.
func parseFlagRequest(txnID string, body []byte) (Flag, error) {
	if txnID == "" || len(txnID) > MaxIDLength {
		return Flag{}, badRequest(fmt.Errorf("txn_id in the path must be 1..%d bytes", MaxIDLength))
	}
	fields, err := jsonfields.Object(body, "body")
	if err != nil {
		return Flag{}, badRequest(err)
	}
	if k, ok := jsonfields.Unknown(fields, "risk_score", "reason"); ok {
		return Flag{}, badRequest(fmt.Errorf("unknown field %q", jsonfields.Truncate(k, 64)))
	}
	f := Flag{TxnID: txnID}
	raw, ok := fields["risk_score"]
	if !ok {
		return Flag{}, badRequest(errors.New("risk_score is required"))
	}
	if err := json.Unmarshal(raw, &f.RiskScore); err != nil || jsonfields.IsNull(raw) {
		return Flag{}, badRequest(errors.New("risk_score must be a number"))
	}
	if math.IsNaN(f.RiskScore) || f.RiskScore < 0 || f.RiskScore > MaxRiskScore {
		return Flag{}, badRequest(fmt.Errorf("risk_score %g is outside 0..%d", f.RiskScore, MaxRiskScore))
	}
	if f.Reason, err = apiString(fields, "reason", false); err != nil {
		return Flag{}, err
	}
	return f, nil
}

// requestHash is the hash an idempotency key is bound to: the operation and
// the request's fields as parsed, so spacing, key order or a time's zone do
// not make a repeat "different".
func requestHash(op string, fields ...any) string {
	b, _ := json.Marshal(append([]any{op}, fields...))
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// traceparentID is the trace id of a W3C traceparent header, or "".
func traceparentID(h string) string {
	parts := strings.Split(strings.TrimSpace(h), "-")
	if len(parts) < 4 || len(parts[0]) != 2 || !traceIDPattern.MatchString(parts[1]) || parts[1] == strings.Repeat("0", 32) {
		return ""
	}
	return parts[1]
}
