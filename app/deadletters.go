package app

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/metadata"
)

// DeadLetterView is what `eventpipe dlq peek` and the console show of one
// dead letter.
type DeadLetterView struct {
	ID   string `json:"id"`
	Size int    `json:"size"`
	// History is why the message is in the dead-letter queue. It is
	// eventpipe's record (metadata.DeadLetterKey) when there is one, else
	// what the headers of another dead-letterer say (HistoryFrom); nil for
	// a message the broker moved on its own without a word (an SQS redrive
	// policy).
	History *metadata.DeadLetter `json:"history,omitempty"`
	// HistoryFrom names the source of History: "eventpipe" (x-dead-letter),
	// "spring" (RepublishMessageRecoverer's x-exception-message and
	// x-original-* headers), "rabbitmq" (the broker's x-death table).
	HistoryFrom string            `json:"history_from,omitempty"`
	Metadata    map[string]string `json:"metadata"`
	// Body is the payload as text when it is valid UTF-8; BodyBinary is
	// true (and Body empty) otherwise.
	Body       string `json:"body"`
	BodyBinary bool   `json:"body_binary,omitempty"`
}

// DeadLetterPeek is one read of a dead-letter queue.
type DeadLetterPeek struct {
	Letters []DeadLetterView `json:"letters"`
	// Complete is true when Letters are the whole queue.
	Complete bool `json:"complete"`
	// Effects is what reading changed in the queue (broker.Peeked).
	Effects string `json:"effects,omitempty"`
}

// errNoPeek is PeekDeadLetters' error for a broker without broker.Peeker.
var errNoPeek = errors.New("this broker cannot show a queue's messages without taking them (the memory broker's queues live inside the serve process)")

// PeekDeadLetters returns up to max messages of the dead-letter queue dlq
// without taking them, through the broker's read-only peek
// (broker.Peeker; decision 0029 says what each broker changes doing so).
func PeekDeadLetters(ctx context.Context, b any, dlq string, max int) (DeadLetterPeek, error) {
	peeker, ok := b.(broker.Peeker)
	if !ok {
		return DeadLetterPeek{}, errNoPeek
	}
	got, err := peeker.Peek(ctx, dlq, max)
	if err != nil {
		return DeadLetterPeek{}, fmt.Errorf("peek %s: %w", dlq, err)
	}
	out := DeadLetterPeek{Complete: got.Complete, Effects: got.Effects}
	for _, msg := range got.Messages {
		out.Letters = append(out.Letters, viewOf(msg))
	}
	return out, nil
}

// viewOf is what a peek shows of msg.
func viewOf(msg *message.Message) DeadLetterView {
	v := DeadLetterView{ID: msg.UUID, Size: len(msg.Payload), Metadata: maps.Clone(map[string]string(msg.Metadata))}
	if v.Metadata == nil {
		v.Metadata = map[string]string{}
	}
	if utf8.Valid(msg.Payload) {
		v.Body = string(msg.Payload)
	} else {
		v.BodyBinary = true
	}
	v.History, v.HistoryFrom = historyOf(msg)
	if v.HistoryFrom == "eventpipe" {
		delete(v.Metadata, metadata.DeadLetterKey)
	}
	return v
}

// Spring AMQP's RepublishMessageRecoverer headers, which RabbitMQ dead
// letters may carry next to (or, from a foreign service, instead of)
// eventpipe's record.
const (
	springExceptionMessage = "x-exception-message"
	springOriginalExchange = "x-original-exchange"
	springOriginalKey      = "x-original-routingKey"
)

