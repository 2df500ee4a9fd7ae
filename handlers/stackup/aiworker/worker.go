// Package aiworker is the AI server's side of the StackUp contract: one
// consumer per request queue (ai.analyze.*, ai.generate.*), the work behind a
// processor interface per request type, and the §6 failure signal — once a
// request has decoded and passed the idempotency check, every failure ends
// in a FAILED callback, so a session never hangs in "generating".
//
// # The guard (§6, consume_with_failure_signal)
//
// For analyze.resume / repository / web / cover_letter and generate.questions
// / followup / feedback:
//
//   - envelope or payload invalid, messageType ≠ routing key, unknown
//     version: permanent → dead-lettered at once with the reason (no
//     callback: there is nothing trustworthy to answer);
//   - messageId already processed (inbox): acknowledged, skipped;
//   - processor error: a transient one (an LLM outage) is retried in process
//     while attempts remain (§6 row 1); then, or at once for any other error,
//     a FAILED callback is published and the message acknowledged. errorCode
//     is the DomainError's code, GENERATION_SCHEMA_INVALID for output that
//     does not fit the schema (retriable false), GENERATION_FAILED for a
//     failed generation, UNEXPECTED otherwise (and for every feedback
//     failure, §5.11); errorMessage is "ExcType: message", at most 500
//     characters;
//   - the success callback cannot be assembled from the processor's result
//     (it does not encode, or our strict encoder refuses it: an unknown
//     field, a value off the schema): part of the work (§6 "payload 조립"),
//     answered with a FAILED callback, GENERATION_SCHEMA_INVALID, retriable
//     false — on every request type, voice and tts too;
//   - the success callback cannot be published: not reported as FAILED; the
//     message goes to the DLQ with that error, unmarked, so a redrive runs
//     it again. Same when even the FAILED callback cannot be published
//     ("최후 안전망"). With the outbox table the callback is a row committed
//     with the marker, so a broker that refuses it makes the relay retry,
//     and a database that cannot take the row is waited for (until the
//     handler timeout), not dead-lettered.
//
// analyze.voice and generate.tts keep the direct model (§6): a DomainError
// becomes a FAILED callback with its code; any other error is retried, then
// dead-lettered.
//
// Mark after the work, lease during it (eventpipe's rule, replacing the
// spec's "mark, then unmark on the DLQ path"): the processed marker is written
// only with the callback — in one transaction with its outbox row — so a
// worker killed mid-work leaves the request to its redelivery, which is never
// acknowledged as a duplicate. While the work runs an inbox lease (renewed,
// expiring one LeaseTTL after its holder died) keeps a redelivery from
// running it twice: it waits for the lease in the guard, spending none of its
// attempts, until the lease is released or expires (or the handler timeout).
package aiworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/llm"
	"github.com/eventpipe/eventpipe/app/msgctx"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/topology"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/envelope"
)

// MaxErrorMessage caps errorMessage, in characters (§6: "500자 상한").
const MaxErrorMessage = 500

// ErrSchemaInvalid is wrapped by a processor's error when the model's output
// does not fit the expected schema (Python's TypeError in the spec):
// GENERATION_SCHEMA_INVALID, not retriable.
var ErrSchemaInvalid = errors.New("generation output does not match the schema")

// FailureSignal is what a FAILED callback says.
type FailureSignal struct {
	Code      string
	Message   string
	Retriable bool
}

// VersionHandler is the work for one version of one request type.
type VersionHandler struct {
	Schema catalog.Schema
	// Process does the work and returns the success callback's payload.
	Process func(ctx context.Context, job Job, req catalog.Payload) (catalog.Payload, error)
	// Failed returns the FAILED callback's payload for req.
	Failed func(req catalog.Payload, sig FailureSignal) catalog.Payload
	// Direct selects the voice/tts model: only a DomainError becomes a
	// FAILED callback.
	Direct bool
}

