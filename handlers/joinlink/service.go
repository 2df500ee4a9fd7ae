package joinlink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/eventpipe/eventpipe/app/failure"
)

// The spec's timing constants (§Deployment & Operations: code constants, not
// env).
const (
	// StaleAfter (STALE_MS): an IN_PROGRESS run older than this is taken
	// for crashed and may be reclaimed (dec-06, risk-01).
	StaleAfter = 30 * time.Minute
	// Grace (GRACE_MS): the sweep leaves a session alone until this long
	// after its link_generation_at, so a just-fired event runs first
	// (dec-06: "Grace + stale windows (30 min)").
	Grace = 30 * time.Minute
	// DefaultFallbackSchedule (FALLBACK_CRON, "every 4h"): on the wall
	// clock, at minute 0 of every 4th hour (UTC), as @nestjs/schedule's
	// @Cron runs it; joinlink.fallback_schedule changes it.
	DefaultFallbackSchedule = "0 */4 * * *"
	// FallbackBatchLimit (FALLBACK_BATCH_LIMIT): sessions per sweep tick,
	// run sequentially.
	FallbackBatchLimit = 50
	// MaxRetryAttempts (MAX_RETRY_ATTEMPTS): receives of one event.
	MaxRetryAttempts = 5
	// MaxEventAge (MAX_EVENT_AGE_SECONDS = 86400).
	MaxEventAge = 24 * time.Hour
)

// BulkRequest is bulkRegister's input (iface-05): { sessionId, role,
// batchSize }; zero role/batch size = the generator's defaults.
type BulkRequest struct {
	SessionID int64
	Role      string
	BatchSize int
}

// BulkResult is bulkRegister's output: { jobId, total }.
type BulkResult struct {
	JobID string
	Total int
}

// Generator is the online-session subsystem's bulkRegister (iface-05,
// v1.0.0): it registers every eligible registrant of a session for a join
// link. It is at-least-once and idempotent on (registration, session). An
// error is retryable unless marked failure.Permanent.
type Generator interface {
	BulkRegister(ctx context.Context, req BulkRequest, actorUserID int64) (BulkResult, error)
}

// Outcome is what GenerateForSession did.
type Outcome string

// The outcomes.
const (
	// Generated: the claim was won and bulkRegister dispatched (COMPLETED).
	Generated Outcome = "generated"
	// Skipped: the claim was lost (another run holds it, or the session is
	// COMPLETED / NOT_SCHEDULED): a no-op, not an error.
	Skipped Outcome = "skipped"
)

// Service is the generation side: the single entry point
// (JoinLinkGenerationService.generateForSession), the fallback sweep
// (JoinLinkGenerationFallbackService) and the admin's setLinkGeneration
// (ProgramSessionService).
type Service struct {
	Store     Store
	Generator Generator
	// Scheduler registers and deletes the per-session schedules; nil
	// schedules nothing (the sweep still generates).
	Scheduler *Scheduler
	Logger    *slog.Logger
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// SystemActorID is the updated_by of the status writes no user asked
	// for: the sweep's, and an event's without actorUserId (§Security
	// Design: "updated_by is stamped on every status/link write"). 0
	// leaves updated_by NULL on those writes.
	SystemActorID int64
	// SweepLock keeps the fallback sweep to one replica at a time; nil
	// sweeps without one (a single process: the embedded mode).
	SweepLock SweepLock
	// Metrics counts sweeps and generations; nil counts nothing.
	Metrics *Metrics
}

