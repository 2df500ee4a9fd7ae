package dbtx

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Acquirer hands out one pooled connection at a time: what a *pgxpool.Pool
// is to BeginPipelined.
type Acquirer interface {
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
}

// PipelinedTx is a pgx.Tx that spends fewer round trips than pgx's own
// (docs/decisions/0038-pipelined-transactions.md):
//
//   - BEGIN is not sent by BeginPipelined but in one pipeline (a pgx.Batch)
//     with the transaction's first statement or batch, so that a transaction
//     of one statement costs two round trips, not three; a transaction that
//     ran nothing commits or rolls back without any. Statements are prepared
//     and cached as pgx does for any statement.
//   - ExecAtCommit holds a statement back to send it with COMMIT, in the
//     same pipeline.
//   - Begin returns a savepoint (a nested PipelinedTx) whose SAVEPOINT is
//     sent the same lazy way. Statements a savepoint holds back for the
//     commit belong to the outermost COMMIT: releasing the savepoint keeps
//     them, rolling back to it drops them.
//
// Otherwise it behaves as pgx's transaction: Commit and Rollback return
// pgx.ErrTxClosed once it is closed (so a deferred Rollback after Commit is
// harmless), a commit that turned into a rollback returns an error that
// errors.Is pgx.ErrTxCommitRollback, and the connection goes back to the
// pool when the outermost transaction ends — destroyed by the pool when its
// state is not idle, and closed first when a rollback failed. LargeObjects
// is not supported (pgx builds its LargeObjects only for its own
// transactions). Like pgx's, a PipelinedTx is for one goroutine at a time.
type PipelinedTx struct {
	s *session
	// savepoint is 0 for the outermost transaction, else this savepoint's
	// number (its name is sp_<savepoint>).
	savepoint int64
	// mark is len(s.atCommit) when the savepoint began: rolling back to it
	// drops the statements held back since.
	mark   int
	closed bool
}

var _ pgx.Tx = (*PipelinedTx)(nil)

// session is what an outermost transaction and its savepoints share: the one
// connection and what has not been sent on it yet.
type session struct {
	conn *pgxpool.Conn
	// pending are the statements (BEGIN, SAVEPOINT, and what ExecWithNext
	// holds) sent ahead of the next statement, in its pipeline.
	pending []pendingStatement
	// begun is set once BEGIN was sent (whether or not it succeeded).
	begun bool
	// broken is the error of a pipeline whose BEGIN or SAVEPOINT failed: the
	// transaction's later statements would not run inside it, so they
	// return this error instead.
	broken     error
	atCommit   []heldBack
	savepoints int64
	closed     bool
}

// pendingStatement is a statement sent ahead of the next one: BEGIN or a
// SAVEPOINT (held nil), or one ExecWithNext holds.
type pendingStatement struct {
	sql  string
	args []any
	held *Held
}

// Held is a statement ExecWithNext holds back to send it with the
// transaction's next statement, and once it was sent, its outcome.
type Held struct {
	purpose string
	sent    bool
	err     error
}

// Outcome reports whether the statement was sent, and if so its error (nil:
// it succeeded). A statement that was skipped because one before it in its
// pipeline failed reports that failure.
func (h *Held) Outcome() (sent bool, err error) { return h.sent, h.err }

// ErrHeldFailed is returned by a statement whose pipeline carried a
// statement held back by ExecWithNext that failed: the server skipped the
// rest of the pipeline, this statement included, and the transaction is
// aborted. The held statement's own error is its Held's Outcome; it is not
// wrapped here, so that the caller of the statement does not take it for
// one of its own (a unique violation of the inbox marker for one of the
// effect's).
var ErrHeldFailed = errors.New("dbtx: a statement sent ahead of this one failed")

// heldBack is a statement sent with COMMIT.
type heldBack struct {
	purpose string
	sql     string
	args    []any
}

const beginSQL = "begin"

// BeginPipelined acquires a connection from pool and returns a transaction on
// it without a round trip: BEGIN goes with the first statement. The caller
// must end it with Commit or Rollback, which release the connection.
func BeginPipelined(ctx context.Context, pool Acquirer) (*PipelinedTx, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquire: %w", err)
	}
	return &PipelinedTx{s: &session{conn: conn, pending: []pendingStatement{{sql: beginSQL}}}}, nil
}

func (t *PipelinedTx) usable() error {
	if t.closed || t.s.closed {
		return pgx.ErrTxClosed
	}
	if t.s.broken != nil {
		return fmt.Errorf("transaction did not begin: %w", t.s.broken)
	}
	return nil
}

