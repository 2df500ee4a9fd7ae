package interviews

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/eventpipe/eventpipe/app/auth"
	"github.com/eventpipe/eventpipe/app/jsonfields"
	"github.com/eventpipe/eventpipe/app/msgctx"
)

// The bot callbacks API's routes. The spec names the Fargate API's
// functions (completeInterview → publishInterviewCompleted, failInterview →
// publishInterviewFailed) but no HTTP path: these are eventpipe's (decision
// 0023).
const (
	// BotCompletePath publishes interview.completed:
	// {"organizationId", "durationSeconds"?, "completedAt"?}.
	BotCompletePath = "/interviews/{interviewId}/bot/complete"
	// BotFailPath publishes interview.failed:
	// {"organizationId", "failureReason", "failedAt"?}.
	BotFailPath = "/interviews/{interviewId}/bot/fail"
	// RequestIDHeader carries the caller's request id, which becomes the
	// messages' requestId attribute; one is generated when it is absent.
	RequestIDHeader = "X-Request-Id"
	// BotRole is the role a token needs (or auth.AdminRole) when the API
	// verifies tokens: the interview bot is a machine caller, not an
	// operator.
	BotRole = "interview-bot"
)

// APIServer names the bot callbacks API in serve's logs and in
// Service.ServerAddr.
const APIServer = "interviews-api"

// maxBotBodyBytes bounds a callback's body: the documented fields are a few
// hundred bytes; a long failureReason still fits, and the message stays far
// below the 1 MiB publish limit.
const maxBotBodyBytes = 64 << 10

// maxRequestIDLen is the longest X-Request-Id taken: what a trace id may be
// seeded from (traceIDFromRequestID).
const maxRequestIDLen = 128

// Authenticator verifies a request's bearer JWT (*auth.Verifier): an error
// is a 401.
type Authenticator interface {
	Authenticate(r *http.Request) (auth.Principal, error)
}

// BotAPI is the spec's producer as HTTP endpoints: the bot's callbacks to
// the Fargate API, each publishing one message on interview-completed with
// the requestId and eventType attributes.
//
//	POST /interviews/{interviewId}/bot/complete  {"organizationId", "durationSeconds"?, "completedAt"?}
//	POST /interviews/{interviewId}/bot/fail      {"organizationId", "failureReason", "failedAt"?}
//	X-Request-Id: <id>   optional; the requestId attribute (generated when absent)
//
//	202 {"messageId", "requestId"}   published, not yet settled
//	400 malformed JSON, a wrong type or value (the error names the field), an unknown field, a bad X-Request-Id
//	401 no or invalid token · 403 neither the interview-bot nor the admin role   (only with Auth)
//	404 not a route, or an interviewId that is not an ObjectId · 405 not POST · 413 a body over 64 KiB
//	503 the broker refused the publish: send it again
//
// The API only publishes: it does not look the interview up (the store is
// the consumer's), so an unknown interview is accepted and then dropped by
// the consumer with a log line, as the spec drops an invalid message.
// completedAt and failedAt default to now, durationSeconds to 0 (the
// spec's producer defaults); null is taken as absent. Errors are
// {"error": "…"}, the interviews spec's envelope.
type BotAPI struct {
	Producer Producer
	// Auth, when set, requires a bearer JWT whose roles hold BotRole or
	// auth.AdminRole; nil leaves the API open (no verifier configured).
	Auth   Authenticator
	Logger *slog.Logger
}

func (a *BotAPI) logger() *slog.Logger {
	if a.Logger != nil {
		return a.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// Handler serves BotCompletePath and BotFailPath.
func (a *BotAPI) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(BotCompletePath, a.route(EventInterviewCompleted))
	mux.Handle(BotFailPath, a.route(EventInterviewFailed))
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		refuse(w, http.StatusNotFound, "not found: POST "+BotCompletePath+" or "+BotFailPath)
	})
	return mux
}