// historyOf reads why msg was dead-lettered, from the first of: eventpipe's
// x-dead-letter record; Spring's x-exception-message (with x-original-*),
// the typed headers another dead-letterer — or a later eventpipe — writes;
// RabbitMQ's own x-death table (a broker reject, an expiry, a delivery
// limit). A record that does not decode falls through to the next.
func historyOf(msg *message.Message) (*metadata.DeadLetter, string) {
	if info, ok, err := metadata.DeadLetterOf(msg); err == nil && ok {
		return &info, "eventpipe"
	}
	if reason := msg.Metadata.Get(springExceptionMessage); reason != "" {
		h := &metadata.DeadLetter{Reason: reason, TraceID: msg.Metadata.Get(metadata.TraceIDKey)}
		// The original routing key names the queue only through the
		// default exchange.
		if msg.Metadata.Get(springOriginalExchange) == "" {
			h.SourceQueue = msg.Metadata.Get(springOriginalKey)
		}
		return h, "spring"
	}
	if raw := msg.Metadata.Get("x-death"); raw != "" {
		var deaths []struct {
			Queue  string `json:"queue"`
			Reason string `json:"reason"`
			Count  int    `json:"count"`
			Time   string `json:"time"`
		}
		if json.Unmarshal([]byte(raw), &deaths) == nil && len(deaths) > 0 {
			d := deaths[0]
			h := &metadata.DeadLetter{Reason: "dead-lettered by RabbitMQ: " + d.Reason, Class: "broker", Attempts: d.Count,
				SourceQueue: d.Queue, TraceID: msg.Metadata.Get(metadata.TraceIDKey)}
			if at, err := time.Parse(time.RFC3339, d.Time); err == nil {
				h.DeadLetteredAt = at
			}
			return h, "rabbitmq"
		}
	}
	return nil, ""
}

// DeadLetterGroup is the dead letters of one queue that failed alike: the
// same class and reason, once the reason's variable parts (ids, numbers) are
// masked.
type DeadLetterGroup struct {
	// Key identifies the group within its queue (RedriveOptions.Group).
	Key string `json:"key"`
	// Reason is the masked reason; Example one reason as it was.
	Reason  string `json:"reason"`
	Example string `json:"example"`
	Class   string `json:"class"`
	Count   int    `json:"count"`
	// FirstSeen and LastSeen are the earliest and latest dead-lettering
	// times in the group (zero when no dead letter says).
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	IDs       []string  `json:"ids"`
}

var (
	uuidPattern   = regexp.MustCompile(`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`)
	numberPattern = regexp.MustCompile(`\d+`)
	quotedPattern = regexp.MustCompile(`"[^"]*"`)
)

// noHistory is the reason shown for a dead letter without any.
const noHistory = "moved by the broker without a reason (redrive policy or delivery limit)"

// GroupKey is the group of a dead letter: its class and masked reason.
func GroupKey(v DeadLetterView) (key, reason, class string) {
	reason, class = noHistory, "unknown"
	if v.History != nil {
		reason, class = v.History.Reason, v.History.Class
		if class == "" {
			class = "unknown"
		}
	}
	masked := uuidPattern.ReplaceAllString(reason, "<id>")
	masked = quotedPattern.ReplaceAllString(masked, `"…"`)
	masked = numberPattern.ReplaceAllString(masked, "<n>")
	if len(masked) > 300 {
		masked = masked[:300] + "…"
	}
	sum := metadata.DerivedDeduplicationID(message.NewMessage(class, nil), masked)
	return sum[:12], masked, class
}

// GroupDeadLetters groups dead letters by class and masked reason, the
// largest group first.
func GroupDeadLetters(letters []DeadLetterView) []DeadLetterGroup {
	byKey := map[string]*DeadLetterGroup{}
	var order []string
	for _, v := range letters {
		key, reason, class := GroupKey(v)
		g, ok := byKey[key]
		if !ok {
			g = &DeadLetterGroup{Key: key, Reason: reason, Class: class}
			if v.History != nil {
				g.Example = v.History.Reason
			}
			byKey[key] = g
			order = append(order, key)
		}
		g.Count++
		g.IDs = append(g.IDs, v.ID)
		if v.History != nil && !v.History.DeadLetteredAt.IsZero() {
			at := v.History.DeadLetteredAt
			if g.FirstSeen.IsZero() || at.Before(g.FirstSeen) {
				g.FirstSeen = at
			}
			if at.After(g.LastSeen) {
				g.LastSeen = at
			}
		}
	}
	out := make([]DeadLetterGroup, 0, len(order))
	for _, k := range order {
		out = append(out, *byKey[k])
	}
	slices.SortStableFunc(out, func(a, b DeadLetterGroup) int { return b.Count - a.Count })
	return out
}

