package metadata

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// DeadLetterKey is the metadata key of a dead letter's history: one JSON
// object (DeadLetter). It is one key, not one per field, so that a dead
// letter fits SQS's ten message attributes beside the message's own.
const DeadLetterKey = "x-dead-letter"

// DeadLetter is why and when a message was dead-lettered, on every broker.
type DeadLetter struct {
	// Reason is the error that dead-lettered the message, cut to a
	// kilobyte.
	Reason string `json:"reason"`
	// Class is the failure class of that error: permanent or transient.
	Class string `json:"class"`
	// Attempts is how many times the message was tried (1-based count).
	Attempts int `json:"attempts"`
	// FirstFailureAt and LastFailureAt are when the first and the last
	// attempt failed.
	FirstFailureAt time.Time `json:"first_failure_at"`
	LastFailureAt  time.Time `json:"last_failure_at"`
	// SourceQueue is the queue the message was consumed from; a redrive
	// sends it back there.
	SourceQueue string `json:"source_queue"`
	// DeadLetteredAt is when it was moved to the dead-letter queue.
	DeadLetteredAt time.Time `json:"dead_lettered_at"`
	// TraceID is the message's trace id.
	TraceID string `json:"trace_id,omitempty"`
}

// SetDeadLetter records d in msg's metadata.
func SetDeadLetter(msg *message.Message, d DeadLetter) {
	b, err := json.Marshal(d)
	if err != nil {
		// Unreachable: strings, an int and times always encode.
		panic(fmt.Sprintf("encode dead letter: %v", err))
	}
	msg.Metadata.Set(DeadLetterKey, string(b))
}

// DeadLetterOf reads the history of a dead letter; ok is false for a message
// eventpipe did not dead-letter (one the broker moved on its own, after a
// redrive policy's or a delivery limit's count).
func DeadLetterOf(msg *message.Message) (d DeadLetter, ok bool, err error) {
	raw := msg.Metadata.Get(DeadLetterKey)
	if raw == "" {
		return DeadLetter{}, false, nil
	}
	if err := json.Unmarshal([]byte(raw), &d); err != nil {
		return DeadLetter{}, false, fmt.Errorf("message %s: %s: %w", msg.UUID, DeadLetterKey, err)
	}
	return d, true, nil
}
