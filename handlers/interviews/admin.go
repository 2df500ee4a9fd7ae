package interviews

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventpipe/eventpipe/app/auth"
	"github.com/eventpipe/eventpipe/app/dbtx"
	"github.com/eventpipe/eventpipe/app/outbox"
)

// ReportRetryAPI is the operator's retry of a FAILED report over HTTP, on
// the admin server (what `eventpipe interviews report retry` does):
//
//	POST /interviews/reports/{interviewId}/retry
//	Authorization: Bearer <JWT with roles ["admin"]>
//
//	200 {"interviewId", "attempts", "lastError"}   the report as it was; a new report.generate is in the outbox
//	401 no or invalid token · 403 not an admin · 404 not an interview id · 409 the report is not FAILED
//
// Errors are {"error": "…"}; nothing of the database is shown.
type ReportRetryAPI struct {
	DB     *pgxpool.Pool
	Store  Store
	Outbox outbox.Writer
	Auth   Authenticator
	Logger *slog.Logger
}

// ReportRetryPath is where ReportRetryAPI is mounted on the admin server.
const ReportRetryPath = "/interviews/reports/"

func (a *ReportRetryAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, err := a.Auth.Authenticate(r)
	if err != nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="eventpipe"`)
		refuse(w, http.StatusUnauthorized, err.Error())
		return
	}
	if !p.HasRole(auth.AdminRole) {
		refuse(w, http.StatusForbidden, "the admin role is required")
		return
	}
	id, ok := strings.CutSuffix(strings.TrimPrefix(r.URL.Path, ReportRetryPath), "/retry")
	if !ok || !IsObjectID(id) {
		refuse(w, http.StatusNotFound, "not found: POST "+ReportRetryPath+"{interviewId}/retry")
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		refuse(w, http.StatusMethodNotAllowed, "use POST")
		return
	}
	var was Report
	err = dbtx.InTx(r.Context(), a.DB, func(ctx context.Context, _ pgx.Tx) error {
		was, err = RetryReport(ctx, a.Store, a.Outbox, ReportGenerateQueue, id)
		return err
	})
	switch {
	case errors.Is(err, ErrReportNotFailed):
		refuse(w, http.StatusConflict, "the report is not FAILED: "+strings.TrimPrefix(err.Error(), "retry report of interview "+id+": "))
	case err != nil:
		a.Logger.ErrorContext(r.Context(), "report retry failed", slog.String("interview_id", id), slog.Any("error", err))
		refuse(w, http.StatusInternalServerError, "the retry failed; see the service's log")
	default:
		a.Logger.InfoContext(r.Context(), "report retry requested", slog.String("interview_id", id),
			slog.String("actor", p.Subject), slog.Int("attempts_before", was.AttemptCount))
		writeJSON(w, http.StatusOK, map[string]any{"interviewId": id, "attempts": was.AttemptCount, "lastError": was.LastError})
	}
}