// Redriven is one dead letter sent back (or, in a dry run, that would be).
type Redriven struct {
	ID string `json:"id"`
	To string `json:"to"`
	// Edited is true for a copy sent with an edited body.
	Edited bool `json:"edited,omitempty"`
	// Discarded is true for a dead letter removed without a copy.
	Discarded bool `json:"discarded,omitempty"`
	// Moved, when not zero, is the number of messages the broker moved
	// itself in one move (broker.MessageMover: SQS's message move task),
	// which names none of them; ID is then empty.
	Moved int64 `json:"moved,omitempty"`
}

// Count is how many dead letters r stands for: Moved, else one.
func (r Redriven) Count() int64 {
	if r.Moved > 0 {
		return r.Moved
	}
	return 1
}

// RedriveDeadLetters moves up to max messages (0 = all) of the dead-letter
// queue dlq back to to, or else to each one's source queue: Redrive with
// those options and no selection.
func RedriveDeadLetters(ctx context.Context, sub message.Subscriber, pub message.Publisher, dlq, to string, max int, idle time.Duration) ([]Redriven, error) {
	return Redrive(ctx, sub, pub, dlq, RedriveOptions{To: to, Max: max, Idle: idle})
}

// RedriveOptions says which dead letters a Redrive moves, where, and how.
type RedriveOptions struct {
	// To is the queue every dead letter goes to; empty: each one's source
	// queue (its history's, else the one queue the broker says dead-letters
	// into the DLQ, broker.DeadLetterSourcer).
	To string
	// Max is the most dead letters to move (0 = all).
	Max int
	// Idle ends the redrive when no message arrives for this long; 0 is
	// 5 s.
	Idle time.Duration
	// IDs, when set, are the only dead letters moved; Group, when set, the
	// group (GroupKey: the key or the masked reason) they must be in. The
	// others are left in the queue: passed over once, each republished
	// unchanged to the back of the DLQ, then acked (a broker cannot take a
	// message out of the middle of a queue).
	IDs   []string
	Group string
	// DryRun reads the queue with a peek (PeekDeadLetters) and returns what
	// would be moved where, changing nothing.
	DryRun bool
	// Rate caps the messages moved per second (0 = no cap).
	Rate float64
	// Canary moves one dead letter first and watches the DLQ for
	// CanaryWait (0 = 10 s): if it comes back, the redrive stops with a
	// *CanaryError and the rest stay; otherwise the rest follow.
	Canary     bool
	CanaryWait time.Duration
	// Edits replaces the body of the copy of the dead letters it names
	// (by id); Validate, when set, checks an edited body for its target
	// queue before anything is sent, and a refusal stops the redrive with
	// that error. The dead letter itself is acked only once the copy is
	// sent, and the copy records the edit (EditedByKey).
	Edits    map[string][]byte
	Validate func(queue string, body []byte) error
	// Discard acks the selected dead letters without sending a copy.
	Discard bool
	// Principal is who asked (the console's JWT subject, the CLI's user);
	// an edited copy names them.
	Principal string
	// Progress, when set, is called after each dead letter moved, with
	// counts and time since the start of the whole redrive (the canary's
	// included).
	Progress func(RedriveProgress)
}

// EditedByKey is the metadata key of an edited copy's record: who edited
// it, when, and the SHA-256 of the body it replaced, as JSON.
const EditedByKey = "x-eventpipe-edited"

// RedriveProgress is how far a Redrive is.
type RedriveProgress struct {
	Done    int      `json:"done"`
	Skipped int      `json:"skipped"`
	Last    Redriven `json:"last"`
	// Elapsed is since the redrive started.
	Elapsed time.Duration `json:"elapsed"`
}

// CanaryError is Redrive's error when the canary came back to the DLQ.
type CanaryError struct {
	ID     string
	Reason string
}

func (e *CanaryError) Error() string {
	return fmt.Sprintf("the canary %s came back to the dead-letter queue (%s): the rest were left there", e.ID, e.Reason)
}

