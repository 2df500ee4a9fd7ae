package inbox

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// presence is a process's PostgreSQL session of its own, open for as long as
// the process holds leases: its backend pid and start time identify the
// holder in inbox_leases, and PostgreSQL ends the session when the process
// dies. Another worker that finds a lease whose holder's session is gone
// takes it over at once: a crashed worker's lease does not hold its message
// back for a TTL. A holder whose session only dropped (a cut connection, a
// database restart) opens a new one at its next renewal; until then its
// lease may be taken over — the work then runs twice and the marker, written
// with the answer, keeps the effect single.
type presence struct {
	cfg *pgx.ConnConfig

	mu      sync.Mutex
	conn    *pgx.Conn
	pid     int32
	started time.Time
}

// presenceTimeout bounds opening and checking the session.
const presenceTimeout = 5 * time.Second

// identity returns the session's pid and start time, opening the session
// when there is none or it was lost.
func (p *presence) identity(ctx context.Context) (int32, time.Time, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, presenceTimeout)
	defer cancel()
	if p.conn != nil && !p.conn.IsClosed() {
		if err := p.conn.Ping(ctx); err == nil {
			return p.pid, p.started, nil
		}
		_ = p.conn.Close(context.WithoutCancel(ctx))
		p.conn = nil
	}
	cfg := p.cfg.Copy()
	cfg.RuntimeParams["application_name"] = "eventpipe inbox lease holder"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("lease holder session: %w", err)
	}
	var pid int32
	var started time.Time
	if err := conn.QueryRow(ctx, `SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()`).Scan(&pid, &started); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return 0, time.Time{}, fmt.Errorf("lease holder session: %w", err)
	}
	p.conn, p.pid, p.started = conn, pid, started
	return pid, started, nil
}

// close ends the session (the leases it holds are then taken over at once).
func (p *presence) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), presenceTimeout)
		defer cancel()
		_ = p.conn.Close(ctx)
		p.conn = nil
	}
}
