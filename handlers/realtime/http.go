package realtime

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Handler serves the SSE streams and the demo page:
//
//	GET /realtime/sessions/{id}   session channel  (realtime.session.notify)
//	GET /realtime/users/{id}      user channel     (realtime.user.notify)
//	GET /realtime/documents/{id}  document channel (realtime.document.notify)
//	GET /realtime/demo            demo page (the user channel and a session channel, EventSource)
//
// A stream needs a bearer token, in the Authorization header or — because
// EventSource cannot set headers — in the access_token query parameter
// (RFC 6750 §2.3; keep such tokens short-lived, URLs end up in logs).
// Without a valid token: 401; for a channel the token does not cover: 403;
// an id that is not a positive integer: 400; another path: 404.
//
// Each event is written as
//
//	id: <messageId>
//	event: <payload.eventType>
//	data: <payload.data as compact JSON>
//
// with a comment line every Heartbeat. A client sending Last-Event-ID gets
// the non-volatile events after that id from the channel's window first; an
// id outside the window gets the comment ": resume-miss" and live events
// only (the page should reload its state). The stream ends when the token
// expires, when the client is too slow (its buffer is full), or on Close.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /realtime/demo", s.serveDemo)
	mux.HandleFunc("GET /realtime/demo.js", s.serveDemoJS)
	mux.HandleFunc("GET /realtime/{kind}/{id}", s.serveStream)
	mux.HandleFunc("OPTIONS /realtime/{kind}/{id}", s.servePreflight)
	return mux
}

// cors allows the configured origins, on every answer (errors included, so
// that a page can tell 401 from a network failure).
func (s *Server) cors(w http.ResponseWriter, r *http.Request) {
	origin := r.Header.Get("Origin")
	if origin == "" || !slices.Contains(s.cfg.AllowedOrigins, origin) {
		return
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Add("Vary", "Origin")
}

// servePreflight answers a CORS preflight (a page sending Authorization or
// Last-Event-ID through fetch).
func (s *Server) servePreflight(w http.ResponseWriter, r *http.Request) {
	s.cors(w, r)
	if w.Header().Get("Access-Control-Allow-Origin") != "" {
		h := w.Header()
		h.Set("Access-Control-Allow-Methods", "GET")
		h.Set("Access-Control-Allow-Headers", "Authorization, Last-Event-ID")
		h.Set("Access-Control-Max-Age", "600")
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) serveStream(w http.ResponseWriter, r *http.Request) {
	s.cors(w, r)
	kind, ok := kindByPath[r.PathValue("kind")]
	if !ok {
		httpError(w, http.StatusNotFound, "not_found", "no such channel kind; want sessions, users or documents")
		return
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		httpError(w, http.StatusBadRequest, "bad_request", "channel id must be a positive integer")
		return
	}
	ch := Channel{Kind: kind, ID: id}
	token := bearerToken(r)
	if token == "" {
		s.m.auth.WithLabelValues("401").Inc()
		w.Header().Set("WWW-Authenticate", `Bearer realm="realtime"`)
		httpError(w, http.StatusUnauthorized, "unauthorized", "a bearer token is required")
		return
	}
	claims, err := s.cfg.Verifier.Verify(token)
	if err != nil {
		s.m.auth.WithLabelValues("401").Inc()
		w.Header().Set("WWW-Authenticate", `Bearer realm="realtime", error="invalid_token"`)
		httpError(w, http.StatusUnauthorized, "unauthorized", "invalid or expired token")
		return
	}
	if !claims.Allows(ch) {
		s.m.auth.WithLabelValues("403").Inc()
		httpError(w, http.StatusForbidden, "forbidden", "the token does not cover this channel")
		return
	}
	s.stream(w, r, ch, time.Unix(claims.Expires, 0))
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request, ch Channel, expires time.Time) {
	select {
	case <-s.stopped:
		httpError(w, http.StatusServiceUnavailable, "unavailable", "shutting down")
		return
	default:
	}
	rc := http.NewResponseController(w)
	lastID := r.Header.Get("Last-Event-ID")
	if lastID == "" {
		lastID = r.URL.Query().Get("lastEventId")
	}
	c, replay, resumed := s.hub.subscribe(ch, lastID)
	defer s.hub.unsubscribe(ch, c)
	if lastID != "" {
		result := "hit"
		if !resumed {
			result = "miss"
		}
		s.m.resumes.WithLabelValues(result).Inc()
	}

	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache, no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)

	write := func(b []byte) bool {
		// A client that stops reading must not hold this goroutine forever.
		_ = rc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	head := fmt.Sprintf("retry: %d\n: connected %s\n\n", s.cfg.RetryHint.Milliseconds(), ch)
	if !resumed {
		head += ": resume-miss\n\n"
	}
	var buf []byte
	for _, e := range replay {
		buf = appendEvent(buf, e)
	}
	if !write(append([]byte(head), buf...)) {
		return
	}
	s.m.sent.WithLabelValues(string(ch.Kind)).Add(float64(len(replay)))

	heartbeat := time.NewTicker(s.cfg.Heartbeat)
	defer heartbeat.Stop()
	expiry := time.NewTimer(time.Until(expires))
	defer expiry.Stop()
	for {
		select {
		case e := <-c.ch:
			buf = appendEvent(buf[:0], e)
			// Send what else is already waiting in the same write.
			for n := len(c.ch); n > 0; n-- {
				buf = appendEvent(buf, <-c.ch)
			}
			if !write(buf) {
				return
			}
			s.m.sent.WithLabelValues(string(ch.Kind)).Inc()
		case <-heartbeat.C:
			if !write([]byte(": heartbeat\n\n")) {
				return
			}
		case <-c.evicted:
			s.cfg.Logger.InfoContext(r.Context(), "realtime: slow client disconnected", slog.String("channel", ch.String()))
			return
		case <-expiry.C:
			return
		case <-s.stopped:
			return
		case <-r.Context().Done():
			return
		}
	}
}

// appendEvent appends e in SSE framing. ID and Type were checked by the
// relay (no line breaks); Data is compact JSON, one line.
func appendEvent(b []byte, e Event) []byte {
	b = append(b, "id: "...)
	b = append(b, e.ID...)
	b = append(b, "\nevent: "...)
	b = append(b, e.Type...)
	b = append(b, "\ndata: "...)
	b = append(b, e.Data...)
	return append(b, "\n\n"...)
}

func bearerToken(r *http.Request) string {
	if auth := r.Header.Get("Authorization"); auth != "" {
		scheme, token, ok := strings.Cut(auth, " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(token)
		}
		return ""
	}
	return r.URL.Query().Get("access_token")
}

// httpError writes the error envelope {"error": {"code", "message"}}.
func httpError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
}