// Redrive moves dead letters of dlq as opts says. A copy keeps the message
// id (the consumer's inbox still knows it), body and metadata (a FIFO
// message's group too), without the dead-letter history and attempt count,
// with a deduplication id of its own, derived from the dead letter's
// (metadata.DerivedDeduplicationID): on an SQS FIFO queue the original's
// would make SQS drop a copy redriven within five minutes of the original.
// The dead letter is acked only after its copy is published. It stops at
// Max, when none arrives for Idle, after one pass over the queue (a message
// it passed over comes round again) or when every id of IDs is done, and at
// the first message it cannot place (no history, no source the broker names,
// no To), which it leaves in the queue.
func Redrive(ctx context.Context, sub message.Subscriber, pub message.Publisher, dlq string, opts RedriveOptions) ([]Redriven, error) {
	if opts.Idle == 0 {
		opts.Idle = 5 * time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	brokerSource := sync.OnceValues(func() (string, error) { return deadLetterSource(ctx, sub, dlq) })
	target := func(v DeadLetterView) (string, error) {
		if opts.To != "" {
			return opts.To, nil
		}
		if v.History != nil && v.History.SourceQueue != "" {
			return v.History.SourceQueue, nil
		}
		src, err := brokerSource()
		if err != nil {
			return "", fmt.Errorf("message %s has no dead-letter history naming its source queue, and %w: redrive it with --to", v.ID, err)
		}
		return src, nil
	}
	if opts.DryRun {
		return dryRun(ctx, sub, dlq, opts, target)
	}
	if opts.Canary {
		began := time.Now()
		canaryOpts := opts
		canaryOpts.Canary, canaryOpts.Max = false, 1
		done, err := Redrive(ctx, sub, pub, dlq, canaryOpts)
		if err != nil || len(done) == 0 {
			return done, err
		}
		if err := watchCanary(ctx, sub, dlq, done[0].ID, opts.CanaryWait); err != nil {
			return done, err
		}
		if opts.Max == 1 {
			return done, nil
		}
		rest := opts
		rest.Canary = false
		if rest.Max > 0 {
			rest.Max--
		}
		if opts.Progress != nil {
			// The rest's counts and time go on from the canary's.
			rest.Progress = func(p RedriveProgress) {
				p.Done += len(done)
				p.Elapsed = time.Since(began)
				opts.Progress(p)
			}
		}
		more, err := Redrive(ctx, sub, pub, dlq, rest)
		return append(done, more...), err
	}

	if mover, ok := sub.(broker.MessageMover); ok && wholeQueue(opts) {
		if to, ok := brokerFilled(ctx, sub, dlq, opts, target); ok {
			return brokerMove(ctx, mover, dlq, to, opts)
		}
	}

	if br, ok := sub.(broker.BatchReceiver); ok && len(opts.IDs) == 0 && opts.Group == "" && len(opts.Edits) == 0 && !opts.Discard {
		return redriveInBatches(ctx, br, pub, dlq, opts, target)
	}

	msgs, err := sub.Subscribe(ctx, dlq)
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", dlq, err)
	}
	wanted := map[string]bool{}
	for _, id := range opts.IDs {
		wanted[id] = true
	}
	var limiter <-chan time.Time
	if opts.Rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / opts.Rate))
		defer t.Stop()
		limiter = t.C
	}
	start := time.Now()
	passed := map[string]bool{}
	var done []Redriven
	for opts.Max == 0 || len(done) < opts.Max {
		if len(opts.IDs) > 0 && len(wanted) == 0 {
			break
		}
		msg, err := next(ctx, msgs, opts.Idle)
		if err != nil || msg == nil {
			return done, err
		}
		if passed[msg.UUID] {
			giveBack(msg) // round once: the rest is not selected
			break
		}
		v := viewOf(msg)
		if !selected(v, opts, wanted) {
			if err := passOver(ctx, pub, dlq, msg); err != nil {
				giveBack(msg)
				return done, err
			}
			passed[msg.UUID] = true
			continue
		}
		if limiter != nil {
			select {
			case <-limiter:
			case <-ctx.Done():
				giveBack(msg)
				return done, ctx.Err()
			}
		}
		r, err := moveOne(ctx, pub, msg, v, opts, target)
		if err != nil {
			giveBack(msg)
			return done, err
		}
		msg.Ack()
		delete(wanted, msg.UUID)
		done = append(done, r)
		if opts.Progress != nil {
			opts.Progress(RedriveProgress{Done: len(done), Skipped: len(passed), Last: r, Elapsed: time.Since(start)})
		}
	}
	return done, nil
}

