package app

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/eventpipe/eventpipe/app/broker"
)

// adminHandler serves the operator endpoints:
//
//	GET /healthz  200 while the process runs (liveness)
//	GET /readyz   200 when the router runs and the broker (and database, when
//	              configured) answer; 503 with the failing checks otherwise
//	GET /metrics  Prometheus metrics
//
// which are open (probes and scrapers carry no token), and the enabled specs'
// endpoints (spec.Parts.Endpoints), such as the join-link admin API under
// /program-session/. Every endpoint that changes something or shows more than
// health takes a JWT verified by s.verifier with the admin role (decision
// 0017); the spec endpoints check it themselves, so that their errors keep
// their spec's envelope, and are mounted only when a verifier is configured.
// The failed-message console is under /console/ (console.go, decision
// 0028): with a verifier it takes an admin JWT (a bearer token, or its login
// page's cookie), without one it answers loopback addresses only.
func (s *Service) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		checks, ok := s.readiness(ctx)
		status := http.StatusOK
		if !ok {
			status = http.StatusServiceUnavailable
		}
		writeJSON(w, status, map[string]any{"ready": ok, "checks": checks})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{Registry: s.registry}))
	s.mountConsole(mux)
	for _, b := range s.specs {
		for _, e := range b.parts.Endpoints {
			mux.Handle(e.Pattern, e.Handler)
		}
	}
	return mux
}

// readiness runs every check; each maps to "ok" or its error.
func (s *Service) readiness(ctx context.Context) (map[string]string, bool) {
	checks := map[string]string{}
	ok := true
	record := func(name string, err error) {
		if err != nil {
			checks[name] = err.Error()
			ok = false
			return
		}
		checks[name] = "ok"
	}
	if s.router.IsRunning() && !s.router.IsClosed() {
		record("router", nil)
	} else {
		record("router", errNotRunning)
	}
	if p, isPinger := s.broker.(broker.Pinger); isPinger {
		record("broker", p.Ping(ctx))
	}
	if s.db != nil {
		record("database", s.db.Ping(ctx))
	}
	return checks, ok
}

var errNotRunning = errors.New("not running")

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
