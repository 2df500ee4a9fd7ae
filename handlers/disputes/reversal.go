package disputes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/route"
)

// Reverser reverses a dispute's debit at the payment system. The request's
// IdempotencyKey is the same on every attempt for a dispute, so the payment
// system reverses once however often it is asked (a retry after a timeout,
// a worker that died after the call). An error is transient unless marked
// permanent (failure.AsPermanent): permanent means asking again cannot help.
type Reverser interface {
	Reverse(ctx context.Context, req ReversalRequest) (ReversalResult, error)
}

// ReversalRequest is one reversal call.
type ReversalRequest struct {
	DisputeID string
	TxnID     string
	// IdempotencyKey is ReversalIdempotencyKey(DisputeID).
	IdempotencyKey string
}

// ReversalResult is the payment system's answer to a reversal.
type ReversalResult struct {
	// Reference is the payment system's reversal id, when it gives one.
	Reference string
}

// ReversalIdempotencyKey is the idempotency key of a dispute's reversal:
// derived from the dispute id alone, so every attempt, on every replica,
// sends the same one. An id that is not visible ASCII (a foreign producer's)
// is hashed to keep the header valid.
func ReversalIdempotencyKey(disputeID string) string {
	if disputeID != "" && strings.IndexFunc(disputeID, func(c rune) bool { return c <= 0x20 || c > 0x7e }) < 0 {
		return "dispute-reversal:" + disputeID
	}
	sum := sha256.Sum256([]byte(disputeID))
	return "dispute-reversal:sha256:" + hex.EncodeToString(sum[:])
}

// Defaults of the reversal worker (disputes.reversal_*).
const (
	DefaultReversalInterval    = 10 * time.Second
	DefaultReversalTimeout     = 10 * time.Second
	DefaultReversalMaxAttempts = 10
)

// DefaultReversalBackoff is the wait after a transient failure: 30 s, then
// doubling up to 30 min, so ten attempts span about two hours — long enough
// for a payment system's incident, short against a dispute's TAT (days). A
// Retry-After longer than the wait is honoured.
func DefaultReversalBackoff() route.Backoff {
	return route.Backoff{Initial: 30 * time.Second, Multiplier: 2, Max: 30 * time.Minute}
}

// reversalLeaseMargin is added to the call's timeout for the claim's lease:
// the outcome is recorded well before another claim may take the row.
const reversalLeaseMargin = 30 * time.Second

