package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/migrations"
)

// The services, all on loopback. PostgreSQL and RabbitMQ are the machine's
// (testenv's addresses); the SQS emulator is a private fauxqs on a port of
// its own unless CHAOS_SQS_ENDPOINT names one: eventpipe has no queue
// prefix (no sqs.queue_prefix key), so its spec queues (domain-events,
// booking-session-events.fifo) would be shared with every other test on
// the common emulator.
const (
	rabbitMgmtURL = "http://127.0.0.1:15672"
	sqsRegion     = testenv.SQSRegion
)

// scope is what one flow run owns on the services: a migrated schema (the
// stores, the inbox, the outbox and the Postgres broker's queue tables, with
// the harness's audit table) and, on RabbitMQ, a virtual host.
type scope struct {
	kind   string
	schema string
	// pgDirect is the DSN the harness itself uses (never through a proxy).
	pgDirect string
	pool     *pgxpool.Pool
	// amqpDirect is the AMQP URL into the run's vhost (RabbitMQ only).
	vhost      string
	amqpDirect string
	// sqsEndpoint is the emulator's URL (SQS only).
	sqsEndpoint string
}

func newScope(t *testing.T, b brokerRun, flow, sqsEndpoint string, keep bool) *scope {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kind := b.kind
	id := strings.ToLower(watermill.NewShortUUID())
	s := &scope{kind: kind, schema: "chaos_" + flow + "_" + id, pgDirect: testenv.PostgresDSN(t), sqsEndpoint: sqsEndpoint}
	cfg, err := pgxpool.ParseConfig(s.pgDirect)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8
	if s.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer s.pool.Close()
		if keep {
			t.Logf("kept schema %s (CHAOS_KEEP)", s.schema)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := s.pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{s.schema}.Sanitize()+` CASCADE`); err != nil {
			t.Logf("drop schema %s: %v", s.schema, err)
		}
	})
	if _, err := migrations.Up(ctx, s.pool, s.schema); err != nil {
		t.Fatalf("migrate %s: %v", s.schema, err)
	}
	s.installAudit(t, ctx)
	if kind == "rabbitmq" {
		// A vhost per flow run, named after the CHAOS_BROKERS entry
		// (chaos-rabbitmq-quorum-…): the variants never share a queue.
		s.vhost = "chaos-" + b.name + "-" + flow + "-" + id
		createVhost(t, s.vhost)
		t.Cleanup(func() {
			if keep {
				t.Logf("kept vhost %s (CHAOS_KEEP)", s.vhost)
				return
			}
			deleteVhost(t, s.vhost)
		})
		u, err := url.Parse(testenv.RabbitMQURL(t))
		if err != nil {
			t.Fatal(err)
		}
		u.Path, u.RawPath = "/"+s.vhost, ""
		s.amqpDirect = u.String()
	}
	return s
}

func (s *scope) table(name string) string { return pgx.Identifier{s.schema, name}.Sanitize() }

// installAudit adds the harness's instrument: every row an effect
// transaction proposes for an effect table (review_queue,
// dispute_reminders, booking_session_events) is recorded in chaos_effects
// by a BEFORE INSERT trigger, in that transaction. The effect tables absorb
// a second insert of an event id (ON CONFLICT DO NOTHING), so counting their
// rows cannot show an effect applied twice; the audit row commits only with
// the effect's transaction, so two audit rows of one event id are two
// committed applications — the inbox's dedupe failed.
func (s *scope) installAudit(t *testing.T, ctx context.Context) {
	t.Helper()
	fn := pgx.Identifier{s.schema, "chaos_effect"}.Sanitize()
	stmts := []string{
		`CREATE TABLE ` + s.table("chaos_effects") + ` (
			id       bigserial   PRIMARY KEY,
			event_id text        NOT NULL,
			tbl      text        NOT NULL,
			at       timestamptz NOT NULL DEFAULT clock_timestamp(),
			backend  integer     NOT NULL DEFAULT pg_backend_pid())`,
		`CREATE INDEX ON ` + s.table("chaos_effects") + ` (event_id)`,
		`CREATE INDEX ON ` + s.table("chaos_effects") + ` (at)`,
		`CREATE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO ` + s.table("chaos_effects") + ` (event_id, tbl) VALUES (NEW.event_id, TG_TABLE_NAME);
			RETURN NEW;
		END $$`,
	}
	for _, tbl := range []string{"review_queue", "dispute_reminders", "booking_session_events"} {
		stmts = append(stmts, `CREATE TRIGGER chaos_effect BEFORE INSERT ON `+s.table(tbl)+` FOR EACH ROW EXECUTE FUNCTION `+fn+`()`)
	}
	for _, q := range stmts {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			t.Fatalf("audit: %s: %v", q, err)
		}
	}
}