// wholeQueue reports whether opts move every dead letter unchanged: no
// selection, edit, discard or limit.
func wholeQueue(opts RedriveOptions) bool {
	return len(opts.IDs) == 0 && opts.Group == "" && len(opts.Edits) == 0 && !opts.Discard && opts.Max == 0
}

// brokerFilled reports whether dlq was filled by the broker's own policy —
// none of the first dead letters a peek shows carries a history (a DLQ
// eventpipe writes to keeps its record, which the copy must drop, so it is
// moved message by message) — and where they go: To, else the one source
// the broker names.
func brokerFilled(ctx context.Context, sub message.Subscriber, dlq string, opts RedriveOptions, target func(DeadLetterView) (string, error)) (string, bool) {
	peek, err := PeekDeadLetters(ctx, sub, dlq, 100)
	if err != nil || len(peek.Letters) == 0 {
		return "", false
	}
	for _, v := range peek.Letters {
		if v.History != nil {
			return "", false
		}
	}
	to, err := target(peek.Letters[0])
	if err != nil {
		return "", false // the message-by-message redrive says why
	}
	return to, true
}

// brokerMove has the broker move every message of dlq to to.
func brokerMove(ctx context.Context, mover broker.MessageMover, dlq, to string, opts RedriveOptions) ([]Redriven, error) {
	start := time.Now()
	var progress func(int64)
	if opts.Progress != nil {
		progress = func(n int64) {
			opts.Progress(RedriveProgress{Done: int(n), Last: Redriven{To: to, Moved: n}, Elapsed: time.Since(start)})
		}
	}
	n, err := mover.MoveMessages(ctx, dlq, to, int(math.Ceil(opts.Rate)), progress)
	if n == 0 {
		return nil, err
	}
	return []Redriven{{To: to, Moved: n}}, err
}

// selected reports whether a dead letter is one opts asks to move.
func selected(v DeadLetterView, opts RedriveOptions, wanted map[string]bool) bool {
	if len(opts.IDs) > 0 && !wanted[v.ID] {
		return false
	}
	if opts.Group != "" {
		key, reason, _ := GroupKey(v)
		if opts.Group != key && opts.Group != reason && (v.History == nil || opts.Group != v.History.Reason) {
			return false
		}
	}
	return true
}

// redriveBatch is the most dead letters a batched redrive reads, publishes
// and acks at once.
const redriveBatch = 100

// redriveInBatches is Redrive without a selection on a broker that hands out
// batches: each batch's copies are published together (pipelined with
// confirms on RabbitMQ, one call per target queue), then the batch is acked
// at once. A failure gives the whole batch back; copies already confirmed
// then have a duplicate in the DLQ with the same id, never a loss.
func redriveInBatches(ctx context.Context, br broker.BatchReceiver, pub message.Publisher, dlq string, opts RedriveOptions, target func(DeadLetterView) (string, error)) ([]Redriven, error) {
	size := redriveBatch
	if opts.Max > 0 {
		size = min(size, opts.Max)
	}
	reader, err := br.ReceiveBatches(ctx, dlq, size)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dlq, err)
	}
	defer func() { _ = reader.Close() }()
	var limiter <-chan time.Time
	if opts.Rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / opts.Rate))
		defer t.Stop()
		limiter = t.C
	}
	start := time.Now()
	var done []Redriven
	for opts.Max == 0 || len(done) < opts.Max {
		limit := size
		if opts.Max > 0 {
			limit = min(limit, opts.Max-len(done))
		}
		msgs, err := reader.Next(ctx, limit, opts.Idle)
		if err != nil || len(msgs) == 0 {
			return done, err
		}
		var (
			order  []string
			copies = map[string][]*message.Message{}
			batch  []Redriven
		)
		for _, msg := range msgs {
			if limiter != nil {
				select {
				case <-limiter:
				case <-ctx.Done():
					return done, ctx.Err()
				}
			}
			r, again, err := copyOf(ctx, msg, viewOf(msg), opts, target)
			if err != nil {
				return done, err
			}
			if _, ok := copies[r.To]; !ok {
				order = append(order, r.To)
			}
			copies[r.To] = append(copies[r.To], again)
			batch = append(batch, r)
		}
		for _, to := range order {
			if err := pub.Publish(to, copies[to]...); err != nil {
				return done, fmt.Errorf("redrive %d message(s) to %s: %w", len(copies[to]), to, err)
			}
		}
		if err := reader.Ack(); err != nil {
			return done, fmt.Errorf("the copies are sent, the dead letters stay (duplicates with the same ids): %w", err)
		}
		for _, r := range batch {
			done = append(done, r)
			if opts.Progress != nil {
				opts.Progress(RedriveProgress{Done: len(done), Last: r, Elapsed: time.Since(start)})
			}
		}
	}
	return done, nil
}