// route handles the callback that publishes eventType.
func (a *BotAPI) route(eventType string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		actor := ""
		if a.Auth != nil {
			p, err := a.Auth.Authenticate(r)
			if err != nil {
				w.Header().Set("WWW-Authenticate", `Bearer realm="eventpipe"`)
				refuse(w, http.StatusUnauthorized, err.Error())
				return
			}
			if !p.HasRole(BotRole) && !p.HasRole(auth.AdminRole) {
				refuse(w, http.StatusForbidden, "the "+BotRole+" or "+auth.AdminRole+" role is required")
				return
			}
			actor = p.Subject
		}
		interviewID := r.PathValue("interviewId")
		if !IsObjectID(interviewID) {
			refuse(w, http.StatusNotFound, fmt.Sprintf("not found: interviewId %q is not an ObjectId (24 hex digits)", jsonfields.Truncate(interviewID, 64)))
			return
		}
		interviewID = lower(interviewID)
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			refuse(w, http.StatusMethodNotAllowed, "use POST")
			return
		}
		requestID, err := requestIDOf(r)
		if err != nil {
			refuse(w, http.StatusBadRequest, err.Error())
			return
		}
		w.Header().Set(RequestIDHeader, requestID)
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBotBodyBytes))
		if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
			refuse(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body too large: at most %d bytes", maxBotBodyBytes))
			return
		}
		if err != nil {
			refuse(w, http.StatusBadRequest, "reading the body: "+err.Error())
			return
		}
		ctx := WithRequestID(r.Context(), requestID)
		var id string
		if eventType == EventInterviewCompleted {
			var ev InterviewCompleted
			if ev, err = parseBotComplete(interviewID, body); err == nil {
				id, err = a.Producer.PublishInterviewCompleted(ctx, ev)
			}
		} else {
			var ev InterviewFailed
			if ev, err = parseBotFail(interviewID, body); err == nil {
				id, err = a.Producer.PublishInterviewFailed(ctx, ev)
			}
		}
		log := a.logger().With(slog.String("interview_id", interviewID), slog.String("event_type", eventType),
			slog.String("request_id", requestID), slog.String("actor", actor))
		switch {
		case errors.Is(err, ErrInvalidBody):
			log.DebugContext(ctx, "bot callback refused", slog.Any("error", err))
			refuse(w, http.StatusBadRequest, err.Error())
		case err != nil:
			log.ErrorContext(ctx, "bot callback not published", slog.Any("error", err))
			refuse(w, http.StatusServiceUnavailable, "not published, send it again")
		default:
			log.InfoContext(ctx, "bot callback published", slog.String("message_id", id))
			writeJSON(w, http.StatusAccepted, map[string]string{"messageId": id, "requestId": requestID})
		}
	})
}

// requestIDOf is the request's X-Request-Id, or a new one (a trace id's 32
// hex digits, so that it also seeds the messages' trace).
func requestIDOf(r *http.Request) (string, error) {
	id := r.Header.Get(RequestIDHeader)
	if id == "" {
		return msgctx.NewTraceID(), nil
	}
	if len(id) > maxRequestIDLen || strings.ContainsFunc(id, func(c rune) bool { return c < '!' || c > '~' }) {
		return "", fmt.Errorf("%s must be 1..%d printable ASCII characters without spaces", RequestIDHeader, maxRequestIDLen)
	}
	return id, nil
}

// botFields splits a callback body, refusing unknown fields (strict on
// publish) and dropping the optional ones sent as null.
func botFields(body []byte, allowed ...string) (map[string]json.RawMessage, error) {
	fields, err := jsonfields.Object(body, "body")
	if err != nil {
		return nil, invalid("%v", err)
	}
	if k, ok := jsonfields.Unknown(fields, allowed...); ok {
		return nil, invalid("unknown field %q", jsonfields.Truncate(k, 64))
	}
	return fields, nil
}

// optional removes key from fields when it is null and reports whether it
// is there.
func optional(fields map[string]json.RawMessage, key string) bool {
	raw, ok := fields[key]
	if ok && jsonfields.IsNull(raw) {
		delete(fields, key)
		return false
	}
	return ok
}

func parseBotComplete(interviewID string, body []byte) (InterviewCompleted, error) {
	fields, err := botFields(body, "organizationId", "durationSeconds", "completedAt")
	if err != nil {
		return InterviewCompleted{}, err
	}
	ev := InterviewCompleted{InterviewID: interviewID}
	if ev.OrganizationID, err = oid(fields, "organizationId"); err != nil {
		return InterviewCompleted{}, err
	}
	if optional(fields, "completedAt") {
		if ev.CompletedAt, err = datetime(fields, "completedAt"); err != nil {
			return InterviewCompleted{}, err
		}
	}
	if optional(fields, "durationSeconds") {
		if err := json.Unmarshal(fields["durationSeconds"], &ev.DurationSeconds); err != nil {
			return InterviewCompleted{}, invalid("durationSeconds must be a number")
		}
		if err := checkDuration(ev.DurationSeconds); err != nil {
			return InterviewCompleted{}, err
		}
	}
	return ev, nil
}

func parseBotFail(interviewID string, body []byte) (InterviewFailed, error) {
	fields, err := botFields(body, "organizationId", "failureReason", "failedAt")
	if err != nil {
		return InterviewFailed{}, err
	}
	ev := InterviewFailed{InterviewID: interviewID}
	if ev.OrganizationID, err = oid(fields, "organizationId"); err != nil {
		return InterviewFailed{}, err
	}
	if ev.FailureReason, err = jsonfields.String(fields, "failureReason", true); err != nil {
		return InterviewFailed{}, invalid("%v", err)
	}
	if optional(fields, "failedAt") {
		if ev.FailedAt, err = datetime(fields, "failedAt"); err != nil {
			return InterviewFailed{}, err
		}
	}
	return ev, nil
}

// writeJSON answers status with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// refuse answers status with the spec's error envelope {"error": msg}.
func refuse(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
