package app

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eventpipe/eventpipe/app/auth"
	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/migrations"
)

//go:embed consoleui/console.html
var consoleFS embed.FS

var consoleTemplates = template.Must(template.New("console").Funcs(template.FuncMap{
	"time": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
}).ParseFS(consoleFS, "consoleui/console.html"))

// consoleCookie holds the admin JWT of a console signed in through its login
// page.
const consoleCookie = "eventpipe_console"

// consolePeekMax is how many dead letters a console page reads of a DLQ.
const consolePeekMax = 500

// console is the failed-message console served at /console/ on the admin
// address (decision 0028): server-rendered pages with no external asset,
// built from the broker's queue counts (broker.QueueStatter) and read-only
// peek (broker.Peeker) and the dead-letter redrive.
type console struct {
	s    *Service
	jobs *consoleJobs
}

// consolePage is what every page template gets.
type consolePage struct {
	Title, Broker, Principal, Nonce string
}

// consoleHandler mounts the console on mux.
func (s *Service) mountConsole(mux *http.ServeMux) {
	s.consoleJobs = newConsoleJobs(s.logger)
	c := console{s: s, jobs: s.consoleJobs}
	mux.HandleFunc("GET /console/login", c.loginPage)
	mux.HandleFunc("POST /console/login", c.login)
	mux.Handle("GET /console/{$}", c.auth(c.queuesPage))
	mux.Handle("GET /console/queues.json", c.auth(c.queuesJSON))
	mux.Handle("GET /console/dlq", c.auth(c.dlqPage))
	mux.Handle("GET /console/message", c.auth(c.messagePage))
	mux.Handle("GET /console/trace", c.auth(c.tracePage))
	mux.Handle("POST /console/redrive", c.auth(c.redrive))
	mux.Handle("POST /console/edit", c.auth(c.edit))
	mux.Handle("GET /console/job", c.auth(c.jobPage))
	mux.Handle("GET /console/job.json", c.auth(c.jobJSON))
}

// auth lets a request through when it may use the console: with admin JWTs
// configured, a verified token with the admin role from the Authorization
// header or the login cookie (a page without one goes to the login page);
// without, only from a loopback address. A POST must come from the console's
// own origin (Origin, else Sec-Fetch-Site): a cookie is sent with a
// cross-site form too.
func (c console) auth(next func(http.ResponseWriter, *http.Request, string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setConsoleHeaders(w)
		if r.Method == http.MethodPost && !sameOrigin(r) {
			c.s.logger.Warn("console: cross-origin request refused", slog.String("path", r.URL.Path), slog.String("origin", r.Header.Get("Origin")))
			http.Error(w, "cross-origin request refused", http.StatusForbidden)
			return
		}
		v := c.s.verifier
		if v == nil {
			if !loopback(r.RemoteAddr) {
				http.Error(w, "the console is open only on loopback while admin.token_* configure no JWT verification", http.StatusForbidden)
				return
			}
			next(w, r, "loopback")
			return
		}
		p, err := v.Authenticate(r)
		if errors.Is(err, auth.ErrNoToken) {
			if ck, cerr := r.Cookie(consoleCookie); cerr == nil {
				p, err = v.Verify(ck.Value)
			}
		}
		if errors.Is(err, auth.ErrNoToken) && r.Method == http.MethodGet && !strings.HasSuffix(r.URL.Path, ".json") {
			http.Redirect(w, r, "/console/login", http.StatusSeeOther)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		if !p.HasRole("admin") {
			http.Error(w, "the console takes the admin role", http.StatusForbidden)
			return
		}
		next(w, r, p.Subject)
	})
}

func setConsoleHeaders(w http.ResponseWriter) {
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "same-origin")
	w.Header().Set("Cache-Control", "no-store")
}

// sameOrigin reports whether a state-changing request comes from a page of
// this origin.
func sameOrigin(r *http.Request) bool {
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		return err == nil && u.Host == r.Host
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return true
	case "":
		// Neither header: not a browser (curl with a bearer token).
		return r.Header.Get("Authorization") != ""
	}
	return false
}