// SweepLock is a lock across the replicas of the service.
type SweepLock interface {
	// TryLock takes the lock for the sweep of tick without waiting: ok
	// false when another replica holds it, or when tick is not zero and a
	// replica took that tick already (its timer fired first). A zero tick
	// is a sweep of no scheduled time (serve's sweep at start). release
	// gives the lock back.
	TryLock(ctx context.Context, tick time.Time) (release func(), ok bool, err error)
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Service) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// GenerateForSession is the one gate every trigger passes through (dec-09):
// it claims the session atomically and, when it wins, calls bulkRegister
// and marks the session COMPLETED; on a generation error it marks it FAILED
// and returns the error (its class kept: unmarked = retryable). A lost claim
// returns Skipped and no error (a duplicate trigger is not a failure). A
// missing session returns an error wrapping ErrNotFound (permanent).
func (s *Service) GenerateForSession(ctx context.Context, d Data) (Outcome, error) {
	log := s.logger().With(slog.Int64("program_session_id", d.ProgramSessionID))
	actor := d.ActorUserID
	if actor == 0 {
		actor = s.SystemActorID
	}
	claimedAt := micro(s.now())
	won, err := s.Store.Claim(ctx, d.ProgramSessionID, actor, claimedAt, claimedAt.Add(-StaleAfter))
	if err != nil {
		return "", err
	}
	if !won {
		sess, err := s.Store.Session(ctx, d.ProgramSessionID)
		if errors.Is(err, ErrNotFound) {
			log.WarnContext(ctx, "join-link generation: program session not found")
			return "", failure.AsPermanent(err)
		}
		log.InfoContext(ctx, "join-link generation: claim skipped", slog.String("status", string(sess.Status)))
		s.Metrics.generation(Skipped)
		return Skipped, nil
	}
	res, genErr := s.Generator.BulkRegister(ctx, BulkRequest{SessionID: d.ProgramSessionID, Role: d.Role, BatchSize: d.BatchSize}, d.ActorUserID)
	status := Completed
	if genErr != nil {
		status = Failed
	}
	// The status write must happen even when ctx ended mid-generation.
	wctx := context.WithoutCancel(ctx)
	ok, err := s.Store.Finish(wctx, d.ProgramSessionID, claimedAt, status, actor, s.now())
	if genErr != nil {
		s.Metrics.generation(Outcome(outcomeFailed))
		log.ErrorContext(ctx, "join-link generation failed", slog.Any("error", genErr), slog.String("error_class", failure.Of(genErr).String()))
		if err != nil {
			return "", errors.Join(genErr, err)
		}
		return "", fmt.Errorf("join-link generation for session %d: %w", d.ProgramSessionID, genErr)
	}
	if err != nil {
		// bulkRegister ran; the retry re-claims (FAILED/stale) and
		// bulkRegister's own idempotency absorbs the repeat.
		return "", err
	}
	if !ok {
		log.WarnContext(ctx, "join-link generation finished after its run was reclaimed as stale; status left to the new run")
	}
	log.InfoContext(ctx, "join-link generation dispatched", slog.String("job_id", res.JobID), slog.Int("total", res.Total))
	s.Metrics.generation(Generated)
	return Generated, nil
}

// SweepResult is what one fallback tick did.
type SweepResult struct {
	Found, Generated, Skipped, Failed int
}

// Sweep is one fallback tick (the 4-hourly cron): the sessions due before
// now - Grace that are SCHEDULED, FAILED or stale IN_PROGRESS (never
// COMPLETED, inv-03), at most FallbackBatchLimit, oldest first, each through
// GenerateForSession in turn. A session's failure is logged and the sweep
// goes on; only the candidate query's error is returned.
func (s *Service) Sweep(ctx context.Context) (SweepResult, error) {
	now := s.now()
	ids, err := s.Store.DueForFallback(ctx, now.Add(-Grace), now.Add(-StaleAfter), FallbackBatchLimit)
	if err != nil {
		return SweepResult{}, err
	}
	r := SweepResult{Found: len(ids)}
	s.logger().InfoContext(ctx, "join-link fallback sweep found sessions", slog.Int("found", len(ids)))
	for _, id := range ids {
		if ctx.Err() != nil {
			break
		}
		out, err := s.GenerateForSession(ctx, Data{ProgramSessionID: id})
		switch {
		case err != nil:
			r.Failed++
		case out == Generated:
			r.Generated++
		default:
			r.Skipped++
		}
	}
	return r, nil
}