// Config configures a Worker.
type Config struct {
	Catalog  catalog.Catalog
	Topology topology.Topology
	// Publisher publishes callbacks and notifications to
	// "<exchange>/<routing-key>" topics (a routing publisher).
	Publisher message.Publisher
	Inbox     inbox.Store
	// Outbox takes the callbacks with the processed marker (outbox.TxWriter:
	// one transaction, a relay publishes; outbox.AfterCommit: published
	// right after the in-memory marker). nil publishes them directly, then
	// marks: a crash between the two repeats the callback, never loses it.
	Outbox outbox.Writer
	// LeaseTTL is how long a request's work is claimed without a renewal
	// (inbox.Lease); DefaultLeaseTTL when 0. A worker killed mid-work
	// holds the request at most this long.
	LeaseTTL   time.Duration
	Processors Processors
	// Queues lists the request queues to consume; empty means all nine.
	Queues []string
	Retry  catalog.Retry
	// Versions adds handlers for further versions of request types (§7: v2
	// beside v1), keyed by message type.
	Versions map[string][]VersionHandler
	Logger   *slog.Logger
}

// RequestTimeout bounds one attempt at a request (the spec names none): a
// model call of up to llm.timeout (2 min by default) with room for a slow
// upload or fetch.
const RequestTimeout = 5 * time.Minute

// DefaultLeaseTTL is Config.LeaseTTL's default: long enough that a renewal
// every 10 s survives a slow database, short enough that a request whose
// worker died is taken over within half a minute.
const DefaultLeaseTTL = 30 * time.Second

// Worker runs the AI server's consumers.
type Worker struct {
	cfg      Config
	handlers map[string]map[string]VersionHandler // type → version
	queues   []string
}