// --- RabbitMQ management API --------------------------------------------

func rabbitAPI(ctx context.Context, method, path string, body any) ([]byte, int, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, 0, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, rabbitMgmtURL+path, r)
	if err != nil {
		return nil, 0, err
	}
	req.SetBasicAuth("guest", "guest")
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 15 * time.Second}).Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(resp.Body)
	return out, resp.StatusCode, err
}

func createVhost(t *testing.T, vhost string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v := url.PathEscape(vhost)
	for _, call := range []struct {
		path string
		body any
	}{
		{"/api/vhosts/" + v, map[string]string{"description": "eventpipe chaos harness"}},
		{"/api/permissions/" + v + "/guest", map[string]string{"configure": ".*", "write": ".*", "read": ".*"}},
	} {
		out, code, err := rabbitAPI(ctx, http.MethodPut, call.path, call.body)
		if err != nil || code/100 != 2 {
			t.Fatalf("RabbitMQ management API PUT %s: %d %v %s (is the management plugin on? `make services` enables it)", call.path, code, err, out)
		}
	}
}

func deleteVhost(t *testing.T, vhost string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, code, err := rabbitAPI(ctx, http.MethodDelete, "/api/vhosts/"+url.PathEscape(vhost), nil); err != nil || code/100 != 2 {
		t.Logf("delete vhost %s: %d %v %s", vhost, code, err, out)
	}
}

// rabbitQueueDepth is a queue's ready + unacknowledged messages (-1 when the
// queue does not exist).
func rabbitQueueDepth(ctx context.Context, vhost, queue string) (int, error) {
	out, code, err := rabbitAPI(ctx, http.MethodGet, "/api/queues/"+url.PathEscape(vhost)+"/"+url.PathEscape(queue), nil)
	if err != nil {
		return 0, err
	}
	if code == http.StatusNotFound {
		return -1, nil
	}
	var q struct {
		Messages int `json:"messages"`
	}
	if err := json.Unmarshal(out, &q); err != nil {
		return 0, fmt.Errorf("queue %s: %d %s", queue, code, out)
	}
	return q.Messages, nil
}

// --- the SQS emulator ----------------------------------------------------

// sqsEmulator returns the endpoint of the emulator the SQS runs use: the
// one CHAOS_SQS_ENDPOINT names, else a private fauxqs that
// .ci/sqs-emulator starts on a free port and stops when the test ends.
func sqsEmulator(t *testing.T) string {
	t.Helper()
	if u := os.Getenv("CHAOS_SQS_ENDPOINT"); u != "" {
		return u
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
	_ = l.Close()
	script := filepath.Join(repoRoot(t), ".ci", "sqs-emulator")
	run := func(arg string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, script, arg)
		cmd.Env = append(os.Environ(), "EVENTPIPE_SQS_EMULATOR_PORT="+port, "EVENTPIPE_SQS_EMULATOR_HOST=127.0.0.1")
		return cmd.CombinedOutput()
	}
	out, err := run("start")
	if err != nil {
		t.Fatalf(".ci/sqs-emulator start on port %s: %v\n%s", port, err, out)
	}
	t.Cleanup(func() {
		if out, err := run("stop"); err != nil {
			t.Logf(".ci/sqs-emulator stop (port %s): %v\n%s", port, err, out)
		}
	})
	return "http://127.0.0.1:" + port
}

// --- broker restarts (CHAOS_BROKER_RESTART=1 only) -----------------------