// ExecAtCommit holds sql back to send it, with args, in one pipeline with the
// outermost transaction's COMMIT, after the statements held back before it.
// purpose names the statement in the error Commit returns when it fails: the
// transaction is then rolled back, and that error wraps the statement's error
// and pgx.ErrTxCommitRollback. Use it for writes whose failure may as well be
// known at commit (an outbox row), never for a statement whose result the
// transaction needs first. args are kept, not copied, until the commit.
func (t *PipelinedTx) ExecAtCommit(purpose, sql string, args ...any) error {
	if err := t.usable(); err != nil {
		return err
	}
	t.s.atCommit = append(t.s.atCommit, heldBack{purpose: purpose, sql: sql, args: args})
	return nil
}

// ExecWithNext holds sql back to send it, with args, in one pipeline with
// the transaction's next statement, ahead of it (after a pending BEGIN or
// SAVEPOINT), or with COMMIT when no statement follows: a write the
// transaction must make whatever else it does, whose result it need not know
// before its next statement (the inbox marker: it then costs no round trip
// of its own). When it fails, the server skips the rest of its pipeline: the
// statement it went with returns ErrHeldFailed, and Commit a rollback. Its
// Held reports its outcome once sent. A savepoint rolled back before it was
// sent drops it; one released keeps it for the next statement. purpose names
// it in errors; args are kept, not copied, until it is sent.
func (t *PipelinedTx) ExecWithNext(purpose, sql string, args ...any) (*Held, error) {
	if err := t.usable(); err != nil {
		return nil, err
	}
	h := &Held{purpose: purpose}
	t.s.pending = append(t.s.pending, pendingStatement{sql: sql, args: args, held: h})
	return h, nil
}

// Flush sends what is pending — BEGIN, SAVEPOINTs, what ExecWithNext holds
// — at once, in one round trip of its own (nothing when nothing is): for a
// transaction that must know a held statement's outcome before it goes on.
func (t *PipelinedTx) Flush(ctx context.Context) error {
	if err := t.usable(); err != nil {
		return err
	}
	if len(t.s.pending) == 0 {
		return nil
	}
	return t.flush(ctx)
}

// heldOnly returns the statements ExecWithNext holds among ps.
func heldOnly(ps []pendingStatement) []pendingStatement {
	var out []pendingStatement
	for _, p := range ps {
		if p.held != nil {
			out = append(out, p)
		}
	}
	return out
}

// heldPending reports whether a statement ExecWithNext holds is pending.
func (s *session) heldPending() bool {
	return slices.ContainsFunc(s.pending, func(p pendingStatement) bool { return p.held != nil })
}

// Begin starts a savepoint inside t. Its SAVEPOINT is sent with the next
// statement; one that ran nothing is released or rolled back without a round
// trip.
func (t *PipelinedTx) Begin(_ context.Context) (pgx.Tx, error) {
	if err := t.usable(); err != nil {
		return nil, err
	}
	s := t.s
	s.savepoints++
	s.pending = append(s.pending, pendingStatement{sql: savepointSQL("savepoint", s.savepoints)})
	return &PipelinedTx{s: s, savepoint: s.savepoints, mark: len(s.atCommit)}, nil
}

func savepointSQL(verb string, n int64) string {
	return verb + " sp_" + strconv.FormatInt(n, 10)
}

// Commit commits the outermost transaction, sending the statements held back
// by ExecAtCommit in the same pipeline, or releases a savepoint. See
// PipelinedTx for the errors.
func (t *PipelinedTx) Commit(ctx context.Context) error {
	if t.closed || t.s.closed {
		return pgx.ErrTxClosed
	}
	if t.savepoint != 0 {
		return t.endSavepoint(ctx, "release savepoint")
	}
	t.closed = true
	s := t.s
	defer s.release()
	if s.broken != nil {
		return fmt.Errorf("transaction did not begin: %w (%w)", s.broken, pgx.ErrTxCommitRollback)
	}
	held := s.heldPending()
	if !s.begun && len(s.atCommit) == 0 && !held {
		return nil // nothing ran: nothing to commit
	}
	if s.begun && s.conn.Conn().PgConn().TxStatus() == 'E' {
		// A statement failed: the held-back ones would fail too, and COMMIT
		// reports the rollback as pgx's does.
		return s.commit(ctx)
	}
	if s.begun && len(s.atCommit) == 0 && !held {
		return s.commit(ctx)
	}
	return s.commitHeldBack(ctx)
}

