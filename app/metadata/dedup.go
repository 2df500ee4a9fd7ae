package metadata

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/ThreeDotsLabs/watermill/message"
)

// DeduplicationID is msg's deduplication id where a broker deduplicates (an
// SQS FIFO queue's MessageDeduplicationId): DeduplicationIDKey, else the
// message id.
func DeduplicationID(msg *message.Message) string {
	if id := msg.Metadata.Get(DeduplicationIDKey); id != "" {
		return id
	}
	return msg.UUID
}

// DerivedDeduplicationID returns the deduplication id of a new copy of msg, a
// dead letter or a redrive, made for the reason given (which must tell this
// copy from other copies of msg): the hex SHA-256 of DeduplicationID(msg) and
// reason. The copy keeps the message id, but it must not keep the
// deduplication id: SQS would drop it as a duplicate of the original for five
// minutes (a redrive back to the source, a second dead-lettering after one)
// while the DLQ entry or the original is already gone. The same copy sent
// twice (a retried send) gets the same id and is still deduplicated.
func DerivedDeduplicationID(msg *message.Message, reason string) string {
	h := sha256.New()
	h.Write([]byte(DeduplicationID(msg)))
	h.Write([]byte{0})
	h.Write([]byte(reason))
	return hex.EncodeToString(h.Sum(nil))
}