// moveOne publishes the copy of one dead letter (or, discarding, nothing).
func moveOne(ctx context.Context, pub message.Publisher, msg *message.Message, v DeadLetterView, opts RedriveOptions, target func(DeadLetterView) (string, error)) (Redriven, error) {
	if opts.Discard {
		return Redriven{ID: msg.UUID, Discarded: true}, nil
	}
	r, again, err := copyOf(ctx, msg, v, opts, target)
	if err != nil {
		return Redriven{}, err
	}
	if err := pub.Publish(r.To, again); err != nil {
		return Redriven{}, fmt.Errorf("redrive %s to %s: %w", msg.UUID, r.To, err)
	}
	return r, nil
}

// copyOf is the copy of one dead letter a redrive sends, and where.
func copyOf(ctx context.Context, msg *message.Message, v DeadLetterView, opts RedriveOptions, target func(DeadLetterView) (string, error)) (Redriven, *message.Message, error) {
	to, err := target(v)
	if err != nil {
		return Redriven{}, nil, err
	}
	body, edited := opts.Edits[msg.UUID]
	if !edited {
		body = msg.Payload
	} else if opts.Validate != nil {
		if err := opts.Validate(to, body); err != nil {
			return Redriven{}, nil, fmt.Errorf("edited body of %s refused by %s's validation, nothing sent: %w", msg.UUID, to, err)
		}
	}
	again := message.NewMessage(msg.UUID, body)
	for k, val := range msg.Metadata {
		switch k {
		case metadata.DeadLetterKey, metadata.AttemptKey, metadata.FirstFailureKey, metadata.NackDelayKey, metadata.ExplicitNackDelayKey:
		default:
			again.Metadata.Set(k, val)
		}
	}
	reason := "redrive " + msg.Metadata.Get(metadata.DeadLetterKey)
	if edited {
		record, _ := json.Marshal(map[string]any{"by": opts.Principal, "at": time.Now().UTC(), "replaced_sha256": fmt.Sprintf("%x", sha256.Sum256(msg.Payload))})
		again.Metadata.Set(EditedByKey, string(record))
		reason += " edited " + string(body)
	}
	// The history tells one dead-lettering of the message from the next;
	// the same dead letter redriven twice (its ack lost) gets the same id,
	// so the source queue still drops the second copy.
	again.Metadata.Set(metadata.DeduplicationIDKey, metadata.DerivedDeduplicationID(msg, reason))
	again.SetContext(ctx)
	return Redriven{ID: msg.UUID, To: to, Edited: edited}, again, nil
}

// passOver moves a dead letter a selective redrive leaves to the back of its
// queue: an unchanged copy (id, body, metadata with its history), then the
// ack. Nacking it instead would count an attempt (RabbitMQ's counted
// redelivery) or bring it straight back (the Postgres broker's claim order).
func passOver(ctx context.Context, pub message.Publisher, dlq string, msg *message.Message) error {
	again := message.NewMessage(msg.UUID, msg.Payload)
	for k, v := range msg.Metadata {
		switch k {
		case metadata.AttemptKey, metadata.FirstFailureKey, metadata.NackDelayKey, metadata.ExplicitNackDelayKey:
		default:
			again.Metadata.Set(k, v)
		}
	}
	// A new deduplication id each pass: a FIFO DLQ must not drop the copy.
	again.Metadata.Set(metadata.DeduplicationIDKey, metadata.DerivedDeduplicationID(msg, "pass over "+time.Now().String()))
	again.SetContext(ctx)
	if err := pub.Publish(dlq, again); err != nil {
		return fmt.Errorf("leave %s in %s: %w", msg.UUID, dlq, err)
	}
	msg.Ack()
	return nil
}