func runCmd(ctx context.Context, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func portOpen(port string) bool {
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

func waitPort(ctx context.Context, port string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if portOpen(port) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return fmt.Errorf("port %s not open after %s", port, timeout)
}

// restartRabbitMQ stops and starts the RabbitMQ application (the node and
// its vhosts stay; every connection drops, durable queues survive).
func restartRabbitMQ(ctx context.Context, down time.Duration) error {
	if err := runCmd(ctx, "rabbitmqctl", "--quiet", "stop_app"); err != nil {
		return err
	}
	time.Sleep(down)
	if err := runCmd(ctx, "rabbitmqctl", "--quiet", "start_app"); err != nil {
		return err
	}
	return waitPort(ctx, "5672", 2*time.Minute)
}

func postgresCluster() (string, error) {
	entries, err := os.ReadDir("/etc/postgresql")
	if err != nil || len(entries) == 0 {
		return "", fmt.Errorf("no cluster under /etc/postgresql: %w", err)
	}
	return entries[0].Name(), nil
}

// restartPostgres crashes the cluster and starts it again: an immediate
// shutdown, as a power cut or an OOM kill, so the WAL not yet flushed is
// lost — what an asynchronous commit (the Postgres broker's claims and
// settlements, decision 0039) may lose — and every session ends, open
// transactions roll back, the restart replays the WAL.
func restartPostgres(ctx context.Context) error {
	v, err := postgresCluster()
	if err != nil {
		return err
	}
	if err := runCmd(ctx, "pg_ctlcluster", "--skip-systemctl-redirect", "--mode", "immediate", v, "main", "restart"); err != nil {
		return err
	}
	return waitPort(ctx, "5432", 2*time.Minute)
}

// ensureServices starts PostgreSQL and RabbitMQ again if a restart fault
// left one down: the harness always leaves the services running.
func ensureServices(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if !portOpen("5432") {
		if v, err := postgresCluster(); err == nil {
			if err := runCmd(ctx, "pg_ctlcluster", "--skip-systemctl-redirect", v, "main", "start"); err != nil {
				t.Errorf("PostgreSQL left down: %v", err)
			}
		}
	}
	if !portOpen("5672") {
		if err := runCmd(ctx, "rabbitmqctl", "--quiet", "start_app"); err != nil {
			t.Errorf("RabbitMQ left down: %v", err)
		}
	}
}

// rabbitQueueTypes lists the vhost's queues by type (classic, quorum, …).
func rabbitQueueTypes(ctx context.Context, vhost string) (map[string][]string, error) {
	out, code, err := rabbitAPI(ctx, http.MethodGet, "/api/queues/"+url.PathEscape(vhost)+"?columns=name,type", nil)
	if err != nil {
		return nil, err
	}
	var qs []struct {
		Name string `json:"name"`
		Type string `json:"type"`
	}
	if err := json.Unmarshal(out, &qs); err != nil {
		return nil, fmt.Errorf("queues of %s: %d %s", vhost, code, truncate(string(out), 200))
	}
	types := map[string][]string{}
	for _, q := range qs {
		types[q.Type] = append(types[q.Type], q.Name)
	}
	return types, nil
}

// queueTypes says which queue types the runs' serve processes declared,
// and whether that is what the variant asked for.
func queueTypes(ctx context.Context, b brokerRun, runs []*flowRun) string {
	var parts, wrong []string
	for _, r := range runs {
		types, err := rabbitQueueTypes(ctx, r.sc.vhost)
		if err != nil {
			parts = append(parts, r.flow+": "+err.Error())
			continue
		}
		var counts []string
		for _, typ := range slices.Sorted(maps.Keys(types)) {
			counts = append(counts, fmt.Sprintf("%s %d", typ, len(types[typ])))
			if b.queueType != "" && typ != b.queueType {
				wrong = append(wrong, types[typ]...)
			}
		}
		parts = append(parts, r.flow+": "+strings.Join(counts, ", "))
	}
	s := "queue types declared (management API): " + strings.Join(parts, "; ")
	if len(wrong) > 0 {
		slices.Sort(wrong)
		s += fmt.Sprintf("; NOT the variant asked for (EVENTPIPE_RABBITMQ_QUEUE_TYPE=%s): %d queues are not %s, e.g. %s — this build ignores the variable (no rabbitmq.queue_type key yet), so the run tested classic queues",
			b.queueType, len(wrong), b.queueType, strings.Join(wrong[:min(len(wrong), 4)], ", "))
	}
	return s
}