// ReversalWorker completes pending auto-reversals (decision 0022): it claims
// a due reversal (ClaimReversals: one worker per row, however many
// replicas), calls Reverser with the dispute's idempotency key outside any
// transaction, and records the outcome (RecordReversal): reversed, failed
// (a permanent error, or a transient one at MaxAttempts), or pending again
// after a backoff. The database is the truth: a redelivered DisputeRaised
// finds its reversal already stored and adds none, a reversal once reversed
// or failed is never called again, and a worker that dies between the call
// and the record leaves the row to be claimed again when its lease ends —
// that second call carries the same idempotency key, so the payment system
// reverses once.
type ReversalWorker struct {
	Store    Store
	Reverser Reverser
	// Interval between polls; DefaultReversalInterval when 0.
	Interval time.Duration
	// Timeout bounds one call; DefaultReversalTimeout when 0.
	Timeout time.Duration
	// MaxAttempts is how many calls a reversal gets before a transient
	// failure is recorded as failed; DefaultReversalMaxAttempts when 0.
	MaxAttempts int
	// Backoff is the wait after a transient failure;
	// DefaultReversalBackoff when zero.
	Backoff route.Backoff
	Logger  *slog.Logger
	Metrics *Metrics
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

func (w *ReversalWorker) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

func (w *ReversalWorker) logger() *slog.Logger {
	if w.Logger != nil {
		return w.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func (w *ReversalWorker) timeout() time.Duration {
	if w.Timeout > 0 {
		return w.Timeout
	}
	return DefaultReversalTimeout
}

// Tick works on the reversals due now, one claim at a time (so each claim's
// lease covers one call), until none is due; it returns how many it called.
func (w *ReversalWorker) Tick(ctx context.Context) (int, error) {
	n := 0
	for ctx.Err() == nil {
		claimed, err := w.Store.ClaimReversals(ctx, w.now(), w.timeout()+reversalLeaseMargin, 1)
		if err != nil || len(claimed) == 0 {
			return n, err
		}
		n++
		if err := w.reverse(ctx, claimed[0]); err != nil {
			return n, err
		}
	}
	return n, nil
}

// reverse calls the Reverser for r (claimed) and records the outcome.
func (w *ReversalWorker) reverse(ctx context.Context, r Reversal) error {
	log := w.logger().With(slog.String("dispute_id", r.DisputeID), slog.String("txn_id", r.TxnID), slog.Int("attempt", r.Attempts))
	req := ReversalRequest{DisputeID: r.DisputeID, TxnID: r.TxnID, IdempotencyKey: ReversalIdempotencyKey(r.DisputeID)}
	callCtx, cancel := context.WithTimeout(ctx, w.timeout())
	res, err := w.Reverser.Reverse(callCtx, req)
	cancel()
	if err != nil && ctx.Err() != nil {
		// Shutting down mid-call: record nothing; the lease ends and the
		// next claim asks again with the same key.
		return nil
	}
	now := w.now().UTC()
	outcome := outcomeReversed
	switch {
	case err == nil:
		r.Status, r.Reference, r.LastError, r.CompletedAt = ReversalReversed, res.Reference, "", &now
	case failure.Of(err) == failure.Permanent || r.Attempts >= w.maxAttempts():
		outcome = outcomeFailed
		r.Status, r.LastError, r.CompletedAt = ReversalFailed, errText(err), &now
		if failure.Of(err) != failure.Permanent {
			r.LastError = fmt.Sprintf("gave up after %d attempts: %s", r.Attempts, r.LastError)
		}
	default:
		outcome = outcomeRetried
		wait := w.backoff().Wait(r.Attempts)
		wait = max(wait, failure.RetryAfter(err))
		r.LastError, r.NextAttemptAt = errText(err), now.Add(wait)
	}
	// The call happened: record it even when shutdown begins now.
	recCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	recorded, rerr := w.Store.RecordReversal(recCtx, r)
	if rerr != nil {
		log.ErrorContext(ctx, "dispute reversal outcome not recorded; the next claim asks again with the same idempotency key",
			slog.String("outcome", outcome), slog.Any("error", rerr))
		return rerr
	}
	if !recorded {
		log.WarnContext(ctx, "dispute reversal outcome not recorded: a later claim took the reversal over (this call outlived its lease)",
			slog.String("outcome", outcome))
		return nil
	}
	w.Metrics.reversal(outcome)
	switch outcome {
	case outcomeReversed:
		log.InfoContext(ctx, "dispute auto-reversed", slog.String("reference", r.Reference), slog.String("idempotency_key", req.IdempotencyKey))
	case outcomeFailed:
		log.ErrorContext(ctx, "dispute auto-reversal failed", slog.String("error", r.LastError))
	default:
		log.WarnContext(ctx, "dispute auto-reversal will be retried", slog.Time("next_attempt_at", r.NextAttemptAt), slog.Any("error", err))
	}
	return nil
}

func (w *ReversalWorker) maxAttempts() int {
	if w.MaxAttempts > 0 {
		return w.MaxAttempts
	}
	return DefaultReversalMaxAttempts
}

func (w *ReversalWorker) backoff() route.Backoff {
	if w.Backoff == (route.Backoff{}) {
		return DefaultReversalBackoff()
	}
	return w.Backoff
}

// errText is err's message without the class marker, bounded for storage.
func errText(err error) string {
	var p *failure.PermanentError
	if errors.As(err, &p) {
		err = p.Err
	}
	const n = 500
	s := err.Error()
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

// Run works on due reversals at once and then every Interval until ctx
// ends.
func (w *ReversalWorker) Run(ctx context.Context) error {
	interval := w.Interval
	if interval <= 0 {
		interval = DefaultReversalInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := w.Tick(ctx); err != nil && ctx.Err() == nil {
			w.logger().ErrorContext(ctx, "dispute reversal worker: tick failed", slog.Any("error", err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// LogReverser is the Reverser of sample traffic and tests: it logs each
// request and reports it reversed, reversing nothing. serve uses it only
// with disputes.sample_traffic and no disputes.reversal_url.
type LogReverser struct {
	Logger *slog.Logger
}

// Reverse implements Reverser.
func (l LogReverser) Reverse(ctx context.Context, req ReversalRequest) (ReversalResult, error) {
	if l.Logger != nil {
		l.Logger.WarnContext(ctx, "dispute auto-reversal not sent: the sample reverser reverses nothing (set disputes.reversal_url)",
			slog.String("dispute_id", req.DisputeID), slog.String("txn_id", req.TxnID), slog.String("idempotency_key", req.IdempotencyKey))
	}
	return ReversalResult{Reference: "sample:" + req.IdempotencyKey}, nil
}