// dryRun is what Redrive would do, read with a peek.
func dryRun(ctx context.Context, sub message.Subscriber, dlq string, opts RedriveOptions, target func(DeadLetterView) (string, error)) ([]Redriven, error) {
	limit := opts.Max
	if limit == 0 || len(opts.IDs) > 0 || opts.Group != "" {
		limit = 10000
	}
	peek, err := PeekDeadLetters(ctx, sub, dlq, limit)
	if err != nil {
		return nil, err
	}
	wanted := map[string]bool{}
	for _, id := range opts.IDs {
		wanted[id] = true
	}
	var out []Redriven
	for _, v := range peek.Letters {
		if opts.Max > 0 && len(out) == opts.Max {
			break
		}
		if !selected(v, opts, wanted) {
			continue
		}
		if opts.Discard {
			out = append(out, Redriven{ID: v.ID, Discarded: true})
			continue
		}
		to, err := target(v)
		if err != nil {
			return out, err
		}
		body, edited := opts.Edits[v.ID]
		if edited && opts.Validate != nil {
			if err := opts.Validate(to, body); err != nil {
				return out, fmt.Errorf("edited body of %s refused by %s's validation: %w", v.ID, to, err)
			}
		}
		out = append(out, Redriven{ID: v.ID, To: to, Edited: edited})
	}
	return out, nil
}

// watchCanary peeks dlq every second for wait (0 = 10 s) and fails when the
// canary id is back.
func watchCanary(ctx context.Context, sub message.Subscriber, dlq, id string, wait time.Duration) error {
	if wait == 0 {
		wait = 10 * time.Second
	}
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		peek, err := PeekDeadLetters(ctx, sub, dlq, 10000)
		if err != nil {
			return fmt.Errorf("watch the canary %s: %w", id, err)
		}
		for _, v := range peek.Letters {
			if v.ID == id {
				reason := "no reason recorded"
				if v.History != nil {
					reason = v.History.Reason
				}
				return &CanaryError{ID: id, Reason: reason}
			}
		}
	}
	return nil
}

// deadLetterSource is the one queue the broker says dead-letters into dlq.
func deadLetterSource(ctx context.Context, sub message.Subscriber, dlq string) (string, error) {
	sourcer, ok := sub.(broker.DeadLetterSourcer)
	if !ok {
		return "", errors.New("the broker cannot name the queue that dead-letters here")
	}
	sources, err := sourcer.DeadLetterSources(ctx, dlq)
	switch {
	case err != nil:
		return "", fmt.Errorf("the broker could not name its source: %w", err)
	case len(sources) == 0:
		return "", fmt.Errorf("no queue's redrive policy targets %s", dlq)
	case len(sources) > 1:
		return "", fmt.Errorf("several queues dead-letter to %s (%s)", dlq, strings.Join(sources, ", "))
	}
	return sources[0], nil
}

// giveBack nacks msg asking for its redelivery at once, explicitly: a
// redrive that stops must leave the dead letter where the next command
// finds it, not hidden for the queue's visibility timeout (a plain nack on
// SQS leaves the visibility as it is).
func giveBack(msg *message.Message) {
	msg.Metadata.Set(metadata.NackDelayKey, "0s")
	msg.Metadata.Set(metadata.ExplicitNackDelayKey, "true")
	msg.Nack()
}

// next waits up to idle for a message; nil when none came.
func next(ctx context.Context, msgs <-chan *message.Message, idle time.Duration) (*message.Message, error) {
	t := time.NewTimer(idle)
	defer t.Stop()
	select {
	case msg, ok := <-msgs:
		if !ok {
			return nil, errors.New("subscription closed")
		}
		return msg, nil
	case <-t.C:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
