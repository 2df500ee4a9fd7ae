package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/handlers/joinlink"
)

// sweepRecord is one join-link sweep log line of a serve process.
type sweepRecord struct {
	process, outcome, trigger, tick string
	found                           int
	at                              time.Time
}

// sweepRecords reads the sweep lines of out (JSON logs): "done" and
// "skipped" sweeps, and "found" lines (a sweep that found sessions and is
// working on them).
func sweepRecords(process string, out *lines) []sweepRecord {
	var recs []sweepRecord
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var l struct {
			Time    time.Time `json:"time"`
			Msg     string    `json:"msg"`
			Trigger string    `json:"trigger"`
			Tick    string    `json:"tick"`
			Found   int       `json:"found"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		r := sweepRecord{process: process, trigger: l.Trigger, tick: l.Tick, found: l.Found, at: l.Time}
		switch {
		case strings.HasPrefix(l.Msg, "join-link fallback sweep done"):
			r.outcome = "done"
		case strings.HasPrefix(l.Msg, "join-link fallback sweep skipped"):
			r.outcome = "skipped"
		case l.Msg == "join-link fallback sweep found sessions":
			r.outcome = "found"
		default:
			continue
		}
		recs = append(recs, r)
	}
	return recs
}

// Two `eventpipe serve` processes (the real binary) on one PostgreSQL schema
// and the PostgreSQL broker, with the join-link fallback sweep every 2 s:
// both see every tick and exactly one of them sweeps it. Then the process
// that holds the sweep lock — stuck in a bulkRegister call that does not
// answer — is killed with SIGKILL, and the other takes over: the lock went
// with the dead process's connection, and the survivor sweeps the next ticks.
func TestJoinLinkOneSweeperAcrossServeProcesses(t *testing.T) {
	t.Parallel()
	pool, schema := dbtest.Schema(t)
	store, err := joinlink.NewPostgres(pool, schema)
	require.NoError(t, err)

	// bulkRegister: answers at once, except for the session stuck, whose
	// call hangs until its caller goes away.
	var stuck atomic.Int64
	calls := make(chan int64, 16)
	bulk := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			SessionID int64 `json:"sessionId"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		calls <- req.SessionID
		if req.SessionID == stuck.Load() {
			<-r.Context().Done()
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"jobId":"job-%d","total":1}`, req.SessionID)
	}))
	t.Cleanup(bulk.Close)

	env := []string{
		"EVENTPIPE_BROKER=postgres", "EVENTPIPE_POSTGRES_DSN=" + testenv.PostgresDSN(t), "EVENTPIPE_POSTGRES_SCHEMA=" + schema,
		"EVENTPIPE_ADMIN_ADDR=127.0.0.1:0", "EVENTPIPE_LOG_FORMAT=json",
		"EVENTPIPE_JOINLINK_ENABLED=true", "EVENTPIPE_JOINLINK_ENABLE_FALLBACK_CRON=true",
		"EVENTPIPE_JOINLINK_FALLBACK_SCHEDULE=@every 2s",
		"EVENTPIPE_JOINLINK_BULK_REGISTER_URL=" + bulk.URL, "EVENTPIPE_JOINLINK_BULK_REGISTER_TIMEOUT=2m",
	}
	type serve struct {
		cmd  *exec.Cmd
		out  *lines
		done <-chan error
	}
	procs := map[string]*serve{}
	for _, name := range []string{"a", "b"} {
		cmd, out, done := start(t, env, "serve")
		procs[name] = &serve{cmd, out, done}
	}
	records := func() []sweepRecord {
		var all []sweepRecord
		for name, p := range procs {
			all = append(all, sweepRecords(name, p.out)...)
		}
		return all
	}
	// byTick: each scheduled tick's outcome per process.
	byTick := func() map[string]map[string]string {
		ticks := map[string]map[string]string{}
		for _, r := range records() {
			if r.trigger != "schedule" || r.outcome == "found" {
				continue
			}
			if ticks[r.tick] == nil {
				ticks[r.tick] = map[string]string{}
			}
			assert.Empty(t, ticks[r.tick][r.process], "process %s logs tick %s once", r.process, r.tick)
			ticks[r.tick][r.process] = r.outcome
		}
		return ticks
	}
	sweeps := func(ticks map[string]string) (n int) {
		for _, outcome := range ticks {
			if outcome == "done" {
				n++
			}
		}
		return n
	}
	dump := func() string {
		var b strings.Builder
		for name, p := range procs {
			fmt.Fprintf(&b, "--- %s\n%s", name, p.out.String())
		}
		return b.String()
	}
	wait := func(what string, within time.Duration, cond func() bool) {
		t.Helper()
		if !assert.Eventually(t, cond, within, 100*time.Millisecond, what) {
			require.FailNow(t, what, "logs:\n%s", dump())
		}
	}

	wait("three ticks seen by both processes", 40*time.Second, func() bool {
		n := 0
		for _, p := range byTick() {
			if len(p) == 2 {
				n++
			}
		}
		return n >= 3
	})
	for tick, p := range byTick() {
		assert.Equal(t, 1, sweeps(p), "tick %s: one process sweeps it: %v", tick, p)
	}

	// A session overdue whose bulkRegister hangs: the process whose sweep
	// takes it holds the lock until it dies.
	now := time.Now()
	id, err := store.CreateSession(context.Background(), now)
	require.NoError(t, err)
	stuck.Store(id)
	at := now.Add(-time.Hour)
	_, err = store.SetLinkGeneration(context.Background(), id, &at, 7, now, now.Add(-joinlink.StaleAfter))
	require.NoError(t, err)
	for called, deadline := false, time.After(15*time.Second); !called; {
		select {
		case got := <-calls:
			called = got == id
		case <-deadline:
			require.FailNow(t, "no sweep called bulkRegister for the overdue session", "logs:\n%s", dump())
		}
	}
	holder := ""
	wait("the process sweeping the session is known", 5*time.Second, func() bool {
		for _, r := range records() {
			if r.outcome == "found" && r.found == 1 {
				holder = r.process
			}
		}
		return holder != ""
	})
	survivor := map[string]string{"a": "b", "b": "a"}[holder]
	skipsBefore := 0
	for _, r := range records() {
		if r.process == survivor && r.outcome == "skipped" && r.trigger == "schedule" {
			skipsBefore++
		}
	}
	wait("the survivor skips a tick while the lock is held", 10*time.Second, func() bool {
		n := 0
		for _, r := range records() {
			if r.process == survivor && r.outcome == "skipped" && r.trigger == "schedule" {
				n++
			}
		}
		return n > skipsBefore
	})

	killedAt := time.Now()
	require.NoError(t, procs[holder].cmd.Process.Kill())
	<-procs[holder].done
	wait("the survivor sweeps two ticks after the kill", 15*time.Second, func() bool {
		n := 0
		for _, r := range records() {
			if r.process == survivor && r.outcome == "done" && r.trigger == "schedule" && r.at.After(killedAt) {
				n++
			}
		}
		return n >= 2
	})
	for tick, p := range byTick() {
		assert.LessOrEqual(t, sweeps(p), 1, "tick %s: %v", tick, p)
	}
	sess, err := store.Session(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, joinlink.InProgress, sess.Status, "the killed sweep's session waits for the stale window (30 min), not swept twice")
	assert.Equal(t, int64(-1), sess.UpdatedBy, "claimed by the sweep: the system actor")
}