// New checks cfg: every consumed queue's processor must be configured.
func New(cfg Config) (*Worker, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var errs []error
	if cfg.Publisher == nil {
		errs = append(errs, fmt.Errorf("stackup ai-worker: publisher %w", catalog.ErrNotConfigured))
	}
	if cfg.Inbox == nil {
		errs = append(errs, fmt.Errorf("stackup ai-worker: inbox %w", catalog.ErrNotConfigured))
	}
	w := &Worker{cfg: cfg, handlers: v1Handlers(cfg.Processors)}
	for typ, vhs := range cfg.Versions {
		for _, vh := range vhs {
			cat, err := w.cfg.Catalog.With(typ, vh.Schema)
			if err != nil {
				errs = append(errs, fmt.Errorf("stackup ai-worker: %w", err))
				continue
			}
			w.cfg.Catalog = cat
			if _, ok := w.handlers[typ]; !ok {
				w.handlers[typ] = map[string]VersionHandler{}
			}
			w.handlers[typ][vh.Schema.Version] = vh
		}
	}
	w.queues = cfg.Queues
	if len(w.queues) == 0 {
		w.queues = RequestQueues(cfg.Catalog)
	}
	for _, q := range w.queues {
		types := w.cfg.Catalog.ByQueue(q)
		if len(types) == 0 || types[0].Kind != catalog.Request {
			errs = append(errs, fmt.Errorf("stackup ai-worker: %s is not a request queue", q))
			continue
		}
		for _, t := range types {
			if w.handlers[t.Name][catalog.V1].Process == nil {
				errs = append(errs, fmt.Errorf("stackup ai-worker: queue %s: the %s processor is %w (set it, or leave the queue out)",
					q, t.Name, catalog.ErrNotConfigured))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return w, nil
}

// RequestQueues lists the request queues of c, sorted.
func RequestQueues(c catalog.Catalog) []string {
	var qs []string
	for _, t := range c.Types() {
		if t.Kind == catalog.Request {
			qs = append(qs, t.Queue)
		}
	}
	slices.Sort(qs)
	return slices.Compact(qs)
}

// RouteName is the route (and inbox consumer) name of a request queue.
func RouteName(queue string) string { return "stackup-ai-" + strings.TrimPrefix(queue, "ai.") }

// Routes returns one route per consumed queue, with the §6 policy.
func (w *Worker) Routes() (route.Set, error) {
	var set route.Set
	for _, q := range w.queues {
		policy, err := catalog.PolicyFor(w.cfg.Topology, q, w.cfg.Retry)
		if err != nil {
			return nil, err
		}
		c := catalog.Consumer{
			// A model call of minutes (llm.timeout 2 min) and its retries.
			Timeout: RequestTimeout,
			Name:    RouteName(q), Queue: q, Catalog: w.cfg.Catalog, Policy: policy, Logger: w.cfg.Logger,
			Handlers: map[string]map[string]catalog.Handler{},
		}
		for _, t := range w.cfg.Catalog.ByQueue(q) {
			c.Handlers[t.Name] = map[string]catalog.Handler{}
			for v, vh := range w.handlers[t.Name] {
				if vh.Process == nil {
					continue
				}
				c.Handlers[t.Name][v] = w.guard(RouteName(q), t, vh, policy.MaxAttempts)
			}
		}
		set = append(set, c.Route())
	}
	return set, nil
}

// Job is what a processor gets beside its request: the envelope (for the
// context ids) and a way to emit the volatile progress notifications of
// §5.12 (whose failures are only logged).
type Job struct {
	Envelope envelope.Envelope
	notify   func(ctx context.Context, messageType, eventType string, data any)
	logger   *slog.Logger
}

// Logger is the request's logger (its message id, trace id and queue on
// every line); slog.Default() for a Job built without one.
func (j Job) Logger() *slog.Logger {
	if j.logger == nil {
		return slog.Default()
	}
	return j.logger
}

// NotifySession publishes a realtime.session.notify event (QUESTION_POOL_PROGRESS,
// FEEDBACK_PROGRESS, SESSION_MESSAGE_DELTA …) to the request's session;
// a failure is logged and ignored (§5.12-1: "발행 실패는 무시(경고만)").
func (j Job) NotifySession(ctx context.Context, eventType string, data any) {
	if j.notify != nil {
		j.notify(ctx, catalog.RealtimeSessionNotify, eventType, data)
	}
}

// NotifyUser publishes a realtime.user.notify event (ANALYSIS_PROGRESS) to
// the request's user; failures are logged and ignored.
func (j Job) NotifyUser(ctx context.Context, eventType string, data any) {
	if j.notify != nil {
		j.notify(ctx, catalog.RealtimeUserNotify, eventType, data)
	}
}

func (w *Worker) guard(consumer string, t catalog.Type, vh VersionHandler, maxAttempts int) catalog.Handler {
	return func(ctx context.Context, d catalog.Delivery) error {
		log := w.cfg.Logger.With(d.Attrs()...)
		id := d.Envelope.MessageID
		// Mark after the work, lease during it: the processed marker is
		// written only with the callback, so a worker killed mid-work
		// leaves the request to its redelivery; the lease keeps a
		// redelivery that arrives while the work still runs from running
		// it twice (it is retried later, never acknowledged).
		l, err := w.lease(ctx, log, consumer, id)
		if err != nil {
			return err // duplicate → acknowledged by Observe; else the attempt's time ran out
		}
		defer l.Release()
		job := Job{Envelope: d.Envelope, logger: log, notify: func(nctx context.Context, mt, ev string, data any) { w.notify(nctx, d, mt, ev, data) }}

		result, perr := run(ctx, vh, job, d.Payload)
		var (
			cb      *message.Message
			cbTopic string
		)
		if perr == nil {
			// Assembling the callback is part of the work (§6: "payload
			// 조립"): a payload our strict encoder refuses is answered
			// FAILED like any other failure; only its publish may fail
			// into the DLQ.
			cb, cbTopic, perr = w.assemble(ctx, t.Callback, d, result)
		}
		if perr == nil {
			if err := w.answerWaiting(ctx, log, consumer, d, cb, cbTopic); err != nil {
				if failure.Of(err) == failure.Duplicate {
					return err // a twin answered first
				}
				// §5.11: never reported as FAILED; the original error, to the DLQ.
				return failure.AsPermanent(fmt.Errorf("publish %s success callback (work done, not reported as FAILED): %w", t.Callback, err))
			}
			log.InfoContext(ctx, "stackup request done, callback published", slog.String("callback", t.Callback))
			return nil
		}
		if ctx.Err() != nil {
			return perr
		}
		var de *DomainError
		isDomain := errors.As(perr, &de)
		if vh.Direct && !isDomain && !errors.Is(perr, errAssembly) {
			return perr
		}
		if retryable(perr) && msgctx.Attempt(ctx) < maxAttempts {
			return perr
		}
		sig := Signal(t.Name, perr)
		cb, cbTopic, err = w.encode(ctx, t.Callback, d, vh.Failed(d.Payload, sig))
		if err != nil {
			// Nothing can be answered: to the DLQ with the original error,
			// unmarked (nothing was marked: the marker goes with a callback).
			return failure.AsPermanent(fmt.Errorf("assemble %s FAILED callback (%w) after: %w", t.Callback, err, perr))
		}
		if err := w.answerWaiting(ctx, log, consumer, d, cb, cbTopic); err != nil {
			if failure.Of(err) == failure.Duplicate {
				return err
			}
			return failure.AsPermanent(fmt.Errorf("publish %s FAILED callback (%w) after: %w", t.Callback, err, perr))
		}
		log.WarnContext(ctx, "stackup request failed, FAILED callback published",
			slog.String("callback", t.Callback), slog.String("error_code", sig.Code),
			slog.Bool("retriable", sig.Retriable), slog.Any("error", perr))
		return nil
	}
}

// Waits in the guard: a live lease of another worker is polled this often at
// most; an unavailable inbox or outbox (the database) is retried with a
// backoff from infraBackoffInitial doubling to infraBackoffMax.
const (
	leasePoll           = time.Second
	infraBackoffInitial = 100 * time.Millisecond
	infraBackoffMax     = 5 * time.Second
)

// lease claims the request's work. Another worker's live lease is waited
// out here instead of failing the attempt: the delivery is kept (never
// acknowledged) and spends none of the §6 attempts, which belong to the
// work. Counted, they ran out while a killed worker's lease was still live
// (a kill mid-call, then a kill of the next worker while it waited): the
// request was dead-lettered with nobody left to answer it. A transient
// inbox failure (the database) is waited out the same way. Both end with
// ctx, the route's handler timeout.
func (w *Worker) lease(ctx context.Context, log *slog.Logger, consumer, id string) (*inbox.Lease, error) {
	backoff, logged := infraBackoffInitial, false
	for {
		l, err := w.cfg.Inbox.Lease(ctx, consumer, id, w.leaseTTL())
		if err == nil || failure.Of(err) != failure.Transient || ctx.Err() != nil {
			return l, err
		}
		wait := backoff
		if errors.Is(err, inbox.ErrLeased) {
			wait = min(max(failure.RetryAfter(err), infraBackoffInitial), leasePoll)
			if !logged {
				log.InfoContext(ctx, "stackup request held by another worker's lease; waiting for it", slog.Any("reason", err))
				logged = true
			}
		} else {
			backoff = min(2*backoff, infraBackoffMax)
			log.WarnContext(ctx, "stackup inbox unavailable; waiting", slog.Duration("wait", wait), slog.Any("error", err))
		}
		if !sleep(ctx, wait) {
			return nil, err
		}
	}
}

// answerWaiting is answer, retried while it fails before committing with a
// transient error — the database holding the marker and the callback's
// outbox row is unavailable — until ctx ends. The work is done and the
// callback is one transaction away: a database blip must not send the
// request to the DLQ. A retry after an ambiguous commit finds the marker
// (failure.Duplicate: answered once). Without an outbox the callback is
// published before the marker, so a retry could publish it twice: not
// retried; nor is a callback committed but not published
// (*outbox.NotPublishedError).
func (w *Worker) answerWaiting(ctx context.Context, log *slog.Logger, consumer string, d catalog.Delivery, msg *message.Message, topic string) error {
	backoff := infraBackoffInitial
	for {
		err := w.answer(ctx, consumer, d, msg, topic)
		var np *outbox.NotPublishedError
		if err == nil || w.cfg.Outbox == nil || failure.Of(err) != failure.Transient || errors.As(err, &np) || ctx.Err() != nil {
			return err
		}
		log.WarnContext(ctx, "stackup callback not written (database unavailable); retrying", slog.String("topic", topic),
			slog.Duration("wait", backoff), slog.Any("error", err))
		if !sleep(ctx, backoff) {
			return err
		}
		backoff = min(2*backoff, infraBackoffMax)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (w *Worker) leaseTTL() time.Duration {
	if w.cfg.LeaseTTL > 0 {
		return w.cfg.LeaseTTL
	}
	return DefaultLeaseTTL
}

// answer sends the callback and writes the processed marker as one step. With
// an outbox writer the callback is written in the marker's transaction (a
// failed after-commit publish of the memory twin unmarks, so that the request
// is never marked without an answer); without one it is published first and
// marked after. A twin that answered first makes it a failure.Duplicate and
// sends nothing.
func (w *Worker) answer(ctx context.Context, consumer string, d catalog.Delivery, msg *message.Message, topic string) error {
	id := d.Envelope.MessageID
	if w.cfg.Outbox == nil {
		if err := w.cfg.Publisher.Publish(topic, msg); err != nil {
			return fmt.Errorf("publish %s: %w", topic, err)
		}
		return w.cfg.Inbox.Process(ctx, consumer, id, func(context.Context) error { return nil })
	}
	err := outbox.Unit(ctx, func(ctx context.Context) error {
		return w.cfg.Inbox.Process(ctx, consumer, id, func(ctx context.Context) error {
			return w.cfg.Outbox.Write(ctx, topic, msg)
		})
	})
	if np := (*outbox.NotPublishedError)(nil); errors.As(err, &np) {
		if uerr := w.cfg.Inbox.Unmark(context.WithoutCancel(ctx), consumer, id); uerr != nil {
			w.cfg.Logger.ErrorContext(ctx, "stackup: inbox unmark failed; a redrive of this message would be skipped",
				append(d.Attrs(), slog.Any("error", uerr))...)
		}
	}
	return err
}

var errPanic = errors.New("processor panicked")

// errAssembly marks a callback that could not be assembled from the
// processor's result: the payload does not encode, or our strict encoder
// refuses it (an unknown field, a value off the schema). It also wraps
// ErrSchemaInvalid: GENERATION_SCHEMA_INVALID, not retriable.
var errAssembly = errors.New("assemble the callback")

// assemble encodes the success callback of messageType from the processor's
// result; an error wraps errAssembly and ErrSchemaInvalid.
func (w *Worker) assemble(ctx context.Context, messageType string, d catalog.Delivery, p catalog.Payload) (*message.Message, string, error) {
	msg, topic, err := w.encode(ctx, messageType, d, p)
	if err != nil {
		return nil, "", fmt.Errorf("%w %s: %w: %w", errAssembly, messageType, ErrSchemaInvalid, err)
	}
	return msg, topic, nil
}

// retryable reports a failure worth another in-process attempt (§6 row 1:
// a transient outage). A domain error, output off the schema (the same
// prompt fails the same way) and a panic are answered at once.
func retryable(err error) bool {
	var de *DomainError
	return !errors.As(err, &de) && !errors.Is(err, errPanic) && !schemaInvalid(err) && failure.Of(err) == failure.Transient
}

func schemaInvalid(err error) bool {
	return errors.Is(err, ErrSchemaInvalid) || errors.Is(err, llm.ErrInvalidOutput)
}

// run calls the processor; a panic becomes an error (UNEXPECTED), so that it
// too ends in a FAILED callback.
func run(ctx context.Context, vh VersionHandler, job Job, req catalog.Payload) (res catalog.Payload, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v\n%s", errPanic, r, debug.Stack())
		}
	}()
	return vh.Process(ctx, job, req)
}

// encode builds the callback of messageType for delivery d.
func (w *Worker) encode(ctx context.Context, messageType string, d catalog.Delivery, p catalog.Payload) (*message.Message, string, error) {
	return w.cfg.Catalog.Encode(ctx, catalog.Outgoing{
		Type: messageType, Publisher: envelope.PublisherAI, Payload: p, Context: d.Envelope.Context,
		TraceID: d.Envelope.TraceID, CorrelationID: d.Envelope.MessageID,
	})
}

func (w *Worker) notify(ctx context.Context, d catalog.Delivery, messageType, eventType string, data any) {
	raw, err := jsonRaw(data)
	if err == nil {
		var msg *message.Message
		var topic string
		msg, topic, err = w.cfg.Catalog.Encode(ctx, catalog.Outgoing{
			Type: messageType, Publisher: envelope.PublisherAI, Payload: &catalog.NotifyV1{EventType: eventType, Data: raw},
			Context: d.Envelope.Context, TraceID: d.Envelope.TraceID,
		})
		if err == nil {
			err = w.cfg.Publisher.Publish(topic, msg)
		}
	}
	if err != nil {
		w.cfg.Logger.WarnContext(ctx, "stackup progress notification not published (ignored)",
			append(d.Attrs(), slog.String("event_type", eventType), slog.Any("error", err))...)
	}
}

// Signal classifies a processor error into the FAILED callback's errorCode,
// retriable and errorMessage (§5.7, §5.11, §6).
func Signal(messageType string, err error) FailureSignal {
	sig := FailureSignal{Message: ErrorMessage(err)}
	var de *DomainError
	switch {
	case errors.As(err, &de):
		sig.Code, sig.Retriable = de.Code, de.Retriable
	case schemaInvalid(err):
		sig.Code, sig.Retriable = catalog.ErrGenerationSchemaInvalid, false
	case errors.Is(err, errPanic), messageType == catalog.GenerateFeedback:
		// §5.11: anything else in feedback is UNEXPECTED, retriable.
		sig.Code, sig.Retriable = catalog.ErrUnexpected, true
	case messageType == catalog.GenerateQuestions, messageType == catalog.GenerateFollowup:
		sig.Code, sig.Retriable = catalog.ErrGenerationFailed, failure.Of(err) != failure.Permanent
	default:
		sig.Code, sig.Retriable = catalog.ErrUnexpected, failure.Of(err) != failure.Permanent
	}
	return sig
}

// ErrorMessage renders err as the spec's "ExcType: msg", at most
// MaxErrorMessage characters. ExcType is the Go type of the most specific
// error in the chain (wrappers skipped); a DomainError names its own.
func ErrorMessage(err error) string {
	if err == nil {
		return ""
	}
	s := excType(err) + ": " + err.Error()
	if utf8.RuneCountInString(s) <= MaxErrorMessage {
		return s
	}
	r := []rune(s)
	return string(r[:MaxErrorMessage])
}

func excType(err error) string {
	var de *DomainError
	if errors.As(err, &de) && de.Type != "" {
		return de.Type
	}
	name := "Error"
	for e := err; e != nil; e = errors.Unwrap(e) {
		t := reflect.TypeOf(e)
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case t.PkgPath() == "fmt", t.PkgPath() == "errors",
			t.PkgPath() == "github.com/eventpipe/eventpipe/app/failure":
			// Wrappers and plain errors.New say nothing of the kind.
		default:
			name = t.Name()
		}
	}
	return name
}