// RunFallback sweeps once at start (a service deployed more often than its
// schedule would otherwise never sweep), then at every time of schedule, on
// the service's clock, until ctx ends. An @every schedule is counted from
// the zero time, not from the start, so that every replica has the same
// ticks. With a SweepLock, one replica sweeps each tick: a replica that
// finds the lock held, or its tick taken by another, skips it (logged). The
// sweep at start is each process's own (under the lock, of no tick). The
// serve command runs it when ENABLE_JOIN_LINK_FALLBACK_CRON is on.
func (s *Service) RunFallback(ctx context.Context, schedule cron.Schedule) error {
	schedule = onTheClock(schedule)
	var tick time.Time // zero: the sweep at start
	for {
		s.sweepOnce(ctx, tick)
		tick = schedule.Next(s.now())
		if tick.IsZero() { // a cron expression of no date that exists
			s.logger().WarnContext(ctx, "join-link fallback sweep: the schedule has no next time; no more sweeps")
			<-ctx.Done()
			return nil
		}
		t := time.NewTimer(tick.Sub(s.now()))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// onTheClock returns schedule with an @every interval counted from the zero
// time (cron.ConstantDelaySchedule counts from whenever Next is asked, so
// two replicas started a second apart would never share a tick); other
// schedules are on the wall clock already.
func onTheClock(schedule cron.Schedule) cron.Schedule {
	if every, ok := schedule.(cron.ConstantDelaySchedule); ok {
		return everyOnTheClock(every.Delay)
	}
	return schedule
}

type everyOnTheClock time.Duration

func (e everyOnTheClock) Next(t time.Time) time.Time {
	d := time.Duration(e)
	return t.Truncate(d).Add(d)
}

// sweepOnce runs the sweep of tick (zero: at start) under the lock, logging
// what happened.
func (s *Service) sweepOnce(ctx context.Context, tick time.Time) {
	log := s.logger()
	if tick.IsZero() {
		log = log.With(slog.String("trigger", "start"))
	} else {
		log = log.With(slog.String("trigger", "schedule"), slog.Time("tick", tick))
	}
	if s.SweepLock != nil {
		release, ok, err := s.SweepLock.TryLock(ctx, tick)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				log.ErrorContext(ctx, "join-link fallback sweep failed", slog.Any("error", err))
				s.Metrics.sweep(outcomeFailed)
			}
			return
		case !ok:
			log.InfoContext(ctx, "join-link fallback sweep skipped: another replica is sweeping or swept this tick")
			s.Metrics.sweep(string(Skipped))
			return
		}
		defer release()
	}
	r, err := s.Sweep(ctx)
	if err != nil {
		if ctx.Err() == nil {
			log.ErrorContext(ctx, "join-link fallback sweep failed", slog.Any("error", err))
			s.Metrics.sweep(outcomeFailed)
		}
		return
	}
	log.InfoContext(ctx, "join-link fallback sweep done", slog.Int("found", r.Found),
		slog.Int("generated", r.Generated), slog.Int("skipped", r.Skipped), slog.Int("failed", r.Failed))
	s.Metrics.sweep("swept")
}

// ErrInvalidTime: linkGenerationAt is not a future time (HTTP 400).
var ErrInvalidTime = errors.New("linkGenerationAt must be a future ISO-8601 UTC time")

// SetLinkGeneration is ProgramSessionService.setLinkGeneration: it persists
// at (a future time → SCHEDULED) or clears it (nil → NOT_SCHEDULED) with a
// direct UPDATE, then registers or deletes the session's schedule, best
// effort (dec-01: the DB is the source of truth; a scheduler error is
// logged, and the sweep is the net). Re-submitting the same time re-persists
// and re-upserts the same schedule (idempotent).
func (s *Service) SetLinkGeneration(ctx context.Context, id int64, at *time.Time, actorUserID int64) (Session, error) {
	now := s.now()
	if at != nil && !at.After(now) {
		return Session{}, ErrInvalidTime
	}
	sess, err := s.Store.SetLinkGeneration(ctx, id, at, actorUserID, now, now.Add(-StaleAfter))
	if err != nil {
		return Session{}, err
	}
	if s.Scheduler != nil {
		if at == nil {
			s.Scheduler.DeleteLinkSchedule(ctx, id)
		} else {
			s.Scheduler.CreateLinkSchedule(ctx, ScheduleInput{ProgramSessionID: id, FireAt: *at, ActorUserID: actorUserID})
		}
	}
	return sess, nil
}