func (s *session) commit(ctx context.Context) error {
	tag, err := s.conn.Exec(ctx, "commit")
	if err != nil {
		return err
	}
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// commitHeldBack sends BEGIN when it was not sent yet, what ExecWithNext
// still holds, the statements held back for the commit and COMMIT in one
// pipeline. A held-back statement that fails makes the server skip the rest
// of the pipeline, COMMIT included: the transaction is then rolled back here.
// Pending savepoints ran nothing and are not sent.
func (s *session) commitHeldBack(ctx context.Context) error {
	b := &pgx.Batch{}
	if !s.begun {
		b.Queue(beginSQL)
	}
	held := heldOnly(s.pending)
	for _, p := range held {
		b.Queue(p.sql, p.args...)
	}
	s.pending = nil
	for _, h := range s.atCommit {
		b.Queue(h.sql, h.args...)
	}
	b.Queue("commit")
	br := s.conn.SendBatch(ctx, b)
	err := func() error {
		if !s.begun {
			s.begun = true
			if _, err := br.Exec(); err != nil {
				failHeld(held, err)
				return fmt.Errorf("begin: %w", err)
			}
		}
		for i, p := range held {
			_, err := br.Exec()
			p.held.sent, p.held.err = true, err
			if err != nil {
				failHeld(held[i+1:], err)
				return fmt.Errorf("%s: %w (%w)", p.held.purpose, err, pgx.ErrTxCommitRollback)
			}
		}
		for _, h := range s.atCommit {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("%s: %w (%w)", h.purpose, err, pgx.ErrTxCommitRollback)
			}
		}
		tag, err := br.Exec()
		if err != nil {
			return err
		}
		if tag.String() == "ROLLBACK" {
			return pgx.ErrTxCommitRollback
		}
		return nil
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil && s.conn.Conn().PgConn().TxStatus() != 'I' && !s.conn.Conn().IsClosed() {
		// The failed statement left the transaction open and aborted; the
		// pool would destroy a connection in that state, a rollback keeps it.
		if _, rerr := s.conn.Exec(ctx, "rollback"); rerr != nil {
			_ = s.conn.Conn().Close(ctx)
		}
	}
	return err
}

// Rollback rolls back the outermost transaction (without a round trip when it
// ran nothing) or rolls back to a savepoint. See PipelinedTx.
func (t *PipelinedTx) Rollback(ctx context.Context) error {
	if t.closed || t.s.closed {
		return pgx.ErrTxClosed
	}
	if t.savepoint != 0 {
		return t.endSavepoint(ctx, "rollback to savepoint")
	}
	t.closed = true
	s := t.s
	defer s.release()
	if !s.begun {
		return nil
	}
	if s.broken != nil {
		// BEGIN failed: a connection on which it took effect after all is
		// not idle (or was closed by pgx), and release destroys it.
		return nil
	}
	if _, err := s.conn.Exec(ctx, "rollback"); err != nil {
		// As pgx's: a failed rollback leaves the connection in an unknown
		// state.
		_ = s.conn.Conn().Close(ctx)
		return err
	}
	return nil
}

// endSavepoint releases (verb "release savepoint") or rolls back to ("rollback
// to savepoint") t's savepoint. One still pending was never sent: it is
// dropped, with the savepoints begun after it, and nothing is sent.
func (t *PipelinedTx) endSavepoint(ctx context.Context, verb string) error {
	t.closed = true
	s := t.s
	rollback := verb != "release savepoint"
	if rollback {
		s.atCommit = s.atCommit[:min(t.mark, len(s.atCommit))]
	}
	// The savepoints begun after this one end with it, as on the server;
	// what ExecWithNext held since it began stays pending on a release (it
	// was written inside it) and is dropped on a rollback.
	name := savepointSQL("savepoint", t.savepoint)
	if i := slices.IndexFunc(s.pending, func(p pendingStatement) bool { return p.sql == name && p.held == nil }); i >= 0 {
		kept := slices.Clone(s.pending[:i])
		if !rollback {
			kept = append(kept, heldOnly(s.pending[i+1:])...)
		}
		s.pending = kept
		return nil
	}
	// Sent: BEGIN was sent with it, and what is still pending are
	// savepoints begun after it and statements held since.
	if rollback {
		s.pending = nil
	} else {
		s.pending = heldOnly(s.pending)
	}
	if s.broken != nil {
		return fmt.Errorf("transaction did not begin: %w", s.broken)
	}
	_, err := s.conn.Exec(ctx, savepointSQL(verb, t.savepoint))
	return err
}

// release gives the connection back once the outermost transaction ended.
// The pool destroys it unless it is open, idle and not busy, so a connection
// whose state is unknown never serves another transaction.
func (s *session) release() {
	s.closed = true
	s.atCommit = nil
	s.conn.Release()
}

// sendsPending reports whether the next statement must carry the pending
// statements, and fails when they cannot go in its pipeline (a statement
// given a pgx.QueryExecMode or run by CopyFrom): those are sent first, alone.
func (t *PipelinedTx) sendsPending(ctx context.Context, args []any) (bool, error) {
	s := t.s
	if len(s.pending) == 0 {
		return false, nil
	}
	if len(args) > 0 {
		if _, ok := args[0].(pgx.QueryExecMode); ok {
			return false, t.flush(ctx)
		}
	}
	return true, nil
}

// flush sends the pending statements on their own.
func (t *PipelinedTx) flush(ctx context.Context) error {
	br := t.s.conn.SendBatch(ctx, t.queuePending(&pgx.Batch{}))
	err := t.readPending(br)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// queuePending moves the pending statements into b, first.
func (t *PipelinedTx) queuePending(b *pgx.Batch) *pgx.Batch {
	s := t.s
	for _, p := range s.pending {
		if p.sql == beginSQL && p.held == nil {
			s.begun = true
		}
		b.Queue(p.sql, p.args...)
	}
	return b
}

// readPending reads the results of the pending statements queuePending put
// first in br, and clears them. A failed BEGIN breaks the transaction; a
// failed SAVEPOINT (the transaction was already aborted) is returned as the
// statement's error, as pgx's Begin would; a failed statement ExecWithNext
// held is its Held's outcome, and the statement after it gets ErrHeldFailed.
func (t *PipelinedTx) readPending(br pgx.BatchResults) error {
	s := t.s
	sent := s.pending
	s.pending = nil
	for i, p := range sent {
		_, err := br.Exec()
		if p.held != nil {
			p.held.sent, p.held.err = true, err
		}
		if err == nil {
			continue
		}
		failHeld(sent[i+1:], err)
		switch {
		case p.held != nil:
			return fmt.Errorf("%w (%s)", ErrHeldFailed, p.held.purpose)
		case p.sql == beginSQL:
			s.broken = err
			return fmt.Errorf("transaction did not begin: %w", err)
		}
		return fmt.Errorf("%s: %w", p.sql, err)
	}
	return nil
}

// failHeld records, for the held statements among ps, that they did not run
// because err failed their pipeline before them.
func failHeld(ps []pendingStatement, err error) {
	for _, p := range ps {
		if p.held != nil {
			p.held.sent, p.held.err = true, fmt.Errorf("not run: %w", err)
		}
	}
}

// Exec runs sql in the transaction (in one pipeline with a pending BEGIN or
// SAVEPOINT).
func (t *PipelinedTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.usable(); err != nil {
		return pgconn.CommandTag{}, err
	}
	along, err := t.sendsPending(ctx, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	if !along {
		return t.s.conn.Exec(ctx, sql, args...)
	}
	b := t.queuePending(&pgx.Batch{})
	b.Queue(sql, args...)
	br := t.s.conn.SendBatch(ctx, b)
	err = t.readPending(br)
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// Query runs sql in the transaction (in one pipeline with a pending BEGIN or
// SAVEPOINT; the rows must then be closed, as always, before the next
// statement).
func (t *PipelinedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.usable(); err != nil {
		return failedRows{err: err}, err
	}
	along, err := t.sendsPending(ctx, args)
	if err != nil {
		return failedRows{err: err}, err
	}
	if !along {
		return t.s.conn.Query(ctx, sql, args...)
	}
	b := t.queuePending(&pgx.Batch{})
	b.Queue(sql, args...)
	br := t.s.conn.SendBatch(ctx, b)
	if err := t.readPending(br); err != nil {
		_ = br.Close()
		return failedRows{err: err}, err
	}
	rows, err := br.Query()
	if err != nil {
		if cerr := br.Close(); cerr != nil && !errors.Is(cerr, err) {
			err = errors.Join(err, cerr)
		}
		return failedRows{err: err}, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// QueryRow runs sql in the transaction; see Query.
func (t *PipelinedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.usable(); err == nil && len(t.s.pending) == 0 {
		return t.s.conn.QueryRow(ctx, sql, args...)
	}
	rows, _ := t.Query(ctx, sql, args...)
	return rowOf{rows: rows}
}

// SendBatch sends b in the transaction, a pending BEGIN or SAVEPOINT first in
// the same pipeline.
func (t *PipelinedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := t.usable(); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	if len(t.s.pending) == 0 {
		return t.s.conn.SendBatch(ctx, b)
	}
	withPending := t.queuePending(&pgx.Batch{})
	withPending.QueuedQueries = append(withPending.QueuedQueries, b.QueuedQueries...)
	return &pendingBatchResults{BatchResults: t.s.conn.SendBatch(ctx, withPending), t: t}
}

// CopyFrom copies rows in the transaction. COPY cannot share a pipeline: a
// pending BEGIN or SAVEPOINT is sent first, one round trip of its own.
func (t *PipelinedTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.usable(); err != nil {
		return 0, err
	}
	if len(t.s.pending) > 0 {
		if err := t.flush(ctx); err != nil {
			return 0, err
		}
	}
	return t.s.conn.CopyFrom(ctx, table, columns, src)
}

// Prepare prepares sql on the transaction's connection (a prepared statement
// outlives the transaction, so no BEGIN is needed first).
func (t *PipelinedTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.usable(); err != nil {
		return nil, err
	}
	return t.s.conn.Conn().Prepare(ctx, name, sql)
}

// LargeObjects is not supported: pgx builds a LargeObjects only on its own
// transactions (the field is unexported). It panics with that reason rather
// than return a value that would fail later on a nil transaction.
func (t *PipelinedTx) LargeObjects() pgx.LargeObjects {
	panic("dbtx: PipelinedTx does not support LargeObjects; begin a pgx transaction (pool.Begin) for them")
}

// Conn returns the transaction's connection. A statement run on it directly
// must run inside the transaction, so a pending BEGIN or SAVEPOINT is sent
// first (one round trip, without a deadline: Conn takes no context); if that
// fails, the transaction's later statements and Commit report it.
func (t *PipelinedTx) Conn() *pgx.Conn {
	if t.usable() == nil && len(t.s.pending) > 0 {
		_ = t.flush(context.Background())
	}
	return t.s.conn.Conn()
}

// pendingBatchResults hides the results of the pending statements sent ahead
// of a caller's batch.
type pendingBatchResults struct {
	pgx.BatchResults
	t    *PipelinedTx
	read bool
	err  error
}

func (r *pendingBatchResults) skipPending() error {
	if !r.read {
		r.read = true
		r.err = r.t.readPending(r.BatchResults)
	}
	return r.err
}

func (r *pendingBatchResults) Exec() (pgconn.CommandTag, error) {
	if err := r.skipPending(); err != nil {
		return pgconn.CommandTag{}, err
	}
	return r.BatchResults.Exec()
}

func (r *pendingBatchResults) Query() (pgx.Rows, error) {
	if err := r.skipPending(); err != nil {
		return failedRows{err: err}, err
	}
	return r.BatchResults.Query()
}

func (r *pendingBatchResults) QueryRow() pgx.Row {
	if err := r.skipPending(); err != nil {
		return rowOf{rows: failedRows{err: err}}
	}
	return r.BatchResults.QueryRow()
}

func (r *pendingBatchResults) Close() error {
	err := r.skipPending()
	if cerr := r.BatchResults.Close(); err == nil {
		err = cerr
	}
	return err
}

// batchRows are the rows of a statement sent in one pipeline with pending
// statements: the pipeline is closed with them, so that the connection is
// free for the next statement.
type batchRows struct {
	pgx.Rows
	br       pgx.BatchResults
	closed   bool
	closeErr error
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Close() {
	r.Rows.Close()
	if !r.closed {
		r.closed = true
		r.closeErr = r.br.Close()
	}
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.closeErr
}

// rowOf is pgx's QueryRow semantics over any Rows.
type rowOf struct{ rows pgx.Rows }

func (r rowOf) Scan(dest ...any) error {
	defer r.rows.Close()
	if err := r.rows.Err(); err != nil {
		return err
	}
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// failedRows are the rows of a statement that was not run.
type failedRows struct{ err error }

func (failedRows) Close()                                       {}
func (r failedRows) Err() error                                 { return r.err }
func (failedRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (failedRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (failedRows) Next() bool                                   { return false }
func (r failedRows) Scan(...any) error                          { return r.err }
func (r failedRows) Values() ([]any, error)                     { return nil, r.err }
func (failedRows) RawValues() [][]byte                          { return nil }
func (failedRows) Conn() *pgx.Conn                              { return nil }
func (failedRows) TypeMap() *pgtype.Map                         { return nil }
