package disputes

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/eventpipe/eventpipe/app/jsonfields"
	"github.com/eventpipe/eventpipe/app/schemas"
)

// Reason codes the consumer treats specially.
const (
	// ReasonFailedButDebited: the customer was debited for a payment that
	// failed; on UPI such a dispute is eligible for auto-reversal (§2).
	ReasonFailedButDebited = "failed_but_debited"
	// RailUPI is the payment rail auto-reversal applies to.
	RailUPI = "UPI"
)

// MaxRiskScore bounds TransactionFlagged's risk_score: scores are 0–100.
const MaxRiskScore = 100

// DisputeRaised is the payload of DisputeRaised (raise_dispute). The
// aggregate id is the dispute id.
type DisputeRaised struct {
	TxnID      string `json:"txn_id"`
	ReasonCode string `json:"reason_code"`
	// TATDueAt is when the dispute must be resolved; nil lets the consumer
	// apply its default (Handlers.DefaultTAT after occurred_at).
	TATDueAt *time.Time `json:"-"`
	// Rail is the payment rail ("UPI", "CARD", …); optional, our extension:
	// auto-reversal needs it.
	Rail string `json:"rail,omitempty"`
}

// TransactionFlagged is the payload of TransactionFlagged
// (flag_transaction_for_review). The aggregate id is the transaction id.
type TransactionFlagged struct {
	TxnID string `json:"txn_id"`
	// RiskScore is 0–100; at or above the AML threshold the review is
	// escalated to AML.
	RiskScore float64 `json:"risk_score"`
	Reason    string  `json:"reason,omitempty"`
}

// DocumentIngested is the payload of DocumentIngested (ingest-worker). The
// aggregate id is the document id.
type DocumentIngested struct {
	Bucket string `json:"bucket"`
	Key    string `json:"key"`
}

// Event is a decoded payload: exactly one field is set.
type Event struct {
	DisputeRaised      *DisputeRaised
	TransactionFlagged *TransactionFlagged
	DocumentIngested   *DocumentIngested
}

func (e Event) aggregateType() string {
	switch {
	case e.DisputeRaised != nil:
		return AggregateDispute
	case e.TransactionFlagged != nil:
		return AggregateTransaction
	default:
		return AggregateDocument
	}
}

// payload encodes e's payload.
func (e Event) payload() (json.RawMessage, error) {
	switch {
	case e.DisputeRaised != nil:
		d := e.DisputeRaised
		w := struct {
			TxnID      string `json:"txn_id"`
			ReasonCode string `json:"reason_code"`
			TATDueAt   string `json:"tat_due_at,omitempty"`
			Rail       string `json:"rail,omitempty"`
		}{TxnID: d.TxnID, ReasonCode: d.ReasonCode, Rail: d.Rail}
		if d.TATDueAt != nil {
			w.TATDueAt = d.TATDueAt.UTC().Format(occurredAtLayout)
		}
		return json.Marshal(w)
	case e.TransactionFlagged != nil:
		return json.Marshal(e.TransactionFlagged)
	case e.DocumentIngested != nil:
		return json.Marshal(e.DocumentIngested)
	}
	return nil, fmt.Errorf("%w: empty event", ErrInvalidEnvelope)
}

// decodeEvent checks v, the body env was decoded from, against the schema
// of its event type in mode, then reads the payload. An unknown event_type
// or event_version is Go's dispatch, the rest the schema's.
func decodeEvent(env Envelope, v any, mode schemas.Mode) (Event, error) {
	switch env.EventType {
	case EventDisputeRaised, EventTransactionFlagged, EventDocumentIngested:
	default:
		return Event{}, fmt.Errorf("%w: %w %q", ErrInvalidEnvelope, ErrUnknownEventType, jsonfields.Truncate(env.EventType, 64))
	}
	if env.EventVersion != Version {
		return Event{}, invalid("%s event_version %d is not supported (want %d)", env.EventType, env.EventVersion, Version)
	}
	cat, err := schemas.Default()
	if err != nil {
		return Event{}, invalid("schemas: %v", err)
	}
	m, ok := cat.Message("disputes", env.EventType)
	if !ok {
		return Event{}, invalid("schemas: no %s", env.EventType)
	}
	if err := check(m, v, mode); err != nil {
		return Event{}, err
	}
	switch env.EventType {
	case EventDisputeRaised:
		var w struct {
			DisputeRaised
			TATDueAt *string `json:"tat_due_at"`
		}
		if err := json.Unmarshal(env.Payload, &w); err != nil {
			return Event{}, invalid("payload: %v", err)
		}
		d := w.DisputeRaised
		if w.TATDueAt != nil {
			t, err := time.Parse(time.RFC3339Nano, *w.TATDueAt)
			if err != nil {
				return Event{}, invalid("field payload.tat_due_at: not an RFC 3339 time")
			}
			t = t.UTC()
			d.TATDueAt = &t
		}
		return Event{DisputeRaised: &d}, nil
	case EventTransactionFlagged:
		var f TransactionFlagged
		if err := json.Unmarshal(env.Payload, &f); err != nil {
			return Event{}, invalid("payload: %v", err)
		}
		return Event{TransactionFlagged: &f}, nil
	default:
		var d DocumentIngested
		if err := json.Unmarshal(env.Payload, &d); err != nil {
			return Event{}, invalid("payload: %v", err)
		}
		return Event{DocumentIngested: &d}, nil
	}
}

// NewEnvelope builds the envelope of ev about aggregateID, with a fresh
// event id, occurred at now, in the trace traceID (a new one when empty).
func NewEnvelope(ev Event, aggregateID, traceID string, now time.Time) (Envelope, error) {
	p, err := ev.payload()
	if err != nil {
		return Envelope{}, err
	}
	var typ string
	switch {
	case ev.DisputeRaised != nil:
		typ = EventDisputeRaised
	case ev.TransactionFlagged != nil:
		typ = EventTransactionFlagged
	default:
		typ = EventDocumentIngested
	}
	if traceID == "" {
		traceID = newTraceID()
	}
	return Envelope{
		EventID: NewEventID(now), EventType: typ, EventVersion: Version,
		AggregateType: ev.aggregateType(), AggregateID: aggregateID,
		OccurredAt: now.UTC().Truncate(time.Millisecond), TraceID: traceID, Payload: p,
	}, nil
}