func loopback(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (c console) page(title, principal string) consolePage {
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	return consolePage{Title: title, Broker: c.s.cfg.Broker.Kind, Principal: principal, Nonce: base64.StdEncoding.EncodeToString(nonce)}
}

func (c console) render(w http.ResponseWriter, status int, name string, p consolePage, data map[string]any) {
	data["Title"], data["Broker"], data["Principal"], data["Nonce"] = p.Title, p.Broker, p.Principal, p.Nonce
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; script-src 'nonce-"+p.Nonce+"'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	w.WriteHeader(status)
	if err := consoleTemplates.ExecuteTemplate(w, name, data); err != nil {
		c.s.logger.Error("console: render", slog.String("page", name), slog.Any("error", err))
	}
}

// unavailable says why this broker has no console.
func (c console) unavailable(w http.ResponseWriter, principal string) bool {
	_, counts := c.s.broker.(broker.QueueStatter)
	_, peeks := c.s.broker.(broker.Peeker)
	if counts && peeks {
		return false
	}
	c.render(w, http.StatusNotImplemented, "unavailable", c.page("Not available", principal), map[string]any{
		"Why": "The " + c.s.cfg.Broker.Kind + " broker keeps its queues inside this process and cannot count or show them without taking them: " +
			"the console needs broker.kind rabbitmq, sqs or postgres.",
	})
	return true
}

func (c console) loginPage(w http.ResponseWriter, _ *http.Request) {
	setConsoleHeaders(w)
	c.render(w, http.StatusOK, "login", c.page("Sign in", "not signed in"), map[string]any{})
}

// login checks a pasted token and keeps it in an HttpOnly, SameSite=Strict
// cookie scoped to /console/ that expires with the token.
func (c console) login(w http.ResponseWriter, r *http.Request) {
	setConsoleHeaders(w)
	if !sameOrigin(r) {
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
		return
	}
	if c.s.verifier == nil {
		http.Redirect(w, r, "/console/", http.StatusSeeOther)
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	p, err := c.s.verifier.Verify(token)
	if err == nil && !p.HasRole("admin") {
		err = errors.New("the token has no admin role")
	}
	if err != nil {
		c.s.logger.Warn("console: sign-in refused", slog.Any("error", err))
		c.render(w, http.StatusUnauthorized, "login", c.page("Sign in", "not signed in"), map[string]any{"Error": err.Error()})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: consoleCookie, Value: token, Path: "/console/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode, Expires: p.ExpiresAt})
	c.s.logger.Info("console: signed in", slog.String("principal", p.Subject))
	http.Redirect(w, r, "/console/", http.StatusSeeOther)
}

// queueRow is one line of the queues page.
type queueRow struct {
	Name     string `json:"name"`
	Depth    int64  `json:"depth"`
	InFlight string `json:"in_flight"`
	Oldest   string `json:"oldest"`
	DLQ      string `json:"dlq,omitempty"`
	DLQDepth int64  `json:"dlq_depth"`
	Note     string `json:"note,omitempty"`
}

func (c console) queueRows(ctx context.Context) []queueRow {
	stats := c.s.counts.get(ctx)
	dlqs := map[string]bool{}
	for _, q := range c.s.top.AllQueues() {
		if q.DeadLetter != nil {
			dlqs[q.DeadLetter.Queue] = true
		}
	}
	var rows []queueRow
	for _, q := range c.s.top.AllQueues() {
		if dlqs[q.Name] {
			continue // shown next to its source
		}
		s := stats[q.Name]
		row := queueRow{Name: q.Name, Depth: s.Ready + s.Delayed, InFlight: "unknown", Oldest: "—", Note: s.Note}
		if s.Err != nil {
			row.Note = s.Err.Error()
		}
		if s.InFlightKnown {
			row.InFlight = fmt.Sprint(s.InFlight)
		}
		if s.OldestAge > 0 {
			row.Oldest = s.OldestAge.Round(time.Second).String()
		}
		if d := q.DeadLetter; d != nil {
			row.DLQ = d.Queue
			row.DLQDepth = stats[d.Queue].Total()
		}
		rows = append(rows, row)
	}
	return rows
}

func (c console) queuesPage(w http.ResponseWriter, r *http.Request, principal string) {
	if c.unavailable(w, principal) {
		return
	}
	c.render(w, http.StatusOK, "queues", c.page("Queues", principal), map[string]any{
		"Queues": c.queueRows(r.Context()), "Updated": time.Now().UTC().Format(time.TimeOnly),
	})
}

func (c console) queuesJSON(w http.ResponseWriter, r *http.Request, _ string) {
	writeJSON(w, http.StatusOK, map[string]any{"queues": c.queueRows(r.Context()), "updated": time.Now().UTC().Format(time.TimeOnly)})
}

// dlqOf returns the form's queue when it is a dead-letter queue of the
// enabled specs; the console acts on no other queue.
func (c console) dlqOf(r *http.Request) (string, error) {
	q := r.FormValue("queue")
	for _, src := range c.s.top.AllQueues() {
		if src.DeadLetter != nil && src.DeadLetter.Queue == q {
			return q, nil
		}
	}
	return "", fmt.Errorf("%q is not a dead-letter queue of the enabled specs", q)
}

// peekOf reads the dead letters of the page's queue for dlqPage and
// messagePage; false when it answered the request itself (console off, not
// a dead-letter queue, the broker refused the peek).
func (c console) peekOf(w http.ResponseWriter, r *http.Request, principal string) (string, DeadLetterPeek, bool) {
	if c.unavailable(w, principal) {
		return "", DeadLetterPeek{}, false
	}
	dlq, err := c.dlqOf(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return "", DeadLetterPeek{}, false
	}
	peek, err := PeekDeadLetters(r.Context(), c.s.broker, dlq, consolePeekMax)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return "", DeadLetterPeek{}, false
	}
	return dlq, peek, true
}

func (c console) dlqPage(w http.ResponseWriter, r *http.Request, principal string) {
	dlq, peek, ok := c.peekOf(w, r, principal)
	if !ok {
		return
	}
	c.render(w, http.StatusOK, "dlq", c.page(dlq, principal), map[string]any{
		"Queue": dlq, "Letters": peek.Letters, "Groups": GroupDeadLetters(peek.Letters), "Complete": peek.Complete, "Effects": peek.Effects,
	})
}

func (c console) messagePage(w http.ResponseWriter, r *http.Request, principal string) {
	dlq, peek, ok := c.peekOf(w, r, principal)
	if !ok {
		return
	}
	id := r.FormValue("id")
	i := slices.IndexFunc(peek.Letters, func(v DeadLetterView) bool { return v.ID == id })
	if i < 0 {
		http.Error(w, fmt.Sprintf("no dead letter %q among the first %d of %s", id, consolePeekMax, dlq), http.StatusNotFound)
		return
	}
	c.render(w, http.StatusOK, "message", c.page(id, principal), map[string]any{"Queue": dlq, "Letter": peek.Letters[i]})
}

// redrive runs the redrive forms: mode all (a selection, one message or a
// group), canary (one of a group first, then the rest when it does not come
// back), dry-run, or discard, at most rate dead letters a second when the
// form says. A discard and a group redrive show a confirmation first. A dry
// run answers at once; the others run as a job (consoleJobs), and the
// browser goes to its page.
func (c console) redrive(w http.ResponseWriter, r *http.Request, principal string) {
	if c.unavailable(w, principal) {
		return
	}
	dlq, err := c.dlqOf(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	_ = r.ParseForm()
	ids, group, mode := r.PostForm["id"], r.PostFormValue("group"), r.PostFormValue("mode")
	for _, id := range ids {
		if id == "" || len(id) > 256 || strings.ContainsAny(id, "\x00\r\n") {
			http.Error(w, fmt.Sprintf("invalid message id %q", id), http.StatusBadRequest)
			return
		}
	}
	if len(ids) == 0 && group == "" {
		http.Error(w, "select dead letters or a group", http.StatusBadRequest)
		return
	}
	if len(group) > 400 {
		http.Error(w, "invalid group", http.StatusBadRequest)
		return
	}
	opts := RedriveOptions{IDs: ids, Group: group, Idle: 3 * time.Second, Principal: principal}
	if v := strings.TrimSpace(r.PostFormValue("rate")); v != "" {
		rate, err := strconv.ParseFloat(v, 64)
		if err != nil || rate < 0 || rate > 1e6 || math.IsNaN(rate) {
			http.Error(w, fmt.Sprintf("invalid rate %q: dead letters per second, 0 for no cap", v), http.StatusBadRequest)
			return
		}
		opts.Rate = rate
	}
	verb := "redrive"
	switch mode {
	case "all":
	case "canary":
		opts.Canary, verb = true, "redrive (one first)"
	case "dry-run":
		opts.DryRun, verb = true, "dry run"
	case "discard":
		opts.Discard, verb = true, "discard"
	default:
		http.Error(w, fmt.Sprintf("unknown mode %q", mode), http.StatusBadRequest)
		return
	}
	if (opts.Discard || group != "" && !opts.DryRun) && r.PostFormValue("confirm") != "yes" {
		what := fmt.Sprintf("%s %d dead letter(s) of %s", verb, len(ids), dlq)
		if group != "" {
			what = fmt.Sprintf("%s every dead letter of group %s in %s", verb, group, dlq)
		}
		if opts.Discard {
			what += ": they are deleted, with no copy anywhere"
		}
		c.render(w, http.StatusOK, "confirm", c.page("Confirm", principal), map[string]any{
			"What": what + ".", "Verb": verb, "Action": "/console/redrive", "Form": r.PostForm, "Queue": dlq,
		})
		return
	}
	if opts.DryRun {
		c.dryRun(w, r, principal, dlq, opts)
		return
	}
	c.startJob(w, r, principal, dlq, verb, opts)
}

// edit sends a copy of one dead letter with an edited body, validated by
// the route of the queue it goes to.
func (c console) edit(w http.ResponseWriter, r *http.Request, principal string) {
	if c.unavailable(w, principal) {
		return
	}
	dlq, err := c.dlqOf(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id, body := r.PostFormValue("id"), r.PostFormValue("body")
	if id == "" || len(body) > broker.MaxPayloadBytes {
		http.Error(w, "an id and a body of at most 1 MiB", http.StatusBadRequest)
		return
	}
	c.startJob(w, r, principal, dlq, "edit and redrive", RedriveOptions{
		IDs: []string{id}, Idle: 3 * time.Second, Principal: principal,
		Edits:    map[string][]byte{id: []byte(body)},
		Validate: c.validate,
	})
}

// validate runs the body validation of the route that consumes queue.
func (c console) validate(queue string, body []byte) error {
	rt, err := c.s.routes.ByQueue(queue)
	if err != nil {
		return fmt.Errorf("no route consumes %s here, so an edit cannot be checked: %w", queue, err)
	}
	if rt.Validate == nil {
		return nil
	}
	return rt.Validate(body)
}

// dryRun answers a dry run at once: it only peeks.
func (c console) dryRun(w http.ResponseWriter, r *http.Request, principal, dlq string, opts RedriveOptions) {
	const verb = "dry run"
	done, err := Redrive(r.Context(), c.s.broker, c.s.publisher, dlq, opts)
	log := c.s.logger.With(slog.String("principal", principal), slog.String("queue", dlq), slog.String("action", verb),
		slog.Any("ids", opts.IDs), slog.String("group", opts.Group), slog.Int("done", len(done)))
	status := http.StatusOK
	msg := ""
	if err != nil {
		log.Warn("console action failed", slog.Any("error", err))
		status, msg = http.StatusUnprocessableEntity, err.Error()
	} else {
		log.Info("console action")
	}
	summary := fmt.Sprintf("%d dead letter(s) would be redriven; nothing changed.", len(done))
	c.render(w, status, "result", c.page(verb, principal), map[string]any{"Verb": verb, "Queue": dlq, "Done": done, "Error": msg, "Summary": summary})
}

// traceHit is one place a trace id was found.
type traceHit struct {
	Where, ID, State string
	At               time.Time
}

// tracePage follows one trace id through the dead-letter queues (a peek of
// each), the outbox and the inbox (one query each, by the trace id in the
// outbox rows' metadata, then the markers of the messages found).
func (c console) tracePage(w http.ResponseWriter, r *http.Request, principal string) {
	traceID := strings.TrimSpace(r.FormValue("id"))
	data := map[string]any{"TraceID": traceID}
	if traceID != "" {
		hits, note := c.follow(r.Context(), traceID)
		data["Hits"], data["Note"] = hits, note
		c.s.logger.Info("console action", slog.String("principal", principal), slog.String("action", "trace"), slog.String("trace_id", traceID))
	}
	c.render(w, http.StatusOK, "trace", c.page("Trace", principal), data)
}

func (c console) follow(ctx context.Context, traceID string) ([]traceHit, string) {
	var hits []traceHit
	var ids []string
	notes := []string{"Work queues are not searched: reading them would take their messages."}
	for _, q := range c.s.top.AllQueues() {
		if q.DeadLetter == nil {
			continue
		}
		peek, err := PeekDeadLetters(ctx, c.s.broker, q.DeadLetter.Queue, consolePeekMax)
		if errors.Is(err, broker.ErrQueueNotFound) {
			continue // nothing was ever dead-lettered there (the broker makes it on first use)
		}
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s not read: %v.", q.DeadLetter.Queue, err))
			continue
		}
		for _, v := range peek.Letters {
			tid := v.Metadata["x-trace-id"]
			if v.History != nil && v.History.TraceID != "" {
				tid = v.History.TraceID
			}
			if tid == traceID {
				h := traceHit{Where: "dead-letter queue " + q.DeadLetter.Queue, ID: v.ID, State: "dead-lettered"}
				if v.History != nil {
					h.At, h.State = v.History.DeadLetteredAt, "dead-lettered: "+v.History.Reason
				}
				hits = append(hits, h)
				ids = append(ids, v.ID)
			}
		}
	}
	if c.s.db == nil {
		return hits, strings.Join(append(notes, "No database: no outbox or inbox to search."), " ")
	}
	err := func() error {
		q := c.s.db
		// The tables live in the configured schema, not on the search path.
		schema := migrations.SchemaOrDefault(c.s.cfg.Postgres.Schema)
		rows, err := q.Query(ctx, `SELECT event_id, topic, created_at, published_at, parked_at FROM `+pgx.Identifier{schema, "outbox"}.Sanitize()+`
			WHERE metadata->>'x-trace-id' = $1 ORDER BY id LIMIT 100`, traceID)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id, topic string
			var created time.Time
			var published, parked *time.Time
			if err := rows.Scan(&id, &topic, &created, &published, &parked); err != nil {
				return err
			}
			state := "waiting for the relay"
			switch {
			case parked != nil:
				state = "parked"
			case published != nil:
				state = "published " + published.UTC().Format(time.RFC3339)
			}
			hits = append(hits, traceHit{Where: "outbox → " + topic, ID: id, At: created, State: state})
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = q.Query(ctx, `SELECT consumer, message_id, processed_at FROM `+pgx.Identifier{schema, "processed_messages"}.Sanitize()+` WHERE message_id = ANY($1) ORDER BY processed_at`, ids)
		if err != nil {
			return err
		}
		marks, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (traceHit, error) {
			var h traceHit
			err := row.Scan(&h.Where, &h.ID, &h.At)
			h.Where, h.State = "inbox of "+h.Where, "processed"
			return h, err
		})
		hits = append(hits, marks...)
		return err
	}()
	if err != nil {
		notes = append(notes, fmt.Sprintf("outbox and inbox not searched: %v.", err))
	}
	return hits, strings.Join(notes, " ")
}

// consoleJobKeep is how many ended jobs the console remembers, so that their
// pages still show the result.
const consoleJobKeep = 100

// consoleJobResultsShown is the most dead letters a job's result lists.
const consoleJobResultsShown = 1000

// consoleJobs runs the console's redrives and discards in the service, not
// in the request that asked for them: a job goes on when the browser
// closes, its page follows it (consoleJobStatus, polled as JSON), and the
// same action asked for again while it runs is that job, not a second one.
// Run ends every job when the service shuts down.
type consoleJobs struct {
	logger *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	byID    map[string]*consoleJob
	running map[string]*consoleJob // by key
	ended   []string               // ids, oldest first
	stopped bool
}

func newConsoleJobs(logger *slog.Logger) *consoleJobs {
	ctx, cancel := context.WithCancel(context.Background())
	return &consoleJobs{logger: logger, ctx: ctx, cancel: cancel, byID: map[string]*consoleJob{}, running: map[string]*consoleJob{}}
}

// errShuttingDown refuses a job asked for while the service shuts down.
var errShuttingDown = errors.New("the service is shutting down: no new console action starts")

// start runs job unless a job of the same key is running, which it returns
// instead (started false).
func (j *consoleJobs) start(job *consoleJob, run func(ctx context.Context, job *consoleJob)) (_ *consoleJob, started bool, _ error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.stopped {
		return nil, false, errShuttingDown
	}
	if other, ok := j.running[job.key]; ok {
		return other, false, nil
	}
	j.byID[job.ID] = job
	j.running[job.key] = job
	j.wg.Add(1)
	go func() {
		defer j.wg.Done()
		run(j.ctx, job)
		j.mu.Lock()
		defer j.mu.Unlock()
		delete(j.running, job.key)
		j.ended = append(j.ended, job.ID)
		if len(j.ended) > consoleJobKeep {
			delete(j.byID, j.ended[0])
			j.ended = j.ended[1:]
		}
	}()
	return job, true, nil
}

func (j *consoleJobs) get(id string) *consoleJob {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.byID[id]
}

// Run waits for ctx to end (the service's shutdown, after the router has
// drained and before the broker closes), then cancels the running jobs and
// waits for them: each leaves what it did not move in the dead-letter queue
// and logs that it was cancelled.
func (j *consoleJobs) Run(ctx context.Context) error {
	<-ctx.Done()
	j.mu.Lock()
	j.stopped = true
	n := len(j.running)
	j.mu.Unlock()
	if n > 0 {
		j.logger.Warn("shutting down: cancelling the running console actions", slog.Int("jobs", n))
	}
	j.cancel()
	j.wg.Wait()
	return nil
}

// consoleJob is one console action that changes a dead-letter queue.
type consoleJob struct {
	ID, Verb, Queue, Principal, Group string
	IDs                               []string
	Started                           time.Time
	key                               string

	mu sync.Mutex
	// total is how many dead letters the action is expected to move (0:
	// not known yet); done and skipped are RedriveProgress's.
	total, done, skipped int
	results              []Redriven
	ended                time.Time
	err                  error
}

// consoleJobStatus is what the job page and /console/job.json show of a job.
type consoleJobStatus struct {
	ID    string `json:"id"`
	Verb  string `json:"verb"`
	Queue string `json:"queue"`
	// State is running, done, failed or cancelled (the service shut down).
	State string `json:"state"`
	Done  int    `json:"done"`
	// Total is the number of dead letters selected when the job started;
	// 0 while it is counted.
	Total   int `json:"total"`
	Skipped int `json:"skipped"`
	// RatePerS is dead letters moved per second since the start.
	RatePerS float64 `json:"rate_per_s"`
	// Errors is how many dead letters failed: a redrive stops at the first,
	// which Error describes, and leaves the rest in the queue.
	Errors   int     `json:"errors"`
	Error    string  `json:"error,omitempty"`
	ElapsedS float64 `json:"elapsed_s"`
	// Summary and Results (at most consoleJobResultsShown; More says how
	// many more) are set once the job has ended.
	Summary string     `json:"summary,omitempty"`
	Results []Redriven `json:"results,omitempty"`
	More    int        `json:"more,omitempty"`
}

func (job *consoleJob) progress(p RedriveProgress) {
	job.mu.Lock()
	defer job.mu.Unlock()
	job.done, job.skipped = p.Done, p.Skipped
	if len(job.results) < consoleJobResultsShown && p.Last.ID != "" {
		job.results = append(job.results, p.Last)
	}
}

func (job *consoleJob) status() consoleJobStatus {
	job.mu.Lock()
	defer job.mu.Unlock()
	st := consoleJobStatus{ID: job.ID, Verb: job.Verb, Queue: job.Queue, State: "running", Done: job.done, Total: job.total, Skipped: job.skipped}
	end := time.Now()
	if !job.ended.IsZero() {
		end = job.ended
	}
	elapsed := end.Sub(job.Started)
	st.ElapsedS = elapsed.Seconds()
	if elapsed > 0 {
		st.RatePerS = float64(job.done) / elapsed.Seconds()
	}
	if job.ended.IsZero() {
		return st
	}
	switch {
	case errors.Is(job.err, context.Canceled):
		st.State, st.Error = "cancelled", "the service shut down: the rest were left in the queue"
	case job.err != nil:
		st.State, st.Errors, st.Error = "failed", 1, job.err.Error()
	default:
		st.State = "done"
	}
	st.Summary = fmt.Sprintf("%d dead letter(s): %s done in %s.", job.done, job.Verb, elapsed.Round(time.Millisecond))
	st.Results = job.results
	listed := 0
	for _, r := range job.results {
		listed += int(r.Count())
	}
	st.More = max(job.done-listed, 0)
	return st
}

// finish records how the job ended: done is Redrive's result.
func (job *consoleJob) finish(done []Redriven, err error) {
	job.mu.Lock()
	defer job.mu.Unlock()
	job.ended, job.err = time.Now(), err
	var n int64
	for _, r := range done {
		n += r.Count()
	}
	job.done = int(n)
	job.results = done[:min(len(done), consoleJobResultsShown)]
}

// jobKey identifies an action: the same queue, verb, selection and edit.
func jobKey(dlq, verb string, opts RedriveOptions) string {
	ids := slices.Clone(opts.IDs)
	slices.Sort(ids)
	h := sha256.New()
	for _, part := range append([]string{dlq, verb, opts.Group}, ids...) {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	for _, id := range slices.Sorted(maps.Keys(opts.Edits)) {
		h.Write([]byte(id))
		h.Write(opts.Edits[id])
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// startJob starts the action as a job (or finds it running) and sends the
// browser to its page.
func (c console) startJob(w http.ResponseWriter, r *http.Request, principal, dlq, verb string, opts RedriveOptions) {
	id := make([]byte, 9)
	_, _ = rand.Read(id)
	job := &consoleJob{ID: base64.RawURLEncoding.EncodeToString(id), Verb: verb, Queue: dlq, Principal: principal,
		Group: opts.Group, IDs: opts.IDs, Started: time.Now(), key: jobKey(dlq, verb, opts)}
	log := c.s.logger.With(slog.String("principal", principal), slog.String("queue", dlq), slog.String("action", verb),
		slog.Any("ids", opts.IDs), slog.String("group", opts.Group))
	job, started, err := c.jobs.start(job, func(ctx context.Context, job *consoleJob) { c.runJob(ctx, job, opts, log) })
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	if !started {
		log.Info("console action already running: showing it", slog.String("job", job.ID))
	}
	http.Redirect(w, r, "/console/job?id="+url.QueryEscape(job.ID), http.StatusSeeOther)
}

// runJob counts what the action selects, runs it and logs how it ended.
func (c console) runJob(ctx context.Context, job *consoleJob, opts RedriveOptions, log *slog.Logger) {
	total := len(opts.IDs)
	if total == 0 {
		if peek, err := PeekDeadLetters(ctx, c.s.broker, job.Queue, 10000); err == nil {
			for _, v := range peek.Letters {
				if selected(v, opts, nil) {
					total++
				}
			}
		}
	}
	job.mu.Lock()
	job.total = total
	job.mu.Unlock()
	log = log.With(slog.String("job", job.ID))
	log.Info("console action started", slog.Int("selected", total))
	opts.Progress = job.progress
	done, err := Redrive(ctx, c.s.broker, c.s.publisher, job.Queue, opts)
	job.finish(done, err)
	st := job.status()
	log = log.With(slog.Int("done", st.Done), slog.Duration("took", time.Since(job.Started)))
	switch {
	case errors.Is(err, context.Canceled) && c.jobs.ctx.Err() != nil:
		log.Warn("console action cancelled by the shutdown; the rest stay in the queue")
	case err != nil:
		log.Warn("console action failed", slog.Any("error", err))
	default:
		log.Info("console action")
	}
}

// jobOf is the job the request names, or a 404.
func (c console) jobOf(w http.ResponseWriter, r *http.Request) *consoleJob {
	job := c.jobs.get(r.FormValue("id"))
	if job == nil {
		http.Error(w, "no such console action (the service remembers the last "+fmt.Sprint(consoleJobKeep)+" since it started)", http.StatusNotFound)
	}
	return job
}

func (c console) jobPage(w http.ResponseWriter, r *http.Request, principal string) {
	job := c.jobOf(w, r)
	if job == nil {
		return
	}
	st := job.status()
	c.render(w, http.StatusOK, "job", c.page(job.Verb, principal), map[string]any{
		"Job": st, "Group": job.Group, "By": job.Principal, "Started": job.Started, "Queue": job.Queue,
	})
}

func (c console) jobJSON(w http.ResponseWriter, r *http.Request, _ string) {
	if job := c.jobOf(w, r); job != nil {
		writeJSON(w, http.StatusOK, job.status())
	}
}
